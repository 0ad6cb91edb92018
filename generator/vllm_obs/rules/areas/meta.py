"""Meta: the alerting pipeline itself: its heartbeat, and the failures that would leave
every other alert unseen (rule evaluations, notifications, configuration reloads). These
page: a pipeline that cannot evaluate or deliver is an outage of the monitoring."""

from __future__ import annotations

from ...promql import selector
from ...vocabulary import Vocabulary, by
from ..declaration import NO_PANEL, Declared
from ..model import Alert
from ..runbook_kit import Section
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

GROUP = "vllm-obs.meta"

# Prometheus' and Alertmanager's own series the pipeline alerts (and the failures dashboard) read.
RULE_FAILURES = "prometheus_rule_evaluation_failures_total"
SEND_ERRORS = "prometheus_notifications_errors_total"
DELIVERY_FAILURES = "alertmanager_notifications_failed_total"
RELOADED = {c: f"{c}_config_last_reload_successful" for c in ("prometheus", "alertmanager")}
PIPELINE_SERIES = (RULE_FAILURES, SEND_ERRORS, DELIVERY_FAILURES, *RELOADED.values())


# The dead man's switch. Not "Watchdog": kube-prometheus ships an alert of that name, and two
# heartbeats of one name in one Alertmanager would be grouped, routed and silenced as one. Not
# "Vllm...": a silence of `alertname=~"Vllm.*"` during an upgrade must not stop the heartbeat.
HEARTBEAT = "WatchdogVllmObs"


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        Declared(
            name=HEARTBEAT,
            build=lambda v: [
                Alert(
                    name=HEARTBEAT,
                    expr="vector(1)",
                    severity="info",
                    summary="The alerting pipeline is alive.",
                    description=(
                        "Always firing. If its heartbeat stops arriving at the dead man's switch, Prometheus, "
                        "Alertmanager or the path between them is broken."
                    ),
                    dashboard="overview",
                )
            ],
            # It explains itself: its link opens the overview, on no panel in particular.
            panel=NO_PANEL,
            runbook=Section(
                meaning=(
                    "Always firing, on purpose: the dead man's switch of the whole pipeline. Alertmanager "
                    "sends it to a heartbeat service, which pages when the heartbeat stops."
                ),
                confirm=["Alertmanager's UI lists it as firing; the heartbeat service shows recent pings."],
                act=[
                    "Never silence it. If the heartbeat stopped: check Prometheus, its rule evaluation, "
                    "Alertmanager and the network between them.",
                ],
            ),
            scenarios=_watchdog,
            always_fires=True,
        ),
        Declared(
            name="VllmObsRuleEvaluationFailures",
            knobs=("alerts.pipeline_for",),
            on=bool(v.cfg.prometheus.prometheus_job),
            build=_rule_failures,
            panel="Rule evaluation failures",
            runbook=Section(
                meaning=(
                    "Prometheus fails to evaluate some of the bundle's rule groups: their alerts cannot "
                    "fire, whatever happens to vLLM. Usually a query that times out or runs out of memory "
                    "on a large fleet, a many-to-many match after a label changed, or a recorded series "
                    "another group wrote differently."
                ),
                confirm=[
                    "Which group: `increase(prometheus_rule_evaluation_failures_total[10m]) > 0` by "
                    "`rule_group`; Prometheus' Rules page shows the last error of each rule",
                    "`vllm-obs doctor --prometheus URL` checks the rules it loaded against the bundle",
                ],
                act=[
                    "Fix the rule the error names (regenerate the bundle if it was edited by hand), or give "
                    "Prometheus the memory and `--query.timeout` its fleet needs.",
                ],
                why=["`sum by (rule_group) (increase(prometheus_rule_evaluation_failures_total[10m])) > 0`"],
                first=[
                    "Open Prometheus' Rules page: the failing rule shows its last error.",
                    "A deploy of the rules or of Prometheus in the last hour? Roll it back.",
                    "Out of memory or timing out on a large fleet: give Prometheus more memory or a longer "
                    "`--query.timeout`; meanwhile the alerts of that group are blind, so watch the dashboards.",
                ],
            ),
            scenarios=_rule_failure_cases,
        ),
        Declared(
            name="VllmObsNotificationsFailing",
            knobs=("alerts.pipeline_for",),
            on=bool(v.cfg.prometheus.prometheus_job),
            build=_notification_failures,
            panel="Notifications failing",
            runbook=Section(
                meaning=(
                    "Alerts do not reach people: Prometheus cannot send them to Alertmanager "
                    '(`stage="prometheus"`), or Alertmanager cannot deliver them to a receiver '
                    '(`stage="alertmanager"`, with its `integration`: pagerduty, slack...). A receiver '
                    "whose key file is missing or empty fails like this on its first notification; "
                    "`amtool check-config` does not see it. This alert reaches the other receiver "
                    "(a page also goes to chat) when one of them fails."
                ),
                confirm=[
                    "`rate(alertmanager_notifications_failed_total[5m])` by `integration`, and "
                    "Alertmanager's log (`Notify for alerts failed`, with the receiver's error)",
                    "`rate(prometheus_notifications_errors_total[5m])`; "
                    "`prometheus_notifications_alertmanagers_discovered`",
                    "`vllm-obs doctor --alertmanager-secrets DIR` checks every receiver's key file",
                ],
                act=[
                    "Put the receiver's key or URL in its mounted file (see `secrets/`), fix the network "
                    "path to the receiver, or renew an expired key; Alertmanager reads the files again on "
                    "each notification.",
                ],
                why=[
                    "`sum by (integration) (rate(alertmanager_notifications_failed_total[5m])) > 0`",
                    "`rate(prometheus_notifications_errors_total[5m]) > 0`",
                ],
                first=[
                    "Which integration fails? Alertmanager's log names the receiver and its error.",
                    "The pager's integration: until it is fixed, pages reach nobody; watch Alertmanager's UI.",
                    "A key or URL file missing or expired: put it back; a network path: fix it.",
                ],
            ),
            scenarios=_notification_cases,
        ),
        Declared(
            name="VllmObsConfigReloadFailed",
            knobs=("alerts.pipeline_for",),
            on=bool(v.cfg.prometheus.prometheus_job),
            build=_reload_failures,
            panel="Configuration reloads",
            runbook=Section(
                meaning=(
                    "Prometheus or Alertmanager (`component`) failed to load its configuration on the "
                    "last reload and runs the previous one: the rules, targets or routes you rolled out "
                    "are not in force."
                ),
                confirm=[
                    "`prometheus_config_last_reload_successful`, `alertmanager_config_last_reload_successful`",
                    "The error in the component's log; `promtool check config prometheus/prometheus.yml`, "
                    "`amtool check-config alerts/alertmanager.yml`",
                ],
                act=["Fix the file the error names and reload again."],
                why=[
                    "`prometheus_config_last_reload_successful == 0`, "
                    "`alertmanager_config_last_reload_successful == 0`",
                ],
                first=[
                    "Read the error in the component's log; the previous configuration still runs.",
                    "Revert the change that broke it, or fix the file and reload.",
                ],
            ),
            scenarios=_reload_cases,
        ),
    ]


def _jobs(v: Vocabulary) -> dict[str, str]:
    p = v.cfg.prometheus
    return {"prometheus": f'job="{p.prometheus_job}"', "alertmanager": f'job="{p.alertmanager_job}"'}


def _rule_failures(v: Vocabulary) -> list[Alert]:
    a = v.cfg.alerts
    # Only the bundle's own groups: a group name is `<file>;<group>` in this series.
    failures = selector(
        RULE_FAILURES,
        _jobs(v)["prometheus"],
        'rule_group=~".*;vllm-obs\\\\..*"',
    )
    return [
        Alert(
            name="VllmObsRuleEvaluationFailures",
            expr=f"sum by ({by(v.targets.target)}, rule_group) (increase({failures}[{a.rate_window}])) > 0",
            for_=a.pipeline_for,
            severity="critical",
            summary="Prometheus fails to evaluate vllm-obs rules: their alerts cannot fire.",
            description=(
                f"{v.targets.target_ref} failed {{{{ $value | humanize }}}} evaluations "
                f"of rule group {{{{ $labels.rule_group }}}} in {a.rate_window}, for {a.pipeline_for}."
            ),
            dashboard="failures",
        )
    ]


def _notification_failures(v: Vocabulary) -> list[Alert]:
    a, jobs, target = v.cfg.alerts, _jobs(v), by(v.targets.target)
    common = dict(
        name="VllmObsNotificationsFailing",
        for_=a.pipeline_for,
        severity="critical",
        summary="vllm-obs alerts are not reaching their receivers.",
        dashboard="failures",
    )
    sent = selector(SEND_ERRORS, jobs["prometheus"])
    delivered = selector(DELIVERY_FAILURES, jobs["alertmanager"])
    return [
        Alert(
            expr=f"sum by ({target}) (rate({sent}[{a.rate_window}])) > 0",
            labels={"stage": "prometheus"},
            description=(
                f"Prometheus {v.targets.target_ref} fails to send alerts to "
                f"Alertmanager ({{{{ $value | humanize }}}}/s, for {a.pipeline_for})."
            ),
            **common,
        ),
        Alert(
            expr=f"sum by ({target}, integration) (rate({delivered}[{a.rate_window}])) > 0",
            labels={"stage": "alertmanager"},
            description=(
                f"Alertmanager {v.targets.target_ref} fails to deliver notifications "
                f"through {{{{ $labels.integration }}}} ({{{{ $value | humanize }}}}/s, for {a.pipeline_for})."
            ),
            **common,
        ),
    ]


def _reload_failures(v: Vocabulary) -> list[Alert]:
    a, jobs, target = v.cfg.alerts, _jobs(v), by(v.targets.target)
    return [
        Alert(
            name="VllmObsConfigReloadFailed",
            expr=f"max by ({target}) ({selector(RELOADED[component], jobs[component])}) == 0",
            for_=a.pipeline_for,
            severity="critical",
            labels={"component": component},
            summary="Prometheus or Alertmanager runs an old configuration: the last reload failed.",
            description=(
                f"The last configuration reload of {component} {v.targets.target_ref} "
                f"failed (for {a.pipeline_for}); it still runs the previous one."
            ),
            dashboard="failures",
        )
        for component in ("prometheus", "alertmanager")
    ]


def _watchdog(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    case = Case(f"{HEARTBEAT} always fires")
    case.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), "1+0x3")
    case.checks = [Check(0, rule.name, [Expect(rule, {}, 1)]), Check(2, rule.name, [Expect(rule, {}, 1)])]
    return [case]


def _pipeline(case: Case, io: Inputs, component: str, name: str, values: str, **labels: str) -> None:
    p = io.cfg.prometheus
    job = p.prometheus_job if component == "prometheus" else p.alertmanager_job
    case.add(series_text(name, {"job": job, **_result(io, component, **labels)}), values)


def _result(io: Inputs, component: str, **labels: str) -> dict[str, str]:
    """Prometheus' or Alertmanager's own scrape target (in Kubernetes, its pod in monitoring)."""
    where = "prometheus:9090" if component == "prometheus" else "alertmanager:9093"
    out = {"instance": where, **io.partition(REPLICA)}
    if io.scope.namespace:
        out[io.scope.namespace] = "monitoring"
    if io.scope.pod:
        out[io.scope.pod] = "prometheus-k8s-0" if component == "prometheus" else "alertmanager-main-0"
    return {**out, **labels}


def _rule_failure_cases(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    span = minutes(rule.for_) + 5
    ours = "/etc/prometheus/alerts/vllm-alerts.rules.yml;vllm-obs.capacity"
    fails = Case(f"{rule.name} fires after {rule.for_} of failed evaluations of a vllm-obs group")
    _pipeline(fails, io, "prometheus", RULE_FAILURES, f"0+2x{span}", rule_group=ours)
    window = minutes(io.cfg.alerts.rate_window)
    value = 2 * window  # increase over a full rate window at 2 a minute
    fails.checks = boundary(
        rule.name, 1, rule.for_, [Expect(rule, _result(io, "prometheus", rule_group=ours), value)]
    )
    other = Case(f"{rule.name} stays silent when only another project's group fails")
    _pipeline(
        other,
        io,
        "prometheus",
        RULE_FAILURES,
        f"0+2x{span}",
        rule_group="/etc/prometheus/x.yml;node-exporter",
    )
    _pipeline(other, io, "prometheus", RULE_FAILURES, f"0+0x{span}", rule_group=ours)
    other.checks = [Check(span - 1, rule.name, [])]
    return [fails, other]


def _notification_cases(rules: list[Alert], io: Inputs) -> list[Case]:
    by_stage = {r.labels["stage"]: r for r in rules}
    rule = by_stage["alertmanager"]
    span = minutes(rule.for_) + 5
    failing = Case(f"{rule.name} fires when Alertmanager keeps failing to deliver through pagerduty")
    _pipeline(
        failing,
        io,
        "alertmanager",
        DELIVERY_FAILURES,
        f"0+3x{span}",
        integration="pagerduty",
    )
    _pipeline(
        failing,
        io,
        "alertmanager",
        DELIVERY_FAILURES,
        f"0+0x{span}",
        integration="slack",
    )
    _pipeline(failing, io, "prometheus", SEND_ERRORS, f"0+0x{span}")
    value = 3 / 60
    failing.checks = boundary(
        rule.name, 1, rule.for_, [Expect(rule, _result(io, "alertmanager", integration="pagerduty"), value)]
    )
    unsent = Case(f"{rule.name} fires when Prometheus keeps failing to send to Alertmanager")
    sent_rule = by_stage["prometheus"]
    _pipeline(unsent, io, "prometheus", SEND_ERRORS, f"0+6x{span}")
    unsent.checks = boundary(rule.name, 1, rule.for_, [Expect(sent_rule, _result(io, "prometheus"), 6 / 60)])
    fine = Case(f"{rule.name} stays silent while every notification is delivered")
    _pipeline(
        fine,
        io,
        "alertmanager",
        DELIVERY_FAILURES,
        f"0+0x{span}",
        integration="pagerduty",
    )
    _pipeline(fine, io, "prometheus", SEND_ERRORS, f"0+0x{span}")
    fine.checks = [Check(span - 1, rule.name, [])]
    return [failing, unsent, fine, *_sparse_notification_cases(by_stage, io)]


def _sparse_notification_cases(by_stage: dict[str, Alert], io: Inputs) -> list[Case]:
    """A failure every few minutes is a failing pipeline too: each stays in alerts.rate_window
    until the next."""
    window = minutes(io.cfg.alerts.rate_window)
    if window <= SPARSE_EVERY:
        return []  # a window shorter than the retries' interval (a fast test clock)
    cases = []
    for stage, rule in by_stage.items():
        fire_at = SPARSE_EVERY + minutes(rule.for_)
        span = fire_at + 3
        failures = sparse_counter(span)
        case = Case(f"{rule.name} fires when {stage} fails once every {SPARSE_EVERY} minutes")
        if stage == "alertmanager":
            _pipeline(case, io, stage, DELIVERY_FAILURES, failures, integration="pagerduty")
            labels = _result(io, stage, integration="pagerduty")
        else:
            _pipeline(case, io, stage, SEND_ERRORS, failures)
            labels = _result(io, stage)
        # The failures in the window ending at fire_at, over the whole window (no extrapolation).
        seen = fire_at // SPARSE_EVERY - max(0, fire_at - window) // SPARSE_EVERY
        case.checks = boundary(
            rule.name, SPARSE_EVERY, rule.for_, [Expect(rule, labels, seen / (window * 60))]
        )
        cases.append(case)
    return cases


def _reload_cases(rules: list[Alert], io: Inputs) -> list[Case]:
    span = minutes(rules[0].for_) + 5
    cases = []
    for rule in rules:
        component = rule.labels["component"]
        bad = Case(f"{rule.name} fires when the {component} reload keeps failing for {rule.for_}")
        _pipeline(bad, io, component, RELOADED[component], f"1 0+0x{span}")
        bad.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, _result(io, component), 0)])
        cases.append(bad)
    good = Case(f"{rules[0].name} stays silent while the reloads succeed")
    for component in ("prometheus", "alertmanager"):
        _pipeline(good, io, component, RELOADED[component], f"1+0x{span}")
    good.checks = [Check(span - 1, rules[0].name, [])]
    return [*cases, good]
