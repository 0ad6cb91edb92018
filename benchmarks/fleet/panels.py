"""Every panel query of the bundle's dashboards (or vLLM's own) as Grafana sends it (variables as a
dashboard opens, `$__rate_interval` = 4 scrape intervals, `$__range`), and the same query on the raw
series: each recording rule replaced by its definition, the panel's matchers pushed down."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from vllm_obs.promql import seconds

_METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SELECTOR = re.compile(rf"(?<![\w:\"])({_METRIC})(\{{[^}}]*\}})?")
# The same, with the range that may follow it (`name{...}[1d]`, not a subquery's `[1d:1m]`) and
# the offset (`name offset 1h`).
_RANGED = re.compile(rf"(?<![\w:\"])({_METRIC})(\{{[^}}]*\}})?(\[[^\]:]+\])?(\s+offset\s+\w+)?")
_WITH_BRACES = re.compile(rf"(?<![\w:\"])({_METRIC})\{{([^}}]*)\}}")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref: str
    expr: str  # variables substituted: what Prometheus receives from Grafana
    raw: str  # the same with every recording rule inlined

    # It reads a range of a recorded series, inlined as a subquery: its steps fall between the
    # rules' evaluations, so the two answers agree on their series but only nearly on values.
    windowed: bool = False
    instant: bool = False  # a table's instant query (/api/v1/query), not a query_range
    source: str = "bundle"  # whose dashboards: "bundle" or "vllm"

    @property
    def uses_recording_rules(self) -> bool:
        return self.expr != self.raw


def recording_rules(rule_files: list[Path]) -> dict[str, str]:
    out = {}
    for path in rule_files:
        for group in yaml.safe_load(path.read_text()).get("groups", []):
            for rule in group["rules"]:
                if "record" in rule:
                    out[rule["record"]] = rule["expr"]
    return out


def inline(expr: str, rules: dict[str, str], every: str = "15s", history: str | None = None) -> str:
    """`expr` with each recording rule replaced by its definition, matchers pushed down. A range over
    a recorded series, or one read at an offset, becomes a subquery stepping at `every`; `history`
    cuts a longer range to what the server holds (a test's few minutes): the same samples, fewer steps."""

    def replace(match: re.Match) -> str:
        name, braces, window = match.group(1), match.group(2) or "", match.group(3) or ""
        offset = match.group(4) or ""
        if name not in rules:
            return match.group(0)
        body = inline(rules[name], rules, every, history)
        matchers = braces[1:-1].strip()
        if matchers:
            body = _WITH_BRACES.sub(lambda m: f"{m.group(1)}{{{_join(m.group(2), matchers)}}}", body)
        if not window:
            return f"last_over_time(({body})[{every}:{every}]{offset})" if offset else f"({body})"
        span = window[1:-1]
        if history and seconds(span) > seconds(history):
            span = history
        return f"({body})[{span}:{every}]{offset}"

    return _RANGED.sub(replace, expr)


def windowed(expr: str, rules: dict[str, str]) -> bool:
    """Whether `expr`, or a recording rule it reads (at any depth), takes a range of a
    recorded series: `inline` makes that a subquery (see PanelQuery.windowed)."""
    for m in _RANGED.finditer(expr):
        name, window = m.group(1), m.group(3) or m.group(4)
        if name in rules and (window or windowed(rules[name], rules)):
            return True
    return False


def _join(inner: str, outer: str) -> str:
    inner = inner.strip().rstrip(",")
    return f"{inner}, {outer}" if inner else outer


def substitute(expr: str, variables: dict[str, str]) -> str:
    # Longest names first: $__rate_interval before $__range, $instance before $in...
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(name, variables[name])
    return expr


# A label's values for a variable: (series selector, label name) -> the values Prometheus holds.
LabelValues = Callable[[str, str], list[str]]
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(.*\S)\s*,\s*)?([a-zA-Z_]\w*)\s*\)\s*$", re.S)
_REGEX_SPECIAL = re.compile(r"[$^*{}\[\]'+?.()|]")


def grafana_regex_escape(value: str) -> str:
    """A value as Grafana writes it into a Prometheus regex matcher: metacharacters escaped, with
    the backslash doubled for the PromQL string."""
    return _REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), value.replace("\\", "\\\\\\\\"))


def all_value(values: list[str]) -> str:
    """Grafana's All without a custom all value: every value of the variable, one alternation."""
    escaped = [grafana_regex_escape(v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def all_values(
    dashboard: dict, first: dict[str, str] | None = None, label_values: LabelValues | None = None
) -> dict[str, str]:
    """Each variable as the dashboard opens: a query variable at All, its allValue, or without one
    every value `label_values` finds for the variable's query (`.*` when not given); without an All
    option, on its first value (`first`, by variable); a custom variable on its current value."""
    out: dict[str, str] = {}
    for var in dashboard.get("templating", {}).get("list", []):
        name = "$" + var["name"]
        if var.get("type") == "custom":
            current = var.get("current", {}).get("value")
            if not isinstance(current, str):
                raise ValueError(f"{dashboard.get('title')}: ${var['name']} has no single current value")
            out[name] = current
            continue
        if var.get("type") != "query":
            continue
        if not var.get("includeAll", True):
            if first and name in first:
                out[name] = first[name]
                continue
            raise ValueError(
                f"{dashboard.get('title')}: ${var['name']} has no All; give the value it opens on"
            )
        if var.get("allValue") or label_values is None:
            out[name] = var.get("allValue") or ".*"
            continue
        query = var.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        found = _LABEL_VALUES.match(substitute(query, out))
        if not found:
            raise ValueError(f"{dashboard.get('title')}: ${var['name']} is not a label_values() query: {query}")
        values = sorted(label_values(found.group(1) or "", found.group(2)))
        if not values:
            raise ValueError(f"{dashboard.get('title')}: ${var['name']} finds no values for {query}")
        out[name] = all_value(values)
    return out


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
_KEYWORDS |= {"group_left", "group_right", "inf", "nan", "atan2"}
_NAME = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:]|\s*\()")


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects: every identifier outside strings, matchers, grouping
    label lists and ranges that is no function or keyword."""
    bare = _STRING.sub('""', expr)
    bare = re.sub(r"\{[^}]*\}", "{}", bare)
    bare = _GROUPING.sub("", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    return {n for n in _NAME.findall(bare) if n.lower() not in _KEYWORDS}


def _panels(panels: list[dict]):
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def load_dashboards(dashboards_dir: Path) -> list[tuple[Path, dict]]:
    """The Grafana dashboards (*.json) of a directory; a file that is no dashboard is refused."""
    out = []
    for path in sorted(dashboards_dir.glob("*.json")):
        try:
            dashboard = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} is not readable JSON ({exc})") from None
        if not isinstance(dashboard, dict) or not isinstance(dashboard.get("panels"), list):
            raise ValueError(f"{path} is not a Grafana dashboard (no panels list)")
        out.append((path, dashboard))
    return out


def panel_queries(
    dashboards_dir: Path,
    rules: dict[str, str],
    rate_interval: str,
    range_: str,
    step: str,
    every: str = "15s",
    history: str | None = None,
    first: dict[str, str] | None = None,
    label_values: LabelValues | None = None,
    source: str = "bundle",
) -> list[PanelQuery]:
    """Every panel's queries; `every` is the rules' evaluation interval, `history` how far back the
    server holds samples (see `inline`), `first` and `label_values` how variables open (`all_values`:
    e.g. {"$instance": the lowest instance name} for one without All)."""
    out = []
    for path, dashboard in load_dashboards(dashboards_dir):
        variables = {
            **all_values(dashboard, first, label_values),
            "$__rate_interval": rate_interval,
            "$__range": range_,
            "$__interval": step,
        }
        for panel in _panels(dashboard.get("panels", [])):
            for target in panel.get("targets", []):
                if not target.get("expr") or target.get("hide"):
                    continue
                expr = substitute(target["expr"], variables)
                if "$" in expr:
                    raise ValueError(f"{path.name} / {panel.get('title')}: unresolved variable in {expr}")
                out.append(
                    PanelQuery(
                        dashboard=dashboard.get("title", path.stem),
                        panel=panel.get("title", ""),
                        ref=target.get("refId", ""),
                        expr=expr,
                        raw=inline(expr, rules, every, history),
                        windowed=windowed(expr, rules),
                        instant=bool(target.get("instant")) and not target.get("range", False),
                        source=source,
                    )
                )
    return out


def recorded_names_in(expr: str, rules: dict[str, str]) -> list[str]:
    return [m.group(1) for m in _SELECTOR.finditer(expr) if m.group(1) in rules]
