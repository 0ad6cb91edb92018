"""Expand Grafana template variables in a panel query the way Grafana sends it to Prometheus."""

from __future__ import annotations

import re

from ..promql import seconds

# $name, ${name}, ${name:format}, [[name]]
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]")


def expand(expr: str, values: dict[str, str]) -> str:
    """Replace every variable named in values; others are left as they are."""

    def replace(match: re.Match) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        return values.get(name, match.group(0))

    return _VARIABLE.sub(replace, expr)


def builtins(range_text: str, scrape_interval: str, width_px: int = 1000) -> dict[str, str]:
    """$__range, $__interval and $__rate_interval for a dashboard's time range, as Grafana makes them:
    $__interval is the range over the panel's width (at least the scrape interval), $__rate_interval
    max($__interval + scrape interval, 4 x scrape interval).
    """
    range_s = _range_seconds(range_text)
    scrape = seconds(scrape_interval)
    interval = max(scrape, range_s / width_px)
    rate_interval = max(interval + scrape, 4 * scrape)
    return {
        "__range": _duration(range_s),
        "__range_s": str(int(range_s)),
        "__range_ms": str(int(range_s * 1000)),
        "__interval": _duration(interval),
        "__interval_ms": str(int(interval * 1000)),
        "__rate_interval": _duration(rate_interval),
    }


def regex_alternatives(values: list[str]) -> str:
    """What Grafana writes for a multi-value variable in a Prometheus query: (a|b|c)."""
    escaped = [re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def _range_seconds(text: str) -> float:
    """now-1h -> 3600; anything else falls back to an hour."""
    match = re.fullmatch(r"now-(\d+[smhdwy])", text.strip())
    return seconds(match.group(1)) if match else 3600.0


def _duration(value: float) -> str:
    whole = max(1, round(value))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"
