"""Render the few Go-template constructs the bundle's annotations use, as Prometheus does, since the
promtool tests assert full annotations. Covers label and value references, the humanize family,
`urlquery` and `if ... end`; anything else is a bug and raises.
"""

from __future__ import annotations

import math
import re
import urllib.parse

_IF = re.compile(r"\{\{ if \$labels\.(\w+) \}\}(.*?)\{\{ end \}\}", re.S)
_ACTION = re.compile(r"\{\{ (\$labels\.(\w+)|\$value)(?: \| (\w+))? \}\}")


def go_g4(value: float) -> str:
    """Go's fmt %.4g."""
    if value == 0:
        return "0"
    text = f"{value:.4g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = exponent[0]
        digits = exponent[1:].lstrip("0").rjust(2, "0")
        text = f"{mantissa}e{sign}{digits}"
    return text


def go_float(value: float) -> str:
    """Go's fmt %v for a float64 (strconv 'g', shortest, exponent from 1e21)."""
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = "-" if exponent.startswith("-") else "+"
        text = f"{mantissa}e{sign}{exponent.lstrip('+-').rjust(2, '0')}"
    return text


def _small(value: float) -> tuple[float, str]:
    """Scale a value below 1 up by thousands, with its SI prefix (m, u, n...)."""
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(value) >= 1:
            break
        prefix = p
        value *= 1000
    return value, prefix


def humanize(value: float) -> str:
    if value == 0 or math.isnan(value) or math.isinf(value):
        return go_g4(value)
    if abs(value) < 1:
        scaled, prefix = _small(value)
        return f"{go_g4(scaled)}{prefix}"
    prefix = ""
    for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
        if abs(value) < 1000:
            break
        prefix = p
        value /= 1000
    return f"{go_g4(value)}{prefix}"


def humanize_duration(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return go_g4(value)
    if value == 0:
        return f"{go_g4(value)}s"
    if abs(value) >= 1:
        sign = "-" if value < 0 else ""
        value = abs(value)
        whole = int(value)
        secs, mins, hours, days = whole % 60, (whole // 60) % 60, (whole // 3600) % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {mins}m {secs}s"
        if hours:
            return f"{sign}{hours}h {mins}m {secs}s"
        if mins:
            return f"{sign}{mins}m {secs}s"
        return f"{sign}{go_g4(value)}s"
    scaled, prefix = _small(value)
    return f"{go_g4(scaled)}{prefix}s"


def humanize_percentage(value: float) -> str:
    return f"{go_g4(value * 100)}%"


_FUNCS = {
    None: lambda v: v,
    "humanize": humanize,
    "humanizeDuration": humanize_duration,
    "humanizePercentage": humanize_percentage,
}


# A query for the alert's model (expressions.looked_up / listed): its first value, or its results listed.
_STR = r'"((?:[^"\\]|\\.)*)"[^|]*\| query'
_FIRST = re.compile(
    r"\{\{ with printf " + _STR + r' \}\}\{\{ \. \| first \| value( \| \w+| \| printf "%\.1f")? \}\}\{\{ end \}\}'
)
_LIST = re.compile(
    r"\{\{ with printf " + _STR + r'(?: \| sortByLabel "(\w+)")? \}\}([^{]*)'
    r"\{\{ range \$i, \$r := \. \}\}\{\{ if \$i \}\}, \{\{ end \}\}\{\{ \$r\.Labels\.(\w+) \}\} "
    r"\(\{\{ (?:\$r\.Labels\.(\w+)|\$r\.Value \| (humanizePercentage)) \}\}\)\{\{ end \}\}\{\{ end \}\}"
)
_MATCHERS = re.compile(r"\w+=%q(?:, \w+=%q)*")


def query_key(printf_text: str) -> str:
    """The expression a looked-up query was built from (its model matchers back as $model)."""
    text = re.sub(r"\\(.)", r"\1", printf_text)
    return _MATCHERS.sub("$model", text).replace("%%", "%")


def _shown(value: float, fmt: str | None) -> str:
    if fmt is None:
        return go_float(value)
    if fmt == ' | printf "%.1f"':
        return f"{value:.1f}"
    return _FUNCS[fmt.removeprefix(" | ")](value)


def render(
    template: str,
    labels: dict[str, str],
    value: float,
    lookups: dict[str, list[tuple[dict, float]]] | None = None,
) -> str:
    """`lookups`: what each expression a template queries (query_key) returns for the alert."""
    found = lookups or {}

    def first(match: re.Match) -> str:
        rows = found.get(query_key(match.group(1)), [])
        return _shown(rows[0][1], match.group(2)) if rows else ""

    def listed(match: re.Match) -> str:
        rows = found.get(query_key(match.group(1)), [])
        if not rows:
            return ""
        sort, before, label, shown, share = match.groups()[1:]
        if sort:
            rows = sorted(rows, key=lambda r: r[0].get(sort, ""))
        items = [
            f"{r[0].get(label, '')} ({humanize_percentage(r[1]) if share else r[0].get(shown, '')})"
            for r in rows
        ]
        return before + ", ".join(items)

    template = _LIST.sub(listed, _FIRST.sub(first, template))

    def if_block(match: re.Match) -> str:
        return match.group(2) if labels.get(match.group(1)) else ""

    def action(match: re.Match) -> str:
        label, func = match.group(2), match.group(3)
        if label is not None:
            text = labels.get(label, "")
            if func == "urlquery":
                return urllib.parse.quote_plus(text, safe="")
            if func is not None:
                raise ValueError(f"unsupported pipeline {func} on a label")
            return text
        if func is None:
            return go_float(value)
        if func not in _FUNCS:
            raise ValueError(f"unsupported pipeline {func} on $value")
        return _FUNCS[func](value)

    out = _ACTION.sub(action, _IF.sub(if_block, template))
    if "{{" in out:
        raise ValueError(f"unsupported template construct in {template!r}")
    return out
