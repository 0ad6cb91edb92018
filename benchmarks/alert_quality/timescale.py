"""A generated bundle on a clock `factor` times as fast, so a simulated day runs in an hour on a real
Prometheus and Alertmanager: durations and per-second functions divided, time() on the virtual clock,
anything else that reads the clock refused (README, "The clock").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from vllm_obs.promql import seconds

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))
# A name character before a keyword or function makes it part of a metric name instead.
_NOT_NAME = r"(?<![\w:])"
_DURATION = r"\d[0-9a-z]*"
_RANGE = re.compile(rf"\[\s*({_DURATION})\s*(?::\s*({_DURATION})?\s*)?\]")
_OFFSET = re.compile(rf"{_NOT_NAME}offset\s+(-?)\s*({_DURATION})", re.I)
_PER_SECOND = re.compile(rf"{_NOT_NAME}(rate|irate|deriv)\s*\(")
_CLOCK = re.compile(rf"{_NOT_NAME}(time|timestamp)\s*\(")
_PREDICT = re.compile(rf"{_NOT_NAME}predict_linear\s*\(")
# Functions that read the clock in a way the rewrite does not translate, and the @ modifier.
_UNKNOWN_CLOCK = re.compile(
    rf"{_NOT_NAME}(day_of_month|day_of_week|day_of_year|days_in_month|hour|minute|month|year|holt_winters"
    r"|double_exponential_smoothing)\s*\(|@"
)
# String literals (label values, regexes, label_replace's arguments) are never rewritten.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_HELD = re.compile(r"\x00(\d+)\x00")
# Prometheus' own default, scaled with the rest (a sample older than this is not current).
LOOKBACK_DELTA = "5m"
RESEND_DELAY = "1m"


class TimeScaleError(ValueError):
    """A bundle the rewrite cannot put on the fast clock."""


def duration(value: str, factor: float) -> str:
    """A Prometheus duration divided by the factor, in whole milliseconds ("5m", 10 -> "30s")."""
    ms = round(seconds(value) * 1000 / factor)
    if ms == 0:
        return "0s" if seconds(value) == 0 else "1ms"
    out = ""
    for unit, size in _UNITS:
        if ms >= size:
            out += f"{ms // size}{unit}"
            ms %= size
    return out


def virtual_epoch(anchor: float, start: float, factor: float) -> float:
    """The virtual timestamp of simulated time 0 when the simulation starts at wall time `start`
    and the rules were rewritten around `anchor` (virtual = anchor + (wall - anchor) * factor)."""
    return anchor + (start - anchor) * factor


def expression(expr: str, factor: float, epoch: float) -> str:
    """One PromQL expression on the fast clock (see the module's docstring)."""
    strings: list[str] = []

    def hold(m: re.Match) -> str:
        strings.append(m.group(0))
        return f"\x00{len(strings) - 1}\x00"

    code = _STRING.sub(hold, expr)
    unknown = _UNKNOWN_CLOCK.search(code)
    if unknown:
        raise TimeScaleError(f"cannot put {unknown.group(0)!r} on a fast clock, in: {expr}")
    code = _RANGE.sub(
        lambda m: (
            f"[{duration(m.group(1), factor)}"
            + (f":{duration(m.group(2), factor) if m.group(2) else ''}" if ":" in m.group(0) else "")
            + "]"
        ),
        code,
    )
    code = _OFFSET.sub(lambda m: f"offset {m.group(1)}{duration(m.group(2), factor)}", code)
    code = _wrap(code, _PER_SECOND, lambda call: f"({call} / {_number(factor)})")
    e = _number(epoch)
    code = _wrap(code, _CLOCK, lambda call: f"({e} + ({call} - {e}) * {_number(factor)})")
    code = _wrap(code, _PREDICT, lambda call: _predict(call, factor))
    return _HELD.sub(lambda m: strings[int(m.group(1))], code)


def rules(data: dict, factor: float, epoch: float) -> dict:
    """A rule file's groups on the fast clock."""
    for group in data.get("groups", []):
        if "interval" in group:
            group["interval"] = duration(group["interval"], factor)
        for rule in group.get("rules", []):
            rule["expr"] = expression(str(rule["expr"]), factor, epoch)
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = duration(rule[key], factor)
    return data


def prometheus(data: dict, factor: float) -> dict:
    for section in [data.get("global", {}), *data.get("scrape_configs", [])]:
        for key in ("scrape_interval", "scrape_timeout", "evaluation_interval"):
            if key in section:
                section[key] = duration(section[key], factor)
    return data


def alertmanager(data: dict, factor: float) -> dict:
    def route(node: dict) -> None:
        for key in ("group_wait", "group_interval", "repeat_interval"):
            if key in node:
                node[key] = duration(node[key], factor)
        for child in node.get("routes", []):
            route(child)

    route(data.get("route", {}))
    return data


def prometheus_flags(factor: float) -> list[str]:
    """The command-line durations of Prometheus on the fast clock."""
    return [
        f"--query.lookback-delta={duration(LOOKBACK_DELTA, factor)}",
        f"--rules.alert.resend-delay={duration(RESEND_DELAY, factor)}",
    ]


def bundle(folder: Path, factor: float, epoch: float) -> None:
    """Rewrite a generated bundle in place: its rule files, prometheus.yml and alertmanager.yml."""
    for path in sorted((folder / "alerts").glob("*.rules.yml")):
        _rewrite(path, lambda d: rules(d, factor, epoch))
    _rewrite(folder / "prometheus" / "prometheus.yml", lambda d: prometheus(d, factor))
    _rewrite(folder / "alerts" / "alertmanager.yml", lambda d: alertmanager(d, factor))


def _rewrite(path: Path, change) -> None:
    data: Any = yaml.safe_load(path.read_text())
    staged = path.with_suffix(".tmp")
    staged.write_text(yaml.safe_dump(change(data), sort_keys=False, width=120))
    staged.replace(path)


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def _wrap(expr: str, pattern: re.Pattern, replace) -> str:
    """Replace every call `name(...)` that `pattern` finds (its opening up to the parenthesis)
    by replace(call), innermost calls included."""
    out, pos = [], 0
    for match in pattern.finditer(expr):
        if match.start() < pos:
            continue
        end = _closing(expr, match.end() - 1)
        inner = _wrap(expr[match.end() : end], pattern, replace)
        out.append(expr[pos : match.start()])
        out.append(replace(f"{match.group(0)}{inner})"))
        pos = end + 1
    out.append(expr[pos:])
    return "".join(out)


def _closing(expr: str, opening: int) -> int:
    depth = 0
    for i in range(opening, len(expr)):
        if expr[i] == "(":
            depth += 1
        elif expr[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise TimeScaleError(f"unbalanced parentheses in: {expr}")


def _predict(call: str, factor: float) -> str:
    """predict_linear(v[w], horizon) with the horizon (wall seconds) divided by the factor."""
    body = call[call.index("(") + 1 : -1]
    depth, split = 0, None
    for i, ch in enumerate(body):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            split = i
    horizon = body[split + 1 :].strip() if split is not None else ""
    if not re.fullmatch(r"[0-9.]+", horizon):
        raise TimeScaleError(f"predict_linear's horizon must be a number of seconds, in: {call}")
    return f"predict_linear({body[:split]}, {_number(float(horizon) / factor)})"
