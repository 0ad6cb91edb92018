"""promtool cases of the pipeline alerts: the heartbeat, failed rule evaluations, notifications
that are not sent or not delivered (a share of the attempts), and failed configuration reloads."""

from __future__ import annotations

import math

from ...config import AlertmanagerSection
from ...promql import number
from ..model import Alert
from ..scenario_kit import (
    NEAR_SIDES,
    REPLICA,
    Case,
    Check,
    Expect,
    Inputs,
    boundary,
    minutes,
    series_text,
)

# Prometheus' and Alertmanager's own series the pipeline alerts (and the failures dashboard) read:
# named here, where their cases feed them, and imported by the rules.
RULE_FAILURES = "prometheus_rule_evaluation_failures_total"
SEND_ERRORS = "prometheus_notifications_errors_total"
SENT = "prometheus_notifications_sent_total"  # every alert it tried to send, failed or not
DELIVERY_FAILURES = "alertmanager_notifications_failed_total"
DELIVERIES = "alertmanager_notifications_total"  # every notification it attempted
AM_URL = "http://alertmanager:9093/api/v2/alerts"  # the `alertmanager` label of Prometheus' series
# A receiver type of the config -> the `integration` label of Alertmanager's notification series.
INTEGRATIONS = {t: t for t in ("pagerduty", "opsgenie", "webhook", "email", "slack")}
RELOADED = {c: f"{c}_config_last_reload_successful" for c in ("prometheus", "alertmanager")}

# Minutes a case runs past its alert's `for`, so its last checks come after that has elapsed.
PAST_FOR = 5


def watchdog_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    case = Case(f"{rule.name} always fires")
    case.add(series_text("up", {**inputs.base, **inputs.at_target(REPLICA)}), "1+0x3")
    case.checks = [Check(0, rule.name, [Expect(rule, {}, 1)]), Check(2, rule.name, [Expect(rule, {}, 1)])]
    return [case]


def _pipeline(case: Case, inputs: Inputs, component: str, name: str, values: str, **labels: str) -> None:
    p = inputs.cfg.prometheus
    job = p.prometheus_job if component == "prometheus" else p.alertmanager_job
    case.add(series_text(name, {"job": job, **_result(inputs, component, **labels)}), values)


def _result(inputs: Inputs, component: str, **labels: str) -> dict[str, str]:
    """Prometheus' or Alertmanager's own scrape target (in Kubernetes, its pod in monitoring)."""
    where = "prometheus:9090" if component == "prometheus" else "alertmanager:9093"
    out = {"instance": where, **inputs.partition(REPLICA)}
    if inputs.scope.namespace:
        out[inputs.scope.namespace] = "monitoring"
    if inputs.scope.pod:
        out[inputs.scope.pod] = "prometheus-k8s-0" if component == "prometheus" else "alertmanager-main-0"
    return {**out, **labels}


def rule_failure_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    span = minutes(rule.for_) + PAST_FOR
    ours = "/etc/prometheus/alerts/vllm-alerts.rules.yml;vllm-obs.capacity"
    fails = Case(f"{rule.name} fires after {rule.for_} of failed evaluations of a vllm-obs group")
    _pipeline(fails, inputs, "prometheus", RULE_FAILURES, f"0+2x{span}", rule_group=ours)
    window = minutes(inputs.cfg.alerts.rate_window)
    value = 2 * window  # increase over a full rate window at 2 a minute
    fails.checks = boundary(
        rule.name, 1, rule.for_, [Expect(rule, _result(inputs, "prometheus", rule_group=ours), value)]
    )
    other = Case(f"{rule.name} stays silent when only another project's group fails")
    _pipeline(
        other,
        inputs,
        "prometheus",
        RULE_FAILURES,
        f"0+2x{span}",
        rule_group="/etc/prometheus/x.yml;node-exporter",
    )
    _pipeline(other, inputs, "prometheus", RULE_FAILURES, f"0+0x{span}", rule_group=ours)
    other.checks = [Check(span - 1, rule.name, [])]
    return [fails, other]


def pager_integrations(am: AlertmanagerSection) -> tuple[str, ...]:
    """Alertmanager's integrations that page: those of the critical receiver and of every team's."""
    types = [am.critical.type, *(team.critical.type for team in am.teams)]
    return tuple(sorted({INTEGRATIONS[t] for t in types if t in INTEGRATIONS}))


def notification_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    a = inputs.cfg.alerts
    pagers = pager_integrations(inputs.cfg.alertmanager)
    cases = []
    for rule in rules:
        if rule.labels["stage"] == "prometheus":
            cases += _notification_rule_cases(rule, inputs, "prometheus", None)
        elif rule.labels["channel"] == "pager":
            cases += _notification_rule_cases(rule, inputs, "alertmanager", pagers[0])
        else:
            chat = next(i for i in (*INTEGRATIONS.values(), "msteams") if i not in pagers)
            cases += _notification_rule_cases(rule, inputs, "alertmanager", chat)
    span = minutes(a.pipeline_for) + PAST_FOR
    fine = Case(f"{rules[0].name} stays silent while every notification is delivered")
    for integration in ("pagerduty", "slack"):
        _attempts(fine, inputs, "alertmanager", integration, f"0+0x{span}", f"0+2x{span}")
    _attempts(fine, inputs, "prometheus", None, f"0+0x{span}", f"0+2x{span}")
    fine.checks = [Check(span - 1, rules[0].name, [])]
    return [*cases, fine]


def _attempts(
    case: Case, inputs: Inputs, component: str, integration: str | None, failed: str, total: str
) -> None:
    """One component's failed and attempted notifications (Alertmanager: of one integration)."""
    labels = {"integration": integration} if integration else {"alertmanager": AM_URL}
    names = (SEND_ERRORS, SENT) if component == "prometheus" else (DELIVERY_FAILURES, DELIVERIES)
    _pipeline(case, inputs, component, names[0], failed, **labels)
    _pipeline(case, inputs, component, names[1], total, **labels)


def _notification_rule_cases(
    rule: Alert, inputs: Inputs, component: str, integration: str | None
) -> list[Case]:
    """Each side of the failure ratio and of the attempts floor, and the `for`, for one rule."""
    a = inputs.cfg.alerts
    ratio, floor = a.notification_failure_ratio, a.notification_min_attempts
    window = minutes(a.notification_window)
    what = f"{component} through {integration}" if integration else component
    labels = _result(inputs, component, **({"integration": integration} if integration else {}))
    span = minutes(rule.for_) + PAST_FOR
    cases = []
    for side, scale in NEAR_SIDES:
        # `rate` attempts a minute from the start, the floor reached at minute `start`, well within
        # the window.
        case = Case(f"{rule.name}: {what} failing {side} alerts.notification_failure_ratio")
        rate = max(1, math.ceil(2 * floor / window))
        start = max(1, math.ceil(floor / rate))
        span_here = start + span
        failed = f"0+{number(ratio * scale * rate)}x{span_here}"
        _attempts(case, inputs, component, integration, failed, f"0+{rate}x{span_here}")
        if scale > 1:
            case.checks = boundary(rule.name, start, rule.for_, [Expect(rule, labels, ratio * scale)])
        else:
            case.checks = [Check(m, rule.name, []) for m in (start + minutes(rule.for_), span_here - 1)]
        cases.append(case)
    for side, scale in NEAR_SIDES:
        # Every attempt fails, floor x scale of them per window, over twice the window.
        per_minute = floor * scale / window
        span_here = 2 * window + minutes(rule.for_) + PAST_FOR
        every = number(per_minute)
        case = Case(f"{rule.name}: {what} failing every attempt, {side} alerts.notification_min_attempts")
        _attempts(case, inputs, component, integration, f"0+{every}x{span_here}", f"0+{every}x{span_here}")
        expected = [Expect(rule, labels, 1)] if scale > 1 else []
        case.checks = [Check(span_here - 1, rule.name, expected)]
        cases.append(case)
    return cases


def reload_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    span = minutes(rules[0].for_) + PAST_FOR
    cases = []
    for rule in rules:
        component = rule.labels["component"]
        bad = Case(f"{rule.name} fires when the {component} reload keeps failing for {rule.for_}")
        _pipeline(bad, inputs, component, RELOADED[component], f"1 0+0x{span}")
        bad.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, _result(inputs, component), 0)])
        cases.append(bad)
    good = Case(f"{rules[0].name} stays silent while the reloads succeed")
    for component in ("prometheus", "alertmanager"):
        _pipeline(good, inputs, component, RELOADED[component], f"1+0x{span}")
    good.checks = [Check(span - 1, rules[0].name, [])]
    return [*cases, good]
