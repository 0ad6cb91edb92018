"""Write rule groups as Prometheus rule files."""

from __future__ import annotations

from typing import Any

from ..config import BundleConfig
from ..links import dashboard_url, runbook_url
from ..yamlfmt import dump
from .model import Alert, Group, Recording


def rule_file(groups: list[Group], cfg: BundleConfig, header: list[str]) -> str:
    return dump({"groups": [_group(g, cfg) for g in groups]}, header)


def _group(group: Group, cfg: BundleConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"name": group.name}
    if group.interval:
        out["interval"] = group.interval
    out["rules"] = [_rule(r, cfg) for r in group.rules]
    return out


def _rule(rule: Recording | Alert, cfg: BundleConfig) -> dict[str, Any]:
    if isinstance(rule, Recording):
        return {"record": rule.record, "expr": rule.expr}
    out: dict[str, Any] = {"alert": rule.name, "expr": rule.expr}
    if rule.for_:
        out["for"] = rule.for_
    out["labels"] = alert_labels(rule)
    out["annotations"] = alert_annotations(rule, cfg)
    return out


def alert_labels(rule: Alert) -> dict[str, str]:
    return {"severity": rule.severity, **rule.labels}


def alert_annotations(rule: Alert, cfg: BundleConfig) -> dict[str, str]:
    return {
        "summary": rule.summary,
        "description": rule.description,
        "runbook_url": runbook_url(cfg, rule.name),
        "dashboard_url": dashboard_url(cfg, rule.dashboard, rule.name),
    }
