"""Capacity: a model's serving capacity below its floor, the page that tells a one-replica
outage from one replica of fifty.

Each replica that served a model within the last hour is ready (scraped, its engine alive, its
canary answering) or not, with a cause: `dead` (the log shows an engine death or a failed
start), `unhealthy` (under vLLM's fault tolerance, an engine the API server reports
unhealthy), `out_of_memory` (the same, or starting again, with an out-of-memory logged within
`alerts.log_event_window`), `restarting` (starting again after a crash: no planned stop before
it), `hung` (the canary failed the whole hung window while /health answered and no token came
out) or `down` (not scraped for `alerts.target_down_for`, or gone from discovery; not while its
log says it became ready since Prometheus last tried to scrape it). A replica stopped or
restarted on purpose, as its log tells, counts as ready. The model pages when fewer than
`paging.min_ready_replicas` are ready, or fewer than `paging.capacity_fraction` of the replicas
still discovered; the page has one alert per replica that is not ready, grouped into one
notification per model that names each one and why, and stays open `paging.recovery_for` after
the replicas are back.
"""

from __future__ import annotations

from ...exporter_series import LOG, PROBE, select
from ...promql import number, seconds, selector
from ...vocabulary import Vocabulary, by
from ..declaration import PER_REPLICA, Declared, Inhibition
from ..expressions import planned, processed_tokens, server_state, unless_asleep
from ..model import Alert, Recording
from ..runbook_kit import Section
from ..scenario_kit import NEAR_SIDES, REPLICA, Case, Check, Expect, Inputs, minutes, series_text

GROUP = "vllm-obs.capacity"
RECORDING_GROUP = "vllm-obs.recording-capacity"

# The other replicas of a scenario's model, beside REPLICA (with multi-cluster on, NEIGHBOUR is
# the namesake in another cluster: another model's fleet).
MORE_REPLICAS = ("vllm-2:8000", "vllm-3:8000", "vllm-4:8000")
HUNG_REASONS = "timeout|http_5xx"


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        Declared(
            name="VllmModelCapacityLow",
            knobs=(
                "paging.min_ready_replicas",
                "paging.capacity_fraction",
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
                    "A model has lost serving capacity: fewer of its replicas are ready than "
                    "`paging.min_ready_replicas` (1 by default: a one-replica model whose only engine "
                    "died, hung or went away), or fewer than `paging.capacity_fraction` of the replicas "
                    "still discovered (half by default). One alert per replica that is not ready, with "
                    "its `cause`: `dead` (the log shows an engine death or a failed start), "
                    "`out_of_memory` (the same, or starting again, after an out-of-memory the log "
                    "showed within `alerts.log_event_window`), `restarting` (starting again after a crash), "
                    "`unhealthy` (with `--enable-fault-tolerance`, `vllm:engine_healthy` is 0 for one of its "
                    "engines), `hung` (the canary fails while "
                    "`/health` answers and no token comes out), `down` (not scraped for "
                    "`alerts.target_down_for`, or gone). Replicas stopped or restarted on purpose (the "
                    "log shows the stop) count as ready; one replica lost out of four is a ticket (its "
                    "own warning), not a page. The page stays open `paging.recovery_for` after the "
                    "replicas are ready again: a replica that fails again within it (a crash loop) is "
                    "the same outage, not a new page. This page silences that replica's warnings, the "
                    "same model's per-replica warnings and its SLO pages, which stay held until the "
                    "misses of the outage and of its recovery have left their short windows: it is "
                    "the incident."
                ),
                confirm=[
                    "Ready and discovered per model: `{replicas_ready}`, `{replicas_discovered}`",
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
            ),
            scenarios=_capacity_cases,
            inhibits=(
                # The replica's own warnings: the page names it and why.
                Inhibition(symptoms=(PER_REPLICA,)),
                # The rest of the model: load moves to the replicas left, which may warn.
                Inhibition(symptoms=(PER_REPLICA,), equal="model"),
                Inhibition(
                    alerts=(
                        "VllmAvailabilityBudgetBurn",
                        "VllmTimeToFirstTokenBudgetBurn",
                        "VllmTimePerOutputTokenBudgetBurn",
                    ),
                    equal="model",
                ),
            ),
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
        unready = f"(\n{unready}\n)\nunless on ({target})\n{n.restart_planned}"
    up = selector("up", v.vllm)
    # Recorded so that the availability SLO can look back over its rate window for it.
    planned_now = [Recording(n.restart_planned, planned(v))] if v.cfg.prometheus.log_exporters else []
    return [
        *planned_now,
        Recording(n.replica_unready, unready),
        Recording(
            n.replica_ready,
            f"({n.served_model} unless on ({inst}) {n.replica_unready})\n"
            f"or on ({inst})\nmax by ({inst}) ({n.replica_unready}) * 0",
        ),
        Recording(n.replicas_ready, f"sum by ({fleet}) ({n.replica_ready})"),
        Recording(
            n.replicas_discovered,
            f"count by ({fleet}) ({n.served_model} and on ({by(v.scope.instance)}) {up})",
        ),
        # The page's condition per model: below its floor, and a replica not ready (a model
        # smaller than the floor with every replica ready is not paged, nor held).
        Recording(
            n.replicas_below_floor,
            f"(\n{_below_floor(v)}\n)\nand on ({fleet})\ncount by ({fleet}) ({n.replica_unready})",
        ),
    ]


def _replicas_where(v: Vocabulary, per_target: str) -> str:
    """The replicas served within the hour whose scrape target matches `per_target`."""
    return f"{v.names.served_model}\n* on ({by(v.targets.target)}) group_left ()\n({per_target})"


def _out_of_memory(v: Vocabulary) -> str:
    """Per target: not serving as the log tells (dead, failed to start, or starting again) with an
    out-of-memory logged within log_event_window (0 is never): the cause to fix is memory, not
    the crash."""
    target = by(v.targets.target)
    oom_at = select(LOG, "vllm_log_last_event_timestamp_seconds", v.exporter, event="oom")
    window = int(seconds(v.cfg.alerts.log_event_window))
    return (
        f"max by ({target}) ({server_state(v, 'dead|failed_start|starting|loading')}) == 1\n"
        f"and on ({target})\ntime() - (max by ({target}) ({oom_at}) > 0) < {window}"
    )


def _down(v: Vocabulary) -> str:
    """Not scraped once within target_down_for, or gone from service discovery; with log
    exporters, not while its log says it became ready after Prometheus last tried to scrape it.
    A server back from a stop is ready in its log before Prometheus next scrapes it: without
    that, the page would fire for that one scrape interval at every planned restart. The first
    scrape after it ends the excuse, answered or not (a server that dies silently before it is
    down again at once)."""
    up = selector("up", v.vllm)
    down = (
        f"{v.names.served_model}\nunless on ({by(v.scope.instance)})\n"
        f"max_over_time({up}[{v.cfg.alerts.target_down_for}]) == 1"
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
    n, p = v.names, v.cfg.paging
    floor = f"{n.replicas_ready} < {number(p.min_ready_replicas)}"
    if p.capacity_fraction > 0:
        floor += f"\nor\n{n.replicas_ready} < {number(p.capacity_fraction)} * {n.replicas_discovered}"
    return floor


def _capacity_rule(v: Vocabulary) -> list[Alert]:
    n, fleet = v.names, by(v.scope.fleet_model)
    return [
        Alert(
            name="VllmModelCapacityLow",
            # One alert per replica that is not ready, its value the model's ready replicas.
            # The floor is written out here, not read from its recording: it is the page's
            # threshold, which the mutation tests change to prove its promtool cases pin it.
            expr=(f"(\n{_below_floor(v)}\n)\n* on ({fleet}) group_right ()\n({n.replica_unready} * 0 + 1)"),
            # A replica back for a moment between crashes, or one cause giving way to the next
            # (dead, then restarting), must not resolve the page and page again.
            keep_firing_for=v.cfg.paging.recovery_for,
            severity="critical",
            summary="A vLLM model has lost serving capacity.",
            description=(
                f"Model {{{{ $labels.model_name }}}}{v.scope.in_cluster} has {{{{ $value }}}} ready replicas, "
                f"below its floor; {v.scope.server_ref} is {{{{ $labels.cause }}}}."
            ),
            dashboard="overview",
        )
    ]


# -- promtool scenarios --------------------------------------------------------------------


def _capacity_cases(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    cfg = io.cfg
    cases = []
    down_after = minutes(cfg.alerts.target_down_for)
    span = down_after + 6
    everyone = (REPLICA, *MORE_REPLICAS)

    def replicas(case: Case, who: tuple[str, ...], up_from: dict[str, str]) -> None:
        for name in who:
            io.serving(case, span, name)
            case.add(series_text("up", {**io.base, **io.at_target(name)}), up_from.get(name, f"1+0x{span}"))

    def result(who: str, cause: str) -> dict[str, str]:
        return {**io.result(who), "cause": cause}

    # The last replica goes down: the model has none left.
    alone = Case("VllmModelCapacityLow pages when the only replica is down for alerts.target_down_for")
    replicas(alone, (REPLICA,), {REPLICA: f"1 0+0x{span}"})
    # up is 0 from minute 1: not scraped once in the window from minute 1 + target_down_for.
    fire_at = 1 + down_after
    alone.checks = [
        Check(fire_at - 1, rule.name, []),
        Check(fire_at, rule.name, [Expect(rule, result(REPLICA, "down"), 0)]),
    ]
    cases.append(alone)
    cases.append(_recovery_case(rule, io, fire_at, result(REPLICA, "down")))

    # One of four goes down: a ticket (VllmTargetDown), not a page.
    quarter = Case("VllmModelCapacityLow stays silent when one replica of four is down")
    replicas(quarter, everyone, {REPLICA: f"1 0+0x{span}"})
    quarter.checks = [Check(span - 1, rule.name, [])]
    cases.append(quarter)

    if cfg.paging.capacity_fraction > 0:
        # Three of four down: one ready is below half of the four discovered.
        most = Case("VllmModelCapacityLow pages for each replica down when most of four are")
        lost = everyone[:3]
        replicas(most, everyone, {w: f"1 0+0x{span}" for w in lost})
        expected = [Expect(rule, result(w, "down"), 1) for w in lost]
        most.checks = [Check(fire_at - 1, rule.name, []), Check(fire_at, rule.name, expected)]
        cases.append(most)
        # paging.capacity_fraction from both sides, on ten replicas: a fraction 1.5x or 0.67x
        # the one written fails one of the two.
        # (Not NEIGHBOUR: with multi-cluster on, it is in the other cluster.)
        ten = (REPLICA, *(f"vllm-{i}:8000" for i in range(2, 11)))
        bound = cfg.paging.capacity_fraction * len(ten)
        for side, scale in NEAR_SIDES:
            ready = round(bound * scale)
            if ready == bound or not cfg.paging.min_ready_replicas <= ready < len(ten):
                continue
            near = Case(
                f"VllmModelCapacityLow with {ready} of {len(ten)} replicas ready, {side} paging.capacity_fraction"
            )
            lost = ten[ready:]
            replicas(near, ten, {w: f"1 0+0x{span}" for w in lost})
            pages = [Expect(rule, result(w, "down"), ready) for w in lost] if ready < bound else []
            near.checks = [Check(fire_at, rule.name, pages)]
            cases.append(near)

    if cfg.prometheus.log_exporters:
        cases += _lifecycle_cases(rule, io, replicas, result, span)
    if cfg.prometheus.probes:
        cases += _hung_cases(rule, io, replicas, result)
    if io.res.has("engine_healthy"):
        cases += _unhealthy_cases(rule, io, replicas, result, span)
    return cases


def _recovery_case(rule: Alert, io: Inputs, fire_at: int, labels: dict[str, str]) -> Case:
    """The only replica is back two minutes after the page: the page stays open
    paging.recovery_for past the condition's last minute, then resolves. A keep_firing_for a
    minute shorter or longer, or none, fails one of the two last checks."""
    back = fire_at + 2  # the first minute it answers its scrape again
    last = back - 1 + minutes(rule.keep_firing_for)  # the condition held until back - 1
    case = Case(
        "VllmModelCapacityLow stays open for paging.recovery_for after the only replica is back, then resolves"
    )
    io.serving(case, last + 2)
    case.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), f"1 0x{back - 2} 1x{last + 1 - back}")
    page = [Expect(rule, labels, 0)]
    case.checks = [Check(back, rule.name, page), Check(last, rule.name, page), Check(last + 1, rule.name, [])]
    return case


def _unhealthy_cases(rule, io: Inputs, replicas, result, span: int) -> list[Case]:
    """Fault tolerance: vllm:engine_healthy (per engine, no model_name) 0 takes the replica out."""
    sig = io.res["engine_healthy"]
    labels = {**io.base, **io.at_target(REPLICA), "engine": "0"}
    sick = Case("VllmModelCapacityLow pages at once when the only replica's engine reports unhealthy")
    replicas(sick, (REPLICA,), {})
    sick.add(series_text(sig.name, labels), f"1 1 0+0x{span - 2}")
    sick.checks = [
        Check(1, rule.name, []),
        Check(2, rule.name, [Expect(rule, result(REPLICA, "unhealthy"), 0)]),
    ]
    well = Case("VllmModelCapacityLow stays silent while the replica's engine reports healthy")
    replicas(well, (REPLICA,), {})
    well.add(series_text(sig.name, labels), f"1+0x{span}")
    well.checks = [Check(span - 1, rule.name, [])]
    return [sick, well]


def _lifecycle_cases(rule, io: Inputs, replicas, result, span: int) -> list[Case]:
    """What the log tells: a death pages at once; a crash-restart pages (no planned stop
    before it), a planned restart does not."""
    cases = []
    dead = Case("VllmModelCapacityLow pages at once when the log shows the only engine died")
    replicas(dead, (REPLICA,), {})
    io.server_state(dead, span, "0 120", ["ready", "ready", "dead"])
    io.event_times(dead, span, startup_complete="30", engine_dead="0 0 120")
    dead.checks = [Check(1, rule.name, []), Check(2, rule.name, [Expect(rule, result(REPLICA, "dead"), 0)])]
    cases.append(dead)

    def kept(cause: str) -> list[Expect]:
        """A cause that gave way to the next, kept firing for paging.recovery_for."""
        return [Expect(rule, result(REPLICA, cause), 0)]

    # Out of memory: the engine dies after it; the cause stays `out_of_memory` for
    # log_event_window, then the replica is just `dead`.
    window = minutes(io.cfg.alerts.log_event_window)
    oom = Case("VllmModelCapacityLow names out-of-memory as the cause while the log shows it recently")
    oom_span = max(span, window + 4)
    replicas(oom, (REPLICA,), {})
    io.server_state(oom, oom_span, "0 120", ["ready", "ready", "dead"])
    io.event_times(oom, oom_span, startup_complete="30", oom="0 0 120", engine_dead="0 0 120")
    oom.checks = [
        Check(1, rule.name, []),
        Check(2, rule.name, [Expect(rule, result(REPLICA, "out_of_memory"), 0)]),
        Check(2 + window - 1, rule.name, [Expect(rule, result(REPLICA, "out_of_memory"), 0)]),
        # The cause it had stays on the page for paging.recovery_for beside the one it has now.
        Check(2 + window, rule.name, [Expect(rule, result(REPLICA, "dead"), 0), *kept("out_of_memory")]),
    ]
    cases.append(oom)

    # Killed without a log line, then started again by its orchestrator: up answers again only
    # once the model is loaded, so only the log tells the replica is not serving.
    crash = Case(
        "VllmModelCapacityLow pages while the only replica restarts after a crash the log did not show"
    )
    replicas(crash, (REPLICA,), {REPLICA: f"1 0+0x{span}"})
    io.server_state(crash, span, "0 120", ["ready", "ready", "starting"])
    io.event_times(crash, span, startup_complete="30", shutdown="10", startup_begin="0 0 120")
    crash.checks = [
        Check(1, rule.name, []),
        Check(2, rule.name, [Expect(rule, result(REPLICA, "restarting"), 0)]),
    ]
    cases.append(crash)

    planned = Case("VllmModelCapacityLow stays silent while the only replica restarts after a planned stop")
    replicas(planned, (REPLICA,), {REPLICA: f"1 0+0x{span}"})
    io.server_state(planned, span, "0 60 120", ["ready", "stopping", "starting"])
    io.event_times(planned, span, startup_complete="30", shutdown="0 60", startup_begin="0 0 120")
    planned.checks = [Check(span - 1, rule.name, [])]
    cases.append(planned)

    # A rollout the server cannot start with: stopped on purpose, then every start fails and
    # the orchestrator starts it again. A start after a failed start is not planned: it is
    # `restarting`, not excused as a planned restart between the failures (one cause per
    # replica: the log's before `down`).
    looping = Case("VllmModelCapacityLow pages while the only replica starts again after its start failed")
    replicas(looping, (REPLICA,), {REPLICA: f"1 0+0x{span}"})
    io.server_state(
        looping, span, "0 60 120 180 240", ["ready", "stopping", "starting", "failed_start", "starting"]
    )
    io.event_times(
        looping,
        span,
        startup_complete="30",
        shutdown="0 60",
        startup_begin="0 0 120 120 240",
        startup_failed="0 0 0 180",
    )
    looping.checks = [
        Check(2, rule.name, []),
        Check(3, rule.name, [Expect(rule, result(REPLICA, "dead"), 0)]),
        Check(4, rule.name, [Expect(rule, result(REPLICA, "restarting"), 0), *kept("dead")]),
    ]
    cases.append(looping)
    return cases + _back_from_a_stop_cases(rule, io, replicas, result, span)


def _back_from_a_stop_cases(rule, io: Inputs, replicas, result, span: int) -> list[Case]:
    """A replica stopped on purpose (minute 1) and started again is ready in its log at minute
    `ready`, before Prometheus has scraped it again (no `up` sample at that minute): no page
    then; the first scrape after it decides, and a failed one pages `down` at once."""
    down_after = minutes(io.cfg.alerts.target_down_for)
    ready = 2 + down_after + 1  # ready in its log after longer than target_down_for unscraped
    states = ["ready", "stopped", *["starting"] * (ready - 2), "ready"]
    since = " ".join(str(60 * m) for m in (0, 1, *[2] * (ready - 2), ready))
    startup_complete = " ".join(["30"] * ready + [str(60 * ready)])

    def back(case: Case, after: str) -> None:
        # up: 1, then 0 while stopped and starting, no scrape yet at minute `ready`, then `after`.
        replicas(case, (REPLICA,), {REPLICA: " ".join(["1", *["0"] * (ready - 1), "_", after])})
        io.server_state(case, span, since, states)
        io.event_times(
            case, span, startup_complete=startup_complete, shutdown="0 60", startup_begin="0 0 120"
        )

    answered = Case(
        "VllmModelCapacityLow stays silent while a replica back from a planned stop is ready in its log "
        "and Prometheus has not scraped it since"
    )
    back(answered, f"1+0x{span}")
    answered.checks = [Check(ready, rule.name, []), Check(ready + 1, rule.name, [])]
    unanswered = Case(
        "VllmModelCapacityLow pages at the first failed scrape of a replica its log says is ready again"
    )
    back(unanswered, f"0+0x{span}")
    unanswered.checks = [
        Check(ready, rule.name, []),
        Check(ready + 1, rule.name, [Expect(rule, result(REPLICA, "down"), 0)]),
    ]
    return [answered, unanswered]


def _hung_cases(rule, io: Inputs, replicas, result) -> list[Case]:
    a = io.cfg.alerts
    span = minutes(a.hung_for) + 8
    hung = Case("VllmModelCapacityLow pages when the only replica's canary times out for alerts.hung_for")
    replicas(hung, (REPLICA,), {})
    began = 2  # the canary answers until minute 2, then times out
    io.probe(hung, span, failing="timeout", failing_from=began)
    io.probe_health(hung, span, 1)
    at = began + minutes(a.hung_for)
    hung.checks = [
        Check(at - 1, rule.name, []),
        Check(at, rule.name, [Expect(rule, result(REPLICA, "hung"), 0)]),
    ]
    extra = []
    if io.sleep_state(hung, span, awake=1):
        asleep = Case(
            "VllmModelCapacityLow stays silent while the only replica sleeps (sleep mode): not hung"
        )
        replicas(asleep, (REPLICA,), {})
        io.probe(asleep, span, failing="timeout", failing_from=began)
        io.probe_health(asleep, span, 1)
        io.sleep_state(asleep, span, awake=0)
        asleep.checks = [Check(span - 1, rule.name, [])]
        extra.append(asleep)
    saturated = Case("VllmModelCapacityLow stays silent on a saturated replica: tokens keep coming")
    replicas(saturated, (REPLICA,), {})
    io.probe(saturated, span, failing="timeout")
    io.probe_health(saturated, span, 1)
    if io.res.has("generation_tokens"):
        io.counter(saturated, io.res["generation_tokens"], 600, span)
        saturated.checks = [Check(span - 1, rule.name, [])]
        return [hung, saturated, *extra]
    return [hung, *extra]
