"""The servers to probe: `--target URL` or `--target INSTANCE=URL`. The `target` label defaults to
the URL's host:port with the port explicit, what Prometheus writes as `instance` for a static target
of the same server, so the probe's series and vLLM's own series join on it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


class TargetError(ValueError):
    """A --target value that cannot be used; the message is one sentence for the user."""


@dataclass(frozen=True)
class Target:
    instance: str  # the `target` label value
    base_url: str  # scheme://host[:port][/prefix], no trailing slash

    def url(self, path: str) -> str:
        return self.base_url + path


def default_instance(host: str, port: int) -> str:
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]:{port}"
    except ValueError:
        pass
    return f"{host}:{port}"


def parse_target(value: str) -> Target:
    instance, url = None, value
    name, sep, rest = value.partition("=")
    if sep and "://" not in name:
        instance, url = name.strip(), rest.strip()
        if not instance:
            raise TargetError(
                f"--target {value!r} has an empty name before '='; use INSTANCE=URL or just URL"
            )
    parts = urlsplit(url.strip())
    if parts.scheme not in DEFAULT_PORTS:
        raise TargetError(
            f"--target {value!r} is not an http:// or https:// URL; give the vLLM base URL, e.g. http://vllm:8000"
        )
    if parts.username is not None or parts.password is not None:
        raise TargetError(
            f"--target {value!r} carries credentials in the URL; pass the key with --api-key-file or VLLM_API_KEY"
        )
    if parts.query or parts.fragment:
        raise TargetError(f"--target {value!r} has a query or fragment; give the base URL only")
    try:
        port = parts.port
    except ValueError:
        raise TargetError(f"--target {value!r} has an invalid port") from None
    if not parts.hostname:
        raise TargetError(f"--target {value!r} has no host name")
    port = port if port is not None else DEFAULT_PORTS[parts.scheme]
    base = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
    return Target(instance or default_instance(parts.hostname, port), base)


def parse_targets(values: list[str]) -> list[Target]:
    targets = [parse_target(v) for v in values]
    seen: dict[str, Target] = {}
    for target in targets:
        if target.instance in seen:
            raise TargetError(
                f"two targets have the label {target.instance!r}; name them apart with INSTANCE=URL"
            )
        seen[target.instance] = target
    return targets
