"""Read the deployment files the way their tools do: compose files with their YAML tags,
variable interpolation and override merging; Kubernetes manifests as lists of objects."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "docker-compose.yml"
CPU = REPO / "docker-compose.cpu.yml"
KUBERNETES = REPO / "kubernetes"
SCHEMAS = REPO / "tests" / "fixtures" / "schemas"


@dataclass(frozen=True)
class Reset:
    """A value tagged `!reset` in an override file: removes the key from the merged result."""

    value: Any


@dataclass(frozen=True)
class Override:
    """A value tagged `!override`: replaces the base value instead of merging with it."""

    value: Any


class ComposeLoader(yaml.SafeLoader):
    """PyYAML's safe loader plus the two tags of the Compose Specification."""


def _tagged(cls: type) -> Any:
    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        if isinstance(node, yaml.MappingNode):
            return cls(loader.construct_mapping(node, deep=True))
        if isinstance(node, yaml.SequenceNode):
            return cls(loader.construct_sequence(node, deep=True))
        return cls(loader.construct_scalar(node))

    return construct


ComposeLoader.add_constructor("!reset", _tagged(Reset))
ComposeLoader.add_constructor("!override", _tagged(Override))


def load_compose(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=ComposeLoader)


def plain(value: Any) -> Any:
    """The document as its schema sees it: tags removed, the tagged values kept."""
    if isinstance(value, (Reset, Override)):
        return plain(value.value)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# Sequences that compose merges by appending (ports, volumes...); others are replaced.
_APPENDED = {"ports", "expose", "volumes", "secrets", "configs", "cap_add", "cap_drop", "profiles"}


def merge(base: Any, override: Any, key: str = "") -> Any:
    """`docker compose -f base -f override` for the shapes these files use."""
    if isinstance(override, Override):
        return plain(override.value)
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        out = dict(base)
        for k, v in override.items():
            if isinstance(v, Reset):
                out.pop(k, None)
            elif k in out:
                out[k] = merge(out[k], v, k)
            else:
                out[k] = plain(v)
        return out
    if isinstance(base, list) and isinstance(override, list) and key in _APPENDED:
        return base + [v for v in plain(override) if v not in base]
    return plain(override)


def stacks() -> dict[str, dict[str, Any]]:
    """The two ways the README runs the stack, as the merged documents compose would use."""
    base = load_compose(BASE)
    return {"docker-compose.yml": plain(base), "docker-compose.yml + cpu": merge(base, load_compose(CPU))}


_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


@dataclass(frozen=True)
class Variable:
    name: str
    op: str | None  # ":-", "-", ":?", "?", ":+", "+" or None
    argument: str | None


def variables(text: str) -> list[Variable]:
    """Every ${VAR...} reference in a string (not $$-escaped ones)."""
    out = []
    for match in _VARIABLE.finditer(text):
        if match["escaped"]:
            continue
        name = match["braced"] or match["bare"]
        out.append(Variable(name, match["op"], match["arg"]))
    return out


class InterpolationError(ValueError):
    pass


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's interpolation of every string in a document, with `env` as the shell."""
    if isinstance(value, Mapping):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["bare"]
        op, arg = match["op"], match["arg"] or ""
        current = env.get(name)
        unset_or_empty = not current
        if op in (":-", "-"):
            missing = unset_or_empty if op == ":-" else current is None
            return interpolate(arg, env) if missing else current  # type: ignore[return-value]
        if op in (":?", "?"):
            missing = unset_or_empty if op == ":?" else current is None
            if missing:
                raise InterpolationError(f"{name}: {arg}")
            return current  # type: ignore[return-value]
        if op in (":+", "+"):
            present = not unset_or_empty if op == ":+" else current is not None
            return interpolate(arg, env) if present else ""
        return current or ""

    return _VARIABLE.sub(substitute, value)


def container_port(spec: str | int | Mapping[str, Any]) -> str:
    if isinstance(spec, Mapping):
        return str(spec["target"]).split("/")[0]
    return str(spec).rsplit(":", 1)[-1].split("/")[0]


def host_ip(spec: str | int | Mapping[str, Any]) -> str | None:
    """The host address of a published port, None when it has none (all interfaces)."""
    if isinstance(spec, Mapping):
        return spec.get("host_ip")
    parts = str(spec).split(":")
    if len(parts) < 3:
        return None
    return ":".join(parts[:-2])


def k8s_documents(*names: str) -> list[dict[str, Any]]:
    docs = []
    for name in names:
        docs += [d for d in yaml.safe_load_all((KUBERNETES / name).read_text()) if d]
    return docs


def deep_copy(doc: Any) -> Any:
    return copy.deepcopy(doc)


def map_paths(words: list[str], paths: Mapping[str, str]) -> list[str]:
    """Container paths in a command line (`PATH` or `--flag=PATH`) replaced by local ones:
    whole path components only, the longest container path first, once per word."""
    out = []
    for word in words:
        flag, eq, value = word.partition("=") if word.startswith("-") else ("", "", word)
        for container in sorted(paths, key=len, reverse=True):
            if value == container or value.startswith(container.rstrip("/") + "/"):
                value = paths[container] + value[len(container) :]
                break
        out.append(f"{flag}{eq}{value}")
    return out


def volume_sources(service: Mapping[str, Any], volumes_root: Path) -> dict[str, str]:
    """container path -> local path for a service's volumes: bind mounts from the checkout,
    named volumes as folders under volumes_root."""
    paths = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        paths[target] = str(REPO / source) if source.startswith("./") else str(volumes_root / source)
    return paths
