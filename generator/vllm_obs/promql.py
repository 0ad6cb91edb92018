"""Small helpers for writing PromQL text: selectors, durations, bucket matchers."""

from __future__ import annotations

import re

from prometheus_client.utils import floatToGoString

from .errors import BundleError

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def seconds(duration: str) -> float:
    """Seconds in a Prometheus duration ("1h30m" -> 5400)."""
    total, pos = 0.0, 0
    for match in _PART.finditer(duration):
        if match.start() != pos:
            break
        total += int(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(duration) or not duration:
        raise BundleError(f"'{duration}' is not a Prometheus duration like 5m.")
    return total


def selector(name: str, *matchers: str) -> str:
    inner = ", ".join(m for m in matchers if m)
    return f"{name}{{{inner}}}" if inner else name


def quote(text: str) -> str:
    """A PromQL double-quoted string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def number(value: float) -> str:
    """A threshold as PromQL text: 2 not 2.0, 0.05 not 5e-02."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def le_matcher(bound: float) -> str:
    """Match one bucket bound however the server and Prometheus spell it: prometheus_client writes
    "1.0" and Prometheus 3 normalises it to "1" on ingest, so SLO rules work across that upgrade.
    """
    text = floatToGoString(bound)
    if float(bound).is_integer():
        whole = str(int(bound))
        return f'le=~"{whole}|{whole}\\\\.0"'
    return f'le="{text}"'


def bucket_text(bound: float) -> str:
    """The le value prometheus_client writes for a bound."""
    return floatToGoString(bound)


EQUALITY = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*$')


def equality_labels(matchers: str) -> dict[str, str]:
    """Parse 'a="x", b="y"' (equality matchers only) into a dict."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in _split(matchers))):
        match = EQUALITY.match(part)
        if not match:
            raise BundleError(
                f"the selector part '{part}' is not an equality matcher like namespace=\"llm\"; "
                'only label="value" matchers are supported there.'
            )
        out[match.group(1)] = match.group(2)
    return out


def _split(text: str) -> list[str]:
    parts, current, quoted, escaped = [], "", False, False
    for char in text:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            current += char
            escaped = True
        elif char == '"':
            current += char
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts
