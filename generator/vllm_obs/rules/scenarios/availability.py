"""promtool cases of availability: a stuck engine against busy, idle, sleeping and pooling ones,
failed scrapes against what the log says was planned, and servers or whole partitions gone."""

from __future__ import annotations

from ..model import Alert
from ..scenario_kit import (
    ELSEWHERE,
    NEIGHBOUR,
    REPLICA,
    Case,
    Check,
    Expect,
    Inputs,
    boundary,
    minutes,
    series_text,
)

# A cluster or namespace whose targets all vanished is remembered this long, then forgotten
# (scaled to zero or removed on purpose stops alerting an hour later): the partition rule's
# memory, kept here so its cases can read it.
PARTITION_MEMORY = "1h"
# Minutes a case runs past its alert's `for`, so its last checks come after that has elapsed.
PAST_FOR = 5


def stalled_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    a = inputs.cfg.alerts
    waiting, running, tokens = (
        inputs.res["requests_waiting"],
        inputs.res["requests_running"],
        inputs.res["generation_tokens"],
    )
    span = minutes(a.stall_window) + minutes(rule.for_) + PAST_FOR
    # One case per token counter the source has (generated: a generating engine; prompt: an
    # embedding server): it flows until minute `stops`, then stands still, the other stood
    # still all along; its window is clear of it from stops + stall_window.
    stops = 2
    stuck_cases = []
    for key, server in (
        ("generation_tokens", "a generating engine"),
        ("prompt_tokens", "an embedding server"),
    ):
        if not inputs.res.has(key):
            continue
        stuck = Case(
            f"VllmEngineStalled fires on {server} when requests wait and no token has come out for "
            f"{a.stall_window}, then {rule.for_}"
        )
        inputs.gauge(stuck, waiting, 3, span)
        inputs.gauge(stuck, running, 2, span)
        inputs.tokens(stuck, span)
        sig = inputs.res[key]
        stuck.add(
            series_text(sig.name, inputs.labels(signal=sig)),
            f"500+600x{stops} {500 + 600 * stops}+0x{span - stops}",
        )
        stuck.checks = boundary(
            rule.name, stops + minutes(a.stall_window), rule.for_, [Expect(rule, inputs.result(), 5)]
        )
        stuck_cases.append(stuck)
    busy = Case("VllmEngineStalled stays silent while tokens keep coming")
    inputs.gauge(busy, waiting, 3, span)
    inputs.gauge(busy, running, 2, span)
    inputs.counter(busy, tokens, 600, span)
    busy.checks = [Check(span - 1, rule.name, [])]
    extra = []
    if inputs.res.has("prompt_tokens"):
        pooling = Case(
            "VllmEngineStalled stays silent on a busy embedding server: prompt tokens keep coming, "
            "none is generated"
        )
        inputs.gauge(pooling, waiting, 3, span)
        inputs.gauge(pooling, running, 2, span)
        inputs.tokens(pooling, span, prompt=6000)
        pooling.checks = [Check(span - 1, rule.name, [])]
        extra.append(pooling)
    idle = Case("VllmEngineStalled stays silent on an idle server")
    inputs.gauge(idle, waiting, 0, span)
    inputs.gauge(idle, running, 0, span)
    idle.add(series_text(tokens.name, inputs.labels(signal=tokens)), f"500+0x{span}")
    idle.checks = [Check(span - 1, rule.name, [])]
    if inputs.sleep_state(stuck_cases[0], span, awake=1):
        asleep = Case(
            "VllmEngineStalled stays silent while the engine sleeps (sleep mode): it makes no progress by design"
        )
        inputs.gauge(asleep, waiting, 3, span)
        inputs.gauge(asleep, running, 2, span)
        inputs.tokens(asleep, span)
        inputs.sleep_state(asleep, span, awake=0)
        asleep.checks = [Check(span - 1, rule.name, [])]
        extra.append(asleep)
    if inputs.res.has("requests_waiting_by_reason"):
        # vLLM issue #53130: the scheduler stops admitting once running and deferred requests
        # reach max_num_seqs; /health answers 200 and only the deferred count shows it.
        by_reason = inputs.res["requests_waiting_by_reason"]
        deferred = Case(
            "VllmEngineStalled fires when deferred requests pile up while nothing runs and no token "
            "comes out (the scheduler stopped admitting)"
        )
        inputs.gauge(deferred, waiting, 4, span)
        inputs.gauge(deferred, by_reason, 4, span, reason="deferred")
        inputs.gauge(deferred, by_reason, 0, span, reason="capacity")
        inputs.gauge(deferred, running, 0, span)
        inputs.tokens(deferred, span)
        deferred.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, inputs.result(), 4)])
        extra.append(deferred)
    # vllm-project/vllm-metal#479: six requests waiting for capacity, none running, an empty KV
    # cache, no token, for an hour; /health answers 200 (the engine is alive, it admits nothing).
    admitting = Case(
        "VllmEngineStalled fires when requests wait for capacity with none running, an empty KV cache "
        "and no token (admission stopped, vllm-metal#479)"
    )
    inputs.gauge(admitting, waiting, 6, span)
    inputs.gauge(admitting, running, 0, span)
    if inputs.res.has("requests_waiting_by_reason"):
        inputs.gauge(admitting, inputs.res["requests_waiting_by_reason"], 6, span, reason="capacity")
        inputs.gauge(admitting, inputs.res["requests_waiting_by_reason"], 0, span, reason="deferred")
    if inputs.res.has("kv_cache_usage"):
        inputs.gauge(admitting, inputs.res["kv_cache_usage"], 0, span)
    inputs.tokens(admitting, span)
    admitting.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, inputs.result(), 6)])
    extra.append(admitting)
    return [*stuck_cases, busy, idle, *extra]


def target_down_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    span = minutes(rule.for_) + PAST_FOR
    down = Case(f"VllmTargetDown fires after {rule.for_} of failed scrapes, for that instance only")
    down.add(series_text("up", {**inputs.base, **inputs.at_target(REPLICA)}), f"0+0x{span}")
    down.add(series_text("up", {**inputs.base, **inputs.at_target(NEIGHBOUR)}), f"1+0x{span}")
    labels = {**inputs.base, **inputs.at_target(REPLICA)}
    down.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, labels, 0)])
    up = Case("VllmTargetDown stays silent while scrapes succeed")
    up.add(series_text("up", {**inputs.base, **inputs.at_target(REPLICA)}), f"1+0x{span}")
    up.checks = [Check(span - 1, rule.name, [])]
    cases = [down, up]
    if inputs.cfg.prometheus.log_exporters:
        cases += _target_down_lifecycle(rule, inputs, labels)
    return cases


def _target_down_lifecycle(rule: Alert, inputs: Inputs, labels: dict[str, str]) -> list[Case]:
    """What the log says was planned does not warn: a first start, a stop on purpose (until its
    grace is over) and the start after it. A start after a crash the log did not show, or after
    a failed start, does."""
    a = inputs.cfg.alerts
    span = minutes(rule.for_) + PAST_FOR
    up = series_text("up", {**inputs.base, **inputs.at_target(REPLICA)})
    first = Case("VllmTargetDown stays silent while the log shows the server's first start")
    first.add(up, f"0+0x{span}")
    inputs.server_state(first, span, "0 60", ["unknown", "loading"])
    inputs.event_times(first, span, startup_begin="0 60")
    first.checks = [Check(span - 1, rule.name, [])]

    restart = Case("VllmTargetDown stays silent while the server starts again after a planned stop")
    restart.add(up, f"1 0+0x{span}")
    inputs.server_state(restart, span, "0 60 60 120", ["ready", "stopping", "stopped", "starting"])
    inputs.event_times(restart, span, startup_complete="30", shutdown="0 60", startup_begin="0 0 0 120")
    restart.checks = [Check(span - 1, rule.name, [])]

    crash = Case("VllmTargetDown fires while the server starts again after a crash the log did not show")
    crash.add(up, f"1 0+0x{span}")
    inputs.server_state(crash, span, "0 120", ["ready", "ready", "starting"])
    inputs.event_times(crash, span, startup_complete="30", shutdown="10", startup_begin="0 0 120")
    crash.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, labels, 0)])

    died = Case("VllmTargetDown fires while the server starts again after its engine died")
    died.add(up, f"1 0+0x{span}")
    inputs.server_state(died, span, "0 60 120", ["ready", "dead", "starting"])
    # vLLM logs its own shutdown after an engine death: that stop was not planned.
    inputs.event_times(
        died, span, startup_complete="30", engine_dead="0 60", shutdown="0 60", startup_begin="0 0 120"
    )
    died.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, labels, 0)])

    # A rollout it cannot start with: stopped on purpose, its start fails (minute 2), and the
    # orchestrator starts it again (minute 3): a start after a failed start is not planned.
    looping = Case("VllmTargetDown fires while the server starts again after its start failed")
    looping.add(up, f"1 0+0x{span}")
    inputs.server_state(looping, span, "0 60 120 180", ["ready", "stopping", "failed_start", "starting"])
    inputs.event_times(
        looping,
        span,
        startup_complete="30",
        shutdown="0 60",
        startup_begin="0 0 90 180",
        startup_failed="0 0 120",
    )
    looping.checks = boundary(rule.name, 2, rule.for_, [Expect(rule, labels, 0)])

    grace = minutes(a.planned_stop_grace)
    long = grace + minutes(rule.for_) + 3
    stopped = Case(f"VllmTargetDown stays silent for {a.planned_stop_grace} after a planned stop, then fires")
    stopped.add(up, f"1 0+0x{long}")
    # Stopped at t=60 s: quiet while time() - 60 < grace, so the condition returns at 1 + grace.
    inputs.server_state(stopped, long, "0 60", ["ready", "stopped"])
    inputs.event_times(stopped, long, startup_complete="30", shutdown="0 60")
    stopped.checks = [Check(grace, rule.name, [])] + boundary(
        rule.name, 1 + grace, rule.for_, [Expect(rule, labels, 0)]
    )
    return [first, restart, crash, died, looping, stopped]


def absent_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    cases = []
    running = inputs.res.signals.get("requests_running")
    for rule in rules:
        span = minutes(rule.for_) + PAST_FOR
        if rule.labels["scope"] == "job":
            gone = Case(f"VllmMetricsAbsent (job) fires when no target of the job is scraped for {rule.for_}")
            gone.add(series_text("up", {"job": "some-other-job", "instance": "x:1"}), f"1+0x{span}")
            gone.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, dict(inputs.base), 1)])
            there = Case("VllmMetricsAbsent (job) stays silent while the job's targets are scraped")
            there.add(series_text("up", {**inputs.base, **inputs.at_target(REPLICA)}), f"1+0x{span}")
            if running is not None:
                inputs.gauge(there, running, 1, span)
            there.checks = [Check(span - 1, rule.name, [])]
            cases += [gone, there]
        elif rule.labels["scope"] in ("namespace", "cluster"):
            cases.append(_partition_vanished(rule, inputs))
        elif running is not None:
            empty = Case(
                f"VllmMetricsAbsent (target) fires when a scraped target has no vLLM series for {rule.for_}"
            )
            empty.add(series_text("up", {**inputs.base, **inputs.at_target(REPLICA)}), f"1+0x{span}")
            empty.add(series_text("up", {**inputs.base, **inputs.at_target(NEIGHBOUR)}), f"1+0x{span}")
            inputs.gauge(empty, running, 1, span, instance=ELSEWHERE)
            labels = {**inputs.base, **inputs.at_target(REPLICA)}
            empty.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, labels, 1)])
            cases.append(empty)
    # The rules share the alert name: a case must expect every firing one.
    merged = []
    for case in cases:
        for check in case.checks:
            check.alertname = rules[0].name
        merged.append(case)
    return merged


def _partition_vanished(rule: Alert, inputs: Inputs) -> Case:
    """The replica's side loses its only target at minute 5 while the neighbour's stays: the
    alert names that side alone, and forgets it PARTITION_MEMORY after its last sample."""
    gone_at, memory = 5, minutes(PARTITION_MEMORY)
    span = gone_at + memory + 5
    case = Case(
        f"VllmMetricsAbsent ({rule.labels['scope']}) fires when one {rule.labels['scope']}'s targets "
        f"all vanish for {rule.for_}, and not for the other"
    )
    case.add(series_text("up", {**inputs.base, **inputs.at_target(REPLICA)}), f"1+0x{gone_at - 1} stale")
    case.add(series_text("up", {**inputs.base, **inputs.at_target(NEIGHBOUR)}), f"1+0x{span}")
    running = inputs.res.signals.get("requests_running")
    if running is not None:  # the neighbour is a vLLM server, so the per-target rule stays silent
        inputs.gauge(case, running, 1, span, instance=NEIGHBOUR)
    expected = [Expect(rule, {**inputs.partition(REPLICA), "job": inputs.base["job"]}, 1)]
    case.checks = [
        *boundary(rule.name, gone_at, rule.for_, expected),
        Check(gone_at + memory - 1, rule.name, expected),
        Check(gone_at + memory + 1, rule.name, []),
    ]
    return case
