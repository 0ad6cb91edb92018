"""vLLM release numbers: parsing and ordering ("0.9.0.1" sorts after "0.9.0")."""

from __future__ import annotations

import re

from .errors import BundleError

_RELEASE = re.compile(r"^v?(\d+(?:\.\d+){1,3})$")

Release = tuple[int, ...]


def parse_release(text: str) -> Release:
    """Turn "0.10.2" (or "v0.10.2") into (0, 10, 2); reject anything else."""
    match = _RELEASE.match(str(text).strip())
    if not match:
        raise BundleError(
            f"'{text}' is not a vLLM release number; write it like 0.10.2 "
            "(what `python -c 'import vllm; print(vllm.__version__)'` prints, without a suffix)."
        )
    return tuple(int(part) for part in match.group(1).split("."))


def release_text(release: Release) -> str:
    return ".".join(str(part) for part in release)


def minor_of(release: Release) -> Release:
    return release[:2]
