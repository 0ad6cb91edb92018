"""Every panel query of the bundle's dashboards, as Grafana would send it, and the same
query computed straight from the raw series.

Grafana's side: the template variables set to All (their allValue), `$__rate_interval`
= 4 x the scrape interval, `$__range` = the dashboard's range.

The raw side is derived mechanically: each recording rule a panel reads is replaced by
its definition (recursively, for rules built on rules), with the panel's label matchers
pushed into every selector of the definition. The two queries then answer the same
question, one from the recorded series, one the way the vLLM project's own example
dashboards do it (`histogram_quantile` over `rate` of `_bucket` per panel).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

_METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SELECTOR = re.compile(rf"(?<![\w:\"])({_METRIC})(\{{[^}}]*\}})?")
_WITH_BRACES = re.compile(rf"(?<![\w:\"])({_METRIC})\{{([^}}]*)\}}")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref: str
    expr: str  # variables substituted: what Prometheus receives from Grafana
    raw: str  # the same with every recording rule inlined

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


def inline(expr: str, rules: dict[str, str]) -> str:
    """`expr` with each recording rule replaced by its definition, matchers pushed down."""

    def replace(match: re.Match) -> str:
        name, braces = match.group(1), match.group(2) or ""
        if name not in rules:
            return match.group(0)
        body = inline(rules[name], rules)
        matchers = braces[1:-1].strip()
        if matchers:
            body = _WITH_BRACES.sub(lambda m: f"{m.group(1)}{{{_join(m.group(2), matchers)}}}", body)
        return f"({body})"

    return _SELECTOR.sub(replace, expr)


def _join(inner: str, outer: str) -> str:
    inner = inner.strip().rstrip(",")
    return f"{inner}, {outer}" if inner else outer


def substitute(expr: str, variables: dict[str, str]) -> str:
    # Longest names first: $__rate_interval before $__range, $instance before $in...
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(name, variables[name])
    return expr


def all_values(dashboard: dict) -> dict[str, str]:
    """Each query variable at All: its allValue (Grafana sends `.*` when none is set)."""
    out = {}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            out["$" + var["name"]] = var.get("allValue") or ".*"
    return out


def _panels(panels: list[dict]):
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def panel_queries(
    dashboards_dir: Path, rules: dict[str, str], rate_interval: str, range_: str, step: str
) -> list[PanelQuery]:
    out = []
    for path in sorted(dashboards_dir.glob("*.json")):
        dashboard = json.loads(path.read_text())
        variables = {
            **all_values(dashboard),
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
                        raw=inline(expr, rules),
                    )
                )
    return out


def recorded_names_in(expr: str, rules: dict[str, str]) -> list[str]:
    return [m.group(1) for m in _SELECTOR.finditer(expr) if m.group(1) in rules]
