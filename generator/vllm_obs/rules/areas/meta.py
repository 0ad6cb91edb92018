"""Meta: the alerting pipeline itself: its heartbeat, and the failures that would leave
every other alert unseen (rule evaluations, notifications, configuration reloads). These
page: a pipeline that cannot evaluate or deliver is an outage of the monitoring."""

from __future__ import annotations

from ...promql import number, selector
from ...vocabulary import Vocabulary, by
from ..declaration import NO_PANEL, Declared
from ..expressions import percent
from ..model import Alert
from ..runbook_kit import Section
from ..scenarios.meta import (
    DELIVERIES,
    DELIVERY_FAILURES,
    RELOADED,
    RULE_FAILURES,
    SEND_ERRORS,
    SENT,
    notification_cases,
    pager_integrations,
    reload_cases,
    rule_failure_cases,
    watchdog_cases,
)

GROUP = "vllm-obs.meta"

# Every series of Prometheus and Alertmanager the pipeline alerts read.
PIPELINE_SERIES = (RULE_FAILURES, SEND_ERRORS, SENT, DELIVERY_FAILURES, DELIVERIES, *RELOADED.values())


# The dead man's switch. Not "Watchdog": kube-prometheus ships an alert of that name, and two
# heartbeats of one name in one Alertmanager would be grouped, routed and silenced as one. Not
# "Vllm...": a silence of `alertname=~"Vllm.*"` during an upgrade must not stop the heartbeat.
HEARTBEAT = "WatchdogVllmObs"
NOTIFICATIONS_FAILING = "VllmObsNotificationsFailing"


def declarations(v: Vocabulary) -> list[Declared]:
    w, r = v.cfg.alerts.notification_window, number(v.cfg.alerts.notification_failure_ratio)
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
            scenarios=watchdog_cases,
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
            scenarios=rule_failure_cases,
        ),
        Declared(
            name=NOTIFICATIONS_FAILING,
            knobs=(
                "alerts.pipeline_for",
                "alerts.notification_window",
                "alerts.notification_failure_ratio",
                "alerts.notification_min_attempts",
            ),
            on=bool(v.cfg.prometheus.prometheus_job),
            build=_notification_failures,
            panel="Notifications failing",
            runbook=Section(
                meaning=(
                    "More than alerts.notification_failure_ratio of the notifications attempted in "
                    "alerts.notification_window failed (once at least alerts.notification_min_attempts were "
                    'attempted): Prometheus cannot send alerts to Alertmanager (`stage="prometheus"`, '
                    'critical), or Alertmanager cannot deliver them through an `integration` '
                    '(`stage="alertmanager"`). The pager\'s integration (`channel="pager"`) is critical '
                    'and goes to chat only, never to the failing pager; any other (`channel="chat"`: '
                    "Slack answering 429, a webhook or mail server down) is a warning. A receiver whose key "
                    "file is missing or empty fails every notification like this; `amtool "
                    "check-config` does not see it."
                ),
                confirm=[
                    "The failing share by `integration`: `increase(alertmanager_notifications_failed_total"
                    f"[{w}]) / increase(alertmanager_notifications_total[{w}])`, and Alertmanager's log "
                    "(`Notify for alerts failed`, with the receiver's error: a 429 is a rate limit, a 5xx "
                    "the receiver's outage, a 4xx a wrong key or URL)",
                    f"`increase(prometheus_notifications_errors_total[{w}]) / "
                    f"increase(prometheus_notifications_sent_total[{w}])`, "
                    "`prometheus_notifications_dropped_total`, "
                    "`prometheus_notifications_alertmanagers_discovered`",
                    "`vllm-obs doctor --alertmanager-secrets DIR` checks every receiver's key file",
                ],
                act=[
                    "Put the receiver's key or URL in its mounted file (see `secrets/`), fix the network "
                    "path to the receiver, or renew an expired key; Alertmanager reads the files again on "
                    "each notification.",
                    "A chat integration rate-limited (429): group more (alertmanager.group_by, "
                    "group_interval) or give the alerts their own webhook.",
                ],
                why=[
                    f"`sum by (integration) (increase(alertmanager_notifications_failed_total[{w}])) / "
                    f"sum by (integration) (increase(alertmanager_notifications_total[{w}])) > {r}`",
                    f"`sum(increase(prometheus_notifications_errors_total[{w}])) / "
                    f"sum(increase(prometheus_notifications_sent_total[{w}])) > {r}`",
                ],
                first=[
                    "Which integration fails? Alertmanager's log names the receiver and its error.",
                    "The pager's integration: until it is fixed, pages reach nobody; this alert is in chat "
                    "only, so watch chat and Alertmanager's UI, and tell whoever is on call.",
                    "A key or URL file missing or expired: put it back; a network path: fix it.",
                ],
            ),
            scenarios=notification_cases,
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
            scenarios=reload_cases,
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
    """The share of notifications that failed within alerts.notification_window, once enough were
    attempted: Prometheus' sends page, and Alertmanager's by channel (the pager's page, others warn)."""
    a, jobs, target = v.cfg.alerts, _jobs(v), by(v.targets.target)
    window, ratio, floor = a.notification_window, a.notification_failure_ratio, a.notification_min_attempts
    judged = f"threshold {percent(ratio)}, at least {number(floor)} attempts, for {a.pipeline_for}"

    def share(failed: str, total: str, keep: str) -> str:
        attempts = f"sum by ({keep}) (increase({total}[{window}]))"
        return (
            f"sum by ({keep}) (increase({failed}[{window}]))\n/ {attempts} > {number(ratio)}\n"
            f"and {attempts} >= {number(floor)}"
        )

    common = dict(
        name=NOTIFICATIONS_FAILING,
        for_=a.pipeline_for,
        summary="vllm-obs alerts are not reaching their receivers.",
        dashboard="failures",
        threshold=ratio,
    )
    prom = jobs["prometheus"]
    out = [
        Alert(
            expr=share(selector(SEND_ERRORS, prom), selector(SENT, prom), target),
            severity="critical",
            labels={"stage": "prometheus"},
            description=(
                f"Prometheus {v.targets.target_ref} failed to send {{{{ $value | humanizePercentage }}}} "
                f"of its alerts to Alertmanager in {window} ({judged})."
            ),
            **common,
        )
    ]
    pagers = pager_integrations(v.cfg.alertmanager)
    one_of = "|".join(pagers)
    channels = [("pager", "critical", f'integration=~"{one_of}"')] if pagers else []
    channels.append(("chat", "warning", f'integration!~"{one_of}"' if pagers else ""))
    for channel, severity, matcher in channels:
        am = (jobs["alertmanager"], matcher)
        out.append(
            Alert(
                expr=share(
                    selector(DELIVERY_FAILURES, *am), selector(DELIVERIES, *am), f"{target}, integration"
                ),
                severity=severity,
                labels={"stage": "alertmanager", "channel": channel},
                description=(
                    f"Alertmanager {v.targets.target_ref} failed {{{{ $value | humanizePercentage }}}} "
                    f"of its notifications through {{{{ $labels.integration }}}} ({channel}) in {window} "
                    f"({judged})."
                ),
                **common,
            )
        )
    return out


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
