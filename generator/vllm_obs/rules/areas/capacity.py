"""Capacity: the page for a model with fewer ready replicas than `paging.min_ready_replicas` or
`paging.capacity_fraction` of what it should run, telling a one-replica outage from one of fifty.
One alert per model, open while that holds and `paging.recovery_for` after (docs/alerts.md).
"""

from __future__ import annotations

from ...exporter_series import LOG, PROBE, select
from ...promql import number, quote, seconds, selector
from ...signals import FOUNDATIONS
from ...vocabulary import Vocabulary, by
from ..declaration import PER_REPLICA, Declared, Inhibition
from ..expressions import (
    MODEL,
    capacity_lookups,
    listed,
    looked_up,
    planned,
    processed_tokens,
    server_state,
    unless_asleep,
)
from ..model import Alert, Recording
from ..runbook_kit import Section
from ..scenarios.capacity import capacity_cases, lost_cases

GROUP = "vllm-obs.capacity"
RECORDING_GROUP = "vllm-obs.recording-capacity"

HUNG_REASONS = "timeout|http_5xx"
# How a Deployment's and a StatefulSet's pods are named: <deployment>-<hash>-<suffix>, <set>-<n>.
WORKLOADS = (
    ("deployment", "(.+)-[a-z0-9]+-[a-z0-9]+", "kube_deployment_spec_replicas"),
    ("statefulset", "(.+)-[0-9]+", "kube_statefulset_replicas"),
)


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        Declared(
            name="VllmModelCapacityLow",
            knobs=(
                "paging.min_ready_replicas",
                "paging.capacity_fraction",
                "paging.expected_replicas",
                "paging.expected_window",
                "alerts.target_down_for",
                "alerts.hung_for",
                "alerts.log_event_window",
                "paging.recovery_for",
            ),
            build=_capacity_rule,
            needs=(),
            panel="Ready replicas per model",
            runbook=Section(
                meaning=(
                    "A model serves with fewer ready replicas than it should: fewer than "
                    "`paging.min_ready_replicas` (1: a one-replica model whose only engine died, hung or "
                    "went away), or fewer than `paging.capacity_fraction` (half) of the replicas it "
                    "should run. What it should run: kube-state-metrics' desired replicas of the "
                    "Deployment or StatefulSet its pods belong to, else `paging.expected_replicas`, else "
                    "the most replicas it had ready within `paging.expected_window`; with the last one "
                    "only, a replica not ready must be among them (a scale-down or a model moved to other "
                    "servers is not an outage). The description names each replica not ready and why "
                    "(`cause`): `dead` (the log shows an engine death or a failed start), "
                    "`out_of_memory` (the same after an out-of-memory logged within "
                    "`alerts.log_event_window`), `restarting` (starting again after a crash), "
                    "`unhealthy` (`vllm:engine_healthy` 0 under fault tolerance), `faulted` (the log shows the "
                    "engine faulted and waiting for fault tolerance to recover it: it refuses every request), `hung` (the canary "
                    "fails while `/health` answers and no token comes out), `down` (still discovered, not "
                    "scraped for `alerts.target_down_for`). Replicas stopped on purpose (the log shows "
                    "the stop) are neither ready nor lost. One replica of four lost is a ticket (its own "
                    "warning). The page stays open while the model is short and `paging.recovery_for` "
                    "after; the model's SLO pages join the same page group, so users still waiting on a "
                    "backlog keep it open."
                ),
                confirm=[
                    "Ready, expected and desired per model: `{replicas_ready}`, `{replicas_expected}`, "
                    "`{replicas_desired}`",
                    "Why each replica is not ready: `{replica_unready}`; its silenced warnings "
                    "(VllmEngineDead, VllmEngineHung, VllmTargetDown...) in Alertmanager, with inhibited "
                    "alerts shown",
                    "Kubernetes: `kubectl get pods -l app=vllm`, `kubectl describe pod POD` "
                    "(`lastState.terminated.reason` is `OOMKilled` for the kernel's out-of-memory "
                    "killer), `kubectl logs POD --previous`",
                ],
                act=[
                    "Bring capacity back first: restart or replace the replicas that are `dead`, `hung` "
                    "or `down` (take a py-spy dump of a hung engine before), or scale the model out.",
                    "Then follow the runbook of each replica's own warning for the cause.",
                ],
                values={
                    key: capacity_lookups(v)[part].replace(MODEL, 'model_name="MODEL"')
                    for key, part in (("replicas_all", "replicas"), ("replicas_floor", "floor"))
                },
                why=[
                    "Ready, expected and desired per model (it pages below min_ready_replicas, or below "
                    "capacity_fraction of expected): `{replicas_ready}`, `{replicas_expected}`, `{replicas_desired}`",
                    "The page's other numbers, all replicas and the floor: `{replicas_all}`, `{replicas_floor}`",
                    "Each replica not ready, and why: `{replica_unready}`",
                    "Targets failing their scrapes: `up{{{selector}}} == 0`",
                ],
                first=[
                    "How many are lost, and why (`{replica_unready}`): the same cause on every one (all "
                    "`down`: nodes, network, the orchestrator; all `dead` or `restarting` on new pods: a "
                    "rollout) or each its own?",
                    "A rollout in the last hour? Roll it back: an image or flag that cannot start shows as "
                    "`dead` or `restarting` on every new replica.",
                    "Restart or replace what is `dead`, `hung` or `down` (a py-spy dump of a hung engine "
                    "first); scale out if the replicas left cannot carry the load.",
                    "Users still failing once the replicas are back? The model's SLO pages join this page; "
                    "it closes `paging.recovery_for` after the last of them ends.",
                ],
            ),
            scenarios=capacity_cases,
            inhibits=(
                # The rest of the model: load moves to the replicas left, which may warn.
                Inhibition(symptoms=(PER_REPLICA,), equal="model"),
            ),
        ),
        Declared(
            name="VllmReplicaLost",
            knobs=("paging.min_ready_replicas", "paging.capacity_fraction", "paging.recovery_for"),
            build=_lost_rule,
            panel="Ready replicas per model",
            runbook=Section(
                meaning=(
                    "A replica not ready while its model pages (VllmModelCapacityLow), with its `cause`. "
                    "Routed to `alertmanager.info` (nowhere by default): it lets Alertmanager hold back "
                    "that replica's own warnings (an engine death, a down target), whose series carry no "
                    "model, for as long as the page tells of them."
                ),
                confirm=["`{replica_unready}`"],
                act=["Follow VllmModelCapacityLow."],
            ),
            scenarios=lost_cases,
            # The replica's own warnings: the page names it and why.
            inhibits=(Inhibition(symptoms=(PER_REPLICA,)),),
        ),
    ]


# -- recording rules ---------------------------------------------------------------------------


def recordings(v: Vocabulary) -> list[Recording]:
    n, inst, fleet = v.names, by(v.scope.instance_model), by(v.scope.fleet_model)
    target = by(v.targets.target)
    causes = [("down", _down(v))]
    if v.cfg.prometheus.probes:
        causes.insert(0, ("hung", f"{n.served_model}\n* on ({target}) group_left ()\n{_hung(v)}"))
    if v.res.has("engine_healthy"):
        # Fault tolerance (--enable-fault-tolerance): the API server marks an engine it stopped
        # routing to; the replica serves less or nothing while /health may answer.
        healthy = selector(v.res["engine_healthy"].name, v.vllm)
        causes.insert(0, ("unhealthy", _replicas_where(v, f"1 - min by ({target}) ({healthy}) == 1")))
    if v.cfg.prometheus.log_exporters:
        causes[:0] = [
            ("out_of_memory", _replicas_where(v, _out_of_memory(v))),
            ("dead", _replicas_where(v, f"max by ({target}) ({server_state(v, 'dead|failed_start')}) == 1")),
            # Fault tolerance (0.34): the engine faulted and refuses every request; /health answers.
            ("faulted", _replicas_where(v, f"max by ({target}) ({server_state(v, 'faulted')}) == 1")),
            # Starting again: a planned start is no cause (the `unless` below takes it out).
            (
                "restarting",
                _replicas_where(v, f"max by ({target}) ({server_state(v, 'starting|loading')}) == 1"),
            ),
        ]
    # The first cause that holds names it; a replica stopped or restarted on purpose is none.
    unready = f"\nor on ({inst})\n".join(
        f'label_replace(\n  {expr},\n  "cause", "{cause}", "", ""\n)' for cause, expr in causes
    )
    if v.cfg.prometheus.log_exporters:
        # Read from its recording, the rule before this one in the group: this evaluation's value.
        # A stop on purpose is no cause however long it lasts (VllmTargetDown warns after its grace).
        stopped = f"max by ({target}) ({server_state(v, 'stopping|stopped')}) == 1"
        unready = f"(\n{unready}\n)\nunless on ({target})\n({n.restart_planned} or {stopped})"
    # Recorded so that the availability SLO can look back over its rate window for it.
    planned_now = [Recording(n.restart_planned, planned(v))] if v.cfg.prometheus.log_exporters else []
    return [
        Recording(n.served_model, _replicas(v)),
        *planned_now,
        Recording(n.replica_unready, unready),
        Recording(
            n.replica_ready,
            f"({n.served_model} unless on ({inst}) {n.replica_unready})\n"
            f"or on ({inst})\nmax by ({inst}) ({n.replica_unready}) * 0",
        ),
        *([Recording(n.replicas_desired, desired)] if (desired := _desired(v)) else []),
        Recording(
            n.replicas_ready,
            f"sum by ({fleet}) ({n.replica_ready})"
            + (f"\nor on ({fleet})\n{n.replicas_desired} * 0" if desired else ""),
        ),
        Recording(
            n.replicas_expected,
            (f"{n.replicas_desired}\nor on ({fleet})\n" if desired else "")
            + f"max_over_time({n.replicas_ready}[{v.cfg.paging.expected_window}])",
        ),
    ]


def _server(v: Vocabulary) -> str:
    """One server, whatever model it serves: its target and its identity behind the target."""
    return by(tuple(label for label in v.scope.instance_model if label != "model_name"))


def _replicas(v: Vocabulary) -> str:
    """Each model's replicas: the servers serving it now, and those serving nothing now that
    served it within paging.expected_window and are still discovered (`up`, 0 too). A server that
    serves another model now, or that left discovery, is no longer one of its replicas."""
    res, inst, server = v.res, by(v.scope.instance_model), _server(v)
    gauge = selector(res[next(k for k in FOUNDATIONS[0] if k in res.signals)].name, v.vllm)
    window = v.cfg.paging.expected_window
    return (
        f"group by ({inst}) ({gauge})\nor\n(\n"
        f"  group by ({inst}) (last_over_time({gauge}[{window}]))\n"
        f"  unless on ({server}) group by ({server}) ({gauge})\n"
        f"  and on ({by(v.scope.instance)}) group by ({by(v.scope.instance)}) ({selector('up', v.vllm)})\n)"
    )


def _desired(v: Vocabulary) -> str | None:
    """Replicas each model should run, where something says: kube-state-metrics' desired replicas
    of the workloads its pods belong to (pod labels on), or paging.expected_replicas."""
    fleet, parts = by(v.scope.fleet_model), []
    if v.scope.pod:
        where = by((*(label for label, _ in v.scope.partitions), "namespace"))
        for workload, pattern, series in WORKLOADS:
            owned = f'label_replace({v.names.served_model}, "{workload}", "$1", "{v.scope.pod}", "{pattern}")'
            parts.append(
                f"sum by ({fleet}) (\n  max by ({fleet}, {workload}) ({owned})\n"
                f"  * on ({where}, {workload}) group_left ()\n  max by ({where}, {workload}) ({series})\n)"
            )
    for model, replicas in sorted(v.cfg.paging.expected_replicas.items()):
        models = f"{v.names.served_model}{{model_name={quote(model)}}}"
        if v.scope.partitions:  # each partition the model runs in, this many replicas
            parts.append(f"max by ({fleet}) ({models}) * {number(replicas)}")
        else:  # whether or not any of its replicas is left
            labelled = f'label_replace(vector({number(replicas)}), "model_name", {quote(model)}, "", "")'
            parts.append(f'label_replace({labelled}, "job", {quote(v.cfg.prometheus.vllm_job)}, "", "")')
    return f"\nor on ({fleet})\n".join(parts) if parts else None


def _replicas_where(v: Vocabulary, per_target: str) -> str:
    """The model's replicas whose scrape target matches `per_target`."""
    return f"{v.names.served_model}\n* on ({by(v.targets.target)}) group_left ()\n({per_target})"


def _out_of_memory(v: Vocabulary) -> str:
    """Per target: not serving as the log tells (dead, failed to start, or starting again) with an
    out-of-memory logged within log_event_window (0 is never): the cause to fix is memory."""
    target = by(v.targets.target)
    oom_at = select(LOG, "vllm_log_last_event_timestamp_seconds", v.exporter, event="oom")
    window = int(seconds(v.cfg.alerts.log_event_window))
    return (
        f"max by ({target}) ({server_state(v, 'dead|failed_start|starting|loading')}) == 1\n"
        f"and on ({target})\ntime() - (max by ({target}) ({oom_at}) > 0) < {window}"
    )


def _down(v: Vocabulary) -> str:
    """Still discovered and not scraped once within target_down_for; with log exporters, not
    while its log says it became ready after Prometheus last tried to scrape it (a server back
    from a stop is ready before its next scrape; the first scrape after it decides)."""
    up = selector("up", v.vllm)
    down = (
        f"{v.names.served_model}\nand on ({by(v.scope.instance)})\n"
        f"max_over_time({up}[{v.cfg.alerts.target_down_for}]) == 0"
    )
    if not v.cfg.prometheus.log_exporters:
        return down
    target = by(v.targets.target)
    since = select(LOG, "vllm_log_server_state_since_timestamp_seconds", v.exporter)
    return (
        f"{down}\nunless on ({target})\n(\n  max by ({target}) ({server_state(v, 'ready')}) == 1\n"
        f"  and on ({target})\n"
        f"  max by ({target}) (timestamp({up})) < on ({target}) max by ({target}) ({since})\n)"
    )


def _hung(v: Vocabulary) -> str:
    """Per target: the canary failed (timeouts or 5xx) throughout hung_for while /health
    answered, and no token came out within hung_progress_window (a saturated server keeps
    generating; its probe waits in the queue like any request)."""
    a, target = v.cfg.alerts, by(v.targets.target)
    success = select(PROBE, "vllm_probe_success", v.probe)
    failures = select(PROBE, "vllm_probe_failures", v.probe, reason=f"~{HUNG_REASONS}")
    health = select(PROBE, "vllm_probe_health_up", v.probe)
    hung = (
        f"(\n  max by ({target}) (max_over_time({success}[{a.hung_for}])) == 0\n"
        f"  and on ({target})\n  sum by ({target}) (increase({failures}[{a.hung_for}])) > 0\n"
        f"  and on ({target})\n  max by ({target}) ({health}) == 1"
    )
    processed = processed_tokens(v, a.hung_progress_window, target)
    if processed:
        hung += f"\n  unless on ({target})\n  {processed} > 0"
    hung += unless_asleep(v, target, indent="  ")
    return hung + "\n)"


# -- the page ------------------------------------------------------------------------------------


def _below_floor(v: Vocabulary) -> str:
    """Fewer ready replicas than the floor: min_ready_replicas, or a share of what it should run."""
    n, p = v.names, v.cfg.paging
    # Written even at 0 (never true then): the mixin's capacityFraction changes the number, not the rule.
    return (
        f"{n.replicas_ready} < {number(p.min_ready_replicas)}"
        f"\nor\n{n.replicas_ready} < {number(p.capacity_fraction)} * {n.replicas_expected}"
    )


def _lost_rule(v: Vocabulary) -> list[Alert]:
    fleet = by(v.scope.fleet_model)
    return [
        Alert(
            name="VllmReplicaLost",
            expr=f"{v.names.replica_unready}\nand on ({fleet})\n(\n{_below_floor(v)}\n)",
            keep_firing_for=v.cfg.paging.recovery_for,
            severity="info",
            summary="A replica of a model that lost serving capacity is not ready.",
            description=f"{v.scope.where} is {{{{ $labels.cause }}}} while its model pages for lost capacity.",
            dashboard="overview",
        )
    ]


def _capacity_rule(v: Vocabulary) -> list[Alert]:
    n, p, fleet = v.names, v.cfg.paging, by(v.scope.fleet_model)
    floor, q = _below_floor(v), capacity_lookups(v)
    # With only the most it had ready to go by, a replica not ready must be among the model's.
    lost = f"count by ({fleet}) ({n.replica_unready})"
    if _desired(v):
        lost += f" or {n.replicas_desired}"
    return [
        Alert(
            name="VllmModelCapacityLow",
            expr=f"(\n{floor}\n)\nand on ({fleet}) ({lost})",
            # A replica back for a moment between crashes must not resolve the page and page again.
            keep_firing_for=p.recovery_for,
            severity="critical",
            summary="A vLLM model has lost serving capacity.",
            description=(
                f"Model {{{{ $labels.model_name }}}}{v.scope.in_cluster}: {{{{ $value }}}} of "
                f"{looked_up(v, q['replicas'])} replicas ready, expected {looked_up(v, q['expected'])}, "
                f"floor {looked_up(v, q['floor'])}"
                f"{listed(v, n.replica_unready, v.scope.replica, 'cause', '; not ready: ', v.scope.replica)}."
            ),
            dashboard="overview",
        )
    ]
