"""promtool unit tests for every alert, from the cases its declaration builds: where it fires (full
labels and annotations asserted), where it stays silent, and its `for` boundary (nothing one
evaluation before, the alert exactly at it).
"""

from __future__ import annotations

from ..vocabulary import Vocabulary
from .assembly import Assembled, scenarios
from .gotemplate import render
from .model import Alert
from .rule_files import alert_annotations, alert_labels
from .scenario_kit import Case, Expect


def test_files(
    assembled: Assembled, v: Vocabulary, rule_files: list[str], recording: list[str]
) -> dict[str, dict]:
    """One promtool test document per alert group and evaluation interval, keyed by the group's
    name (`-every-5m` after it for cases that evaluate other than every minute)."""
    cases = scenarios(assembled, v)
    out = {}
    for group in assembled.groups:
        names = list(dict.fromkeys(rule.name for rule in group.rules if isinstance(rule, Alert)))
        chosen = [case for name in names for case in cases[name]]
        for every in dict.fromkeys(case.every for case in chosen):
            key = group.name if every == "1m" else f"{group.name}-every-{every}"
            out[key] = {
                "rule_files": rule_files,
                "evaluation_interval": every,
                # Recording groups first, as a settled Prometheus sees them; promtool's
                # default order would let alerts read a recorded series one step late.
                "group_eval_order": [*recording, group.name],
                "tests": [_test(case, v) for case in chosen if case.every == every],
            }
    return out


def _test(case: Case, v: Vocabulary) -> dict:
    span = case.samples
    series = [{"series": s, "values": v} for s, v in case.series.items()]
    for item in series:
        # Make every series long enough for the last check.
        values = item["values"]
        if "x" in values and values.split("x")[-1].isdigit() and int(values.split("x")[-1]) < span:
            item["values"] = values.rsplit("x", 1)[0] + f"x{span}"
    out = {
        "name": case.name,
        "interval": case.interval,
        "input_series": series,
        "alert_rule_test": [
            {
                "eval_time": _at(check.minute),
                "alertname": check.alertname,
                "exp_alerts": [_expected(e, v) for e in check.expected],
            }
            for check in case.checks
        ],
    }
    if case.queries:
        out["promql_expr_test"] = [
            {
                "expr": q.expr,
                "eval_time": _at(q.minute),
                "exp_samples": [{"labels": _series(labels), "value": value} for labels, value in q.samples],
            }
            for q in case.queries
        ]
    return out


def _at(minute: float) -> str:
    """promtool's eval_time: whole minutes as minutes, a fraction of one as seconds."""
    return f"{int(minute)}m" if minute == int(minute) else f"{round(minute * 60)}s"


def _series(labels: dict[str, str]) -> str:
    name = labels.get("__name__", "")
    inner = ", ".join(f'{k}="{x}"' for k, x in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{inner}}}"


def _expected(e: Expect, v: Vocabulary) -> dict:
    labels = {**e.labels, **alert_labels(e.rule)}
    full = {**labels, "alertname": e.rule.name}
    annotations = {
        k: render(text, full, e.value, e.lookups) for k, text in alert_annotations(e.rule, v).items()
    }
    return {"exp_labels": labels, "exp_annotations": annotations}
