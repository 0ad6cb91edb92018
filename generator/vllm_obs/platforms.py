"""Platforms that serve vLLM under other names (catalog/platforms.yaml): reads the data and maps
names both ways, so the catalog's vLLM names are found and the bundle queries the platform's own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

import yaml

from .errors import BundleError


@dataclass(frozen=True)
class Platform:
    key: str
    title: str
    prefix: str
    colon_to_underscore: bool
    colon_kept: bool
    identity: tuple[str, ...]
    detect_series: frozenset[str]
    detect_labels: frozenset[str]
    renames_all: bool = False
    """The prefix is put before every series of the server (process_*, http_*), not only vLLM's."""
    keep: tuple[str, ...] = ()
    """Labels the platform adds that every per-replica aggregation keeps (and alerts name)."""
    job: str = ""
    """The scrape job the platform's own monitor gives the series, for the warning that says to
    select it (the bundle's queries select one job)."""

    @property
    def renames(self) -> bool:
        return bool(self.prefix) or self.colon_to_underscore

    def native(self, exposed: str) -> str | None:
        """vLLM's own exposed name for one the platform exposes, or None if it is not one."""
        if not exposed.startswith(self.prefix):
            return None
        rest = exposed[len(self.prefix) :]
        if rest.startswith("vllm:") and self.colon_kept:
            return rest
        if self.colon_to_underscore and rest.startswith("vllm_"):
            # vLLM's names have exactly one colon, right after "vllm".
            return "vllm:" + rest[len("vllm_") :]
        if not self.renames and rest.startswith("vllm:"):
            return rest
        if self.renames_all and not rest.startswith("vllm"):
            return rest
        return None

    def exposed(self, native: str, colon: bool) -> str:
        """The platform's name for a vLLM name (colon: the platform kept vLLM's colon)."""
        if not native.startswith("vllm:"):
            return self.prefix + native if self.renames_all else native
        if colon or not self.colon_to_underscore:
            return self.prefix + native
        return self.prefix + "vllm_" + native[len("vllm:") :]


@functools.cache
def platforms() -> tuple[Platform, ...]:
    text = resources.files("vllm_obs").joinpath("catalog/platforms.yaml").read_text("utf-8")
    data = yaml.safe_load(text)
    out = []
    for key, p in data["platforms"].items():
        try:
            out.append(
                Platform(
                    key=key,
                    title=p["title"],
                    prefix=p["prefix"],
                    colon_to_underscore=bool(p["colon_to_underscore"]),
                    colon_kept=bool(p["colon_kept"]),
                    identity=tuple(p["identity"]),
                    detect_series=frozenset(p["detect_series"]),
                    detect_labels=frozenset(p["detect_labels"]),
                    renames_all=bool(p.get("renames_all", False)),
                    keep=tuple(p.get("keep", ())),
                    job=str(p.get("job", "")),
                )
            )
        except (KeyError, TypeError) as exc:
            raise BundleError(f"The platform catalog is malformed at platforms.{key}: {exc}.") from None
    return tuple(out)


@dataclass(frozen=True)
class Naming:
    """How one exposition names vLLM's series: the platform (None: vLLM itself) and the map."""

    platform: Platform | None
    to_native: dict[str, str]  # exposed name -> vLLM's exposed name, for the series recognised
    colon: bool  # the platform kept vLLM's colon

    def exposed(self, native: str) -> str:
        if self.platform is None:
            return native
        return self.platform.exposed(native, self.colon)


def _mapping(platform: Platform, names: set[str], known: set[str]) -> dict[str, str]:
    """Exposed name -> vLLM's own, for the names this platform's renaming gives the known series."""
    return {n: native for n in names if (native := platform.native(n)) and native in known}


def recognise(names: Iterable[str], labels: Iterable[str], known: Iterable[str], origin: str) -> Naming:
    """Tell which platform (if any) named these series, from the names vLLM is known to use."""
    names, known = set(names), set(known)
    labels = set(labels)
    for platform in platforms():
        # A platform's monitor that renames the series and labels them (KServe's
        # LLMInferenceService) next to a plain scrape of the same server: the platform's copy
        # carries its labels; the plain one is the same engine counted again, and is left out.
        if platform.renames and labels & platform.detect_labels:
            mapping = _mapping(platform, names, known)
            if mapping:
                return Naming(platform, mapping, colon=any(":" in n for n in mapping))
    if any(n.startswith("vllm:") for n in names):
        for platform in platforms():
            if platform.renames:
                continue
            if names & platform.detect_series or labels & platform.detect_labels:
                return Naming(platform, {n: n for n in names if n.startswith("vllm:")}, colon=True)
        return Naming(None, {n: n for n in names}, colon=True)
    best: Naming | None = None
    for platform in platforms():
        if not platform.renames:
            continue
        mapping = _mapping(platform, names, known)
        if mapping and (best is None or len(mapping) > len(best.to_native)):
            colon = any(":" in n for n in mapping)
            best = Naming(platform, mapping, colon=colon)
    if best is not None:
        return best
    lookalikes = sorted(n for n in names if re.search("vllm", n, re.IGNORECASE))[:3]
    if lookalikes:
        known_forms = ", ".join(
            f"{p.title} ({p.prefix}vllm{'_' if p.colon_to_underscore else ':'}*)"
            if p.renames
            else f"{p.title} (vllm:* unchanged)"
            for p in platforms()
        )
        raise BundleError(
            f"{origin} has no vllm: series, only vLLM-like series under a naming no known platform "
            f"uses ({', '.join(lookalikes)}); known namings are vLLM's own, {known_forms}: scrape "
            "the vLLM server or the platform's metrics port directly, without renaming rules."
        )
    raise BundleError(
        f"{origin} has no vllm: series; point at a vLLM server's /metrics after it has started."
    )
