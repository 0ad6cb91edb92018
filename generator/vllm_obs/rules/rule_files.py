"""Write rule groups as Prometheus rule files."""

from __future__ import annotations

from typing import Any

from ..links import dashboard_url, runbook_url
from ..vocabulary import Vocabulary
from ..yamlfmt import dump
from .model import Alert, Group, Recording


def rule_file(groups: list[Group], v: Vocabulary, header: list[str]) -> str:
    return dump({"groups": [rule_group(g, v) for g in groups]}, header)


def rule_group(group: Group, v: Vocabulary) -> dict[str, Any]:
    out: dict[str, Any] = {"name": group.name}
    if group.interval:
        out["interval"] = group.interval
    out["rules"] = [_rule(r, v) for r in group.rules]
    return out


def _rule(rule: Recording | Alert, v: Vocabulary) -> dict[str, Any]:
    if isinstance(rule, Recording):
        return {"record": rule.record, "expr": rule.expr}
    out: dict[str, Any] = {"alert": rule.name, "expr": rule.expr}
    if rule.for_:
        out["for"] = rule.for_
    if rule.keep_firing_for:
        out["keep_firing_for"] = rule.keep_firing_for
    out["labels"] = alert_labels(rule)
    out["annotations"] = alert_annotations(rule, v)
    return out


def alert_labels(rule: Alert) -> dict[str, str]:
    return {"severity": rule.severity, **rule.labels}


def alert_annotations(rule: Alert, v: Vocabulary) -> dict[str, str]:
    """Summary and description, and the links where links.* says where they go (no guessed URL)."""
    out = {"summary": rule.summary, "description": rule.description}
    if v.cfg.links.runbook_url:
        out["runbook_url"] = runbook_url(v.cfg, rule.name)
    if v.cfg.links.grafana_url:
        out["dashboard_url"] = dashboard_url(v, rule.dashboard, rule.panel)
    return out
