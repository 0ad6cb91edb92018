"""promtool cases of the pipeline alerts: the heartbeat, failed rule evaluations, notifications
that are not sent or not delivered (however sparse), and failed configuration reloads."""

from __future__ import annotations

from ..model import Alert
from ..scenario_kit import (
    REPLICA,
    SPARSE_EVERY,
    Case,
    Check,
    Expect,
    Inputs,
    boundary,
    minutes,
    series_text,
    sparse_counter,
)

# Prometheus' and Alertmanager's own series the pipeline alerts (and the failures dashboard) read:
# named here, where their cases feed them, and imported by the rules.
RULE_FAILURES = "prometheus_rule_evaluation_failures_total"
SEND_ERRORS = "prometheus_notifications_errors_total"
DELIVERY_FAILURES = "alertmanager_notifications_failed_total"
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


def notification_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    by_stage = {r.labels["stage"]: r for r in rules}
    rule = by_stage["alertmanager"]
    span = minutes(rule.for_) + PAST_FOR
    failing = Case(f"{rule.name} fires when Alertmanager keeps failing to deliver through pagerduty")
    _pipeline(
        failing,
        inputs,
        "alertmanager",
        DELIVERY_FAILURES,
        f"0+3x{span}",
        integration="pagerduty",
    )
    _pipeline(
        failing,
        inputs,
        "alertmanager",
        DELIVERY_FAILURES,
        f"0+0x{span}",
        integration="slack",
    )
    _pipeline(failing, inputs, "prometheus", SEND_ERRORS, f"0+0x{span}")
    value = 3 / 60
    failing.checks = boundary(
        rule.name,
        1,
        rule.for_,
        [Expect(rule, _result(inputs, "alertmanager", integration="pagerduty"), value)],
    )
    unsent = Case(f"{rule.name} fires when Prometheus keeps failing to send to Alertmanager")
    sent_rule = by_stage["prometheus"]
    _pipeline(unsent, inputs, "prometheus", SEND_ERRORS, f"0+6x{span}")
    unsent.checks = boundary(
        rule.name, 1, rule.for_, [Expect(sent_rule, _result(inputs, "prometheus"), 6 / 60)]
    )
    fine = Case(f"{rule.name} stays silent while every notification is delivered")
    _pipeline(
        fine,
        inputs,
        "alertmanager",
        DELIVERY_FAILURES,
        f"0+0x{span}",
        integration="pagerduty",
    )
    _pipeline(fine, inputs, "prometheus", SEND_ERRORS, f"0+0x{span}")
    fine.checks = [Check(span - 1, rule.name, [])]
    return [failing, unsent, fine, *_sparse_notification_cases(by_stage, inputs)]


def _sparse_notification_cases(by_stage: dict[str, Alert], inputs: Inputs) -> list[Case]:
    """A failure every few minutes is a failing pipeline too: each stays in alerts.rate_window
    until the next."""
    window = minutes(inputs.cfg.alerts.rate_window)
    if window <= SPARSE_EVERY:
        return []  # a window shorter than the retries' interval (a fast test clock)
    cases = []
    for stage, rule in by_stage.items():
        fire_at = SPARSE_EVERY + minutes(rule.for_)
        span = fire_at + 3
        failures = sparse_counter(span)
        case = Case(f"{rule.name} fires when {stage} fails once every {SPARSE_EVERY} minutes")
        if stage == "alertmanager":
            _pipeline(case, inputs, stage, DELIVERY_FAILURES, failures, integration="pagerduty")
            labels = _result(inputs, stage, integration="pagerduty")
        else:
            _pipeline(case, inputs, stage, SEND_ERRORS, failures)
            labels = _result(inputs, stage)
        # The failures in the window ending at fire_at, over the whole window (no extrapolation).
        seen = fire_at // SPARSE_EVERY - max(0, fire_at - window) // SPARSE_EVERY
        case.checks = boundary(
            rule.name, SPARSE_EVERY, rule.for_, [Expect(rule, labels, seen / (window * 60))]
        )
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
