"""Saturation: the queue, the scheduler's limits, the KV cache and preemptions of one replica."""

from __future__ import annotations

from ...promql import number, seconds, selector
from ...vocabulary import Vocabulary, by
from ..declaration import DEAD_SERVER, PER_REPLICA, Declared
from ..expressions import (
    PEAK_WINDOW,
    floor_judged_from,
    floor_per_minute,
    percent,
    queue_threshold,
    slots_full,
    traffic,
)
from ..model import Alert
from ..runbook_kit import Section
from ..scenario_kit import NEAR_SIDES, NEIGHBOUR, Case, Check, Expect, Inputs, boundary, minutes, series_text

GROUP = "vllm-obs.saturation"


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        Declared(
            name="VllmQueueDepthHigh",
            knobs=(
                "alerts.queue_waiting_threshold",
                "alerts.queue_waiting_per_slot",
                "alerts.max_num_seqs",
                "alerts.queue_for",
            ),
            build=_queue_depth,
            needs=("requests_waiting",),
            panel="Waiting vs running",
            runbook=Section(
                meaning=(
                    "Requests wait to be scheduled: the number of waiting requests of one replica and model "
                    "has stayed above the threshold (`alerts.queue_waiting_threshold`, or with "
                    "`alerts.max_num_seqs` set `alerts.queue_waiting_per_slot` per slot, so a queue counts "
                    "against the batch it waits for). Demand exceeds what the server admits per step. Every "
                    "waiting request adds its wait to its time to first token within seconds, which is why this "
                    "alert waits only `alerts.queue_for` (2m by default; 1m suits traffic whose bursts drain "
                    "within a minute)."
                ),
                confirm=[
                    "Waiting and running: `{waiting}`, `{running}`",
                    "KV-cache usage: `{kv}`: full means memory is the limit, low means the scheduler is",
                    "From vLLM 0.20 `vllm:num_requests_waiting_by_reason` splits capacity from deferred requests",
                ],
                act=[
                    "KV cache full: add replicas, or free memory (see VllmKVCachePressure).",
                    "KV cache has room: raise `--max-num-seqs` / `--max-num-batched-tokens` (VllmSchedulerThrottled).",
                    "Autoscale on `vllm:num_requests_waiting` and put the replicas behind one load balancer.",
                ],
            ),
            scenarios=_queue,
            symptoms=(DEAD_SERVER, PER_REPLICA),
        ),
        Declared(
            name="VllmSchedulerThrottled",
            knobs=(
                "alerts.throttled_kv_usage_below",
                "alerts.throttled_window",
                "alerts.throttled_for",
                "alerts.max_num_seqs",
            ),
            build=_scheduler_throttled,
            needs=("requests_waiting", "requests_running", "kv_cache_usage"),
            panel="Waiting vs running",
            runbook=Section(
                meaning=(
                    "The queue keeps growing while the KV cache has room and running requests sit at the "
                    "server's limit (`alerts.max_num_seqs`, or with 0 their peak of the last hour): vLLM is "
                    "not short of memory, it is capped by its scheduler limits (the maximum number of "
                    "sequences or batched tokens per step)."
                ),
                confirm=[
                    "Queue trend: `deriv({waiting}[10m])`; from vLLM 0.20 the alert counts only requests "
                    'waiting for room (`vllm:num_requests_waiting_by_reason{{reason="capacity"}}`), not '
                    "deferred ones held back on purpose",
                    "KV-cache usage: `{kv}`",
                    "Running: `{running}`",
                ],
                act=[
                    "Raise `--max-num-seqs` (the running count sits at it) and/or `--max-num-batched-tokens`, "
                    "then watch KV-cache usage and inter-token latency.",
                ],
            ),
            scenarios=_throttled,
            symptoms=(DEAD_SERVER, PER_REPLICA),
        ),
        Declared(
            name="VllmKVCachePressure",
            knobs=("alerts.kv_usage_threshold", "alerts.kv_usage_for"),
            build=_kv_cache_pressure,
            needs=("kv_cache_usage", "requests_waiting"),
            uses=("preemptions",),
            panel="KV-cache usage per engine",
            runbook=Section(
                meaning=(
                    "The KV cache of one replica (its fullest engine) is nearly full while requests wait for "
                    "it or are preempted out of it and recomputed, which costs latency and throughput. A "
                    "full cache alone is not this alert: a busy server keeps it full by design."
                ),
                confirm=[
                    "Usage per replica: `{kv}` (per engine: the raw series `{kv_series}`)",
                    "Preemptions: `{preemptions}`",
                    "Log: the stats line `... Running: N reqs, Waiting: M reqs, ... KV cache usage: 9x.x%`",
                ],
                act=[
                    "A busy server runs its cache near full by design: act when preemptions or a growing "
                    "queue come with it (VllmPreemptions, VllmQueueDepthHigh).",
                    "Give the cache more memory: raise `--gpu-memory-utilization` while keeping headroom "
                    "(0.90-0.95; too high causes out-of-memory errors at runtime), or size it exactly with "
                    "`--kv-cache-memory-bytes` when other processes share the device.",
                    "Shrink demand: lower `--max-model-len` to what clients really send, lower `--max-num-seqs`.",
                    "Store more per byte: `--kv-cache-dtype fp8`; keep the prefix cache on (the V1 default) for "
                    "shared prompts.",
                    "Offload: `--kv-offloading-size` (GiB of host memory, `--kv-offloading-backend native` or "
                    "`lmcache`) keeps evicted prefixes for reuse instead of recomputing them.",
                    "Spread the model: more tensor-parallel GPUs per replica, or more replicas.",
                ],
            ),
            scenarios=_kv_pressure,
            symptoms=(DEAD_SERVER, PER_REPLICA),
        ),
        Declared(
            name="VllmKVCacheFillingUp",
            knobs=(
                "alerts.kv_predict_floor",
                "alerts.kv_predict_window",
                "alerts.kv_predict_horizon",
                "alerts.kv_predict_for",
            ),
            build=_kv_cache_filling_up,
            needs=("kv_cache_usage",),
            panel="KV-cache usage per engine",
            runbook=Section(
                meaning=(
                    "KV-cache usage is already high and, at the rate of the last window, will reach 100% "
                    "within the horizon. Act before preemptions start."
                ),
                confirm=["Trend: `predict_linear({kv}[15m], 900)`", "Queue: `{waiting}`"],
                act=["The remedies of VllmKVCachePressure; adding a replica now is the quickest."],
            ),
            scenarios=_kv_filling,
            symptoms=(DEAD_SERVER, PER_REPLICA),
        ),
        Declared(
            name="VllmPreemptions",
            knobs=("alerts.preemptions_per_request", "alerts.preemptions_for", "alerts.min_requests"),
            build=_preemption_ratio,
            needs=("preemptions",),
            panel="Preemptions per finished request",
            runbook=Section(
                meaning=(
                    "vLLM preempts running requests for lack of KV-cache blocks (and recomputes them later). "
                    "The rate is normalised by finished requests, so a busy server does not alert more."
                ),
                confirm=[
                    "Preemptions per finished request: `{preemptions_ratio}`",
                    "KV-cache usage: `{kv}`",
                    "Log: the V1 engine's periodic stats line ends with `Preemptions: N` when there were any "
                    "(the V0 engine printed `Sequence group ... is preempted by PreemptionMode.RECOMPUTE mode` "
                    "instead)",
                ],
                act=[
                    "Same as VllmKVCachePressure: more cache memory (`--gpu-memory-utilization`, "
                    "`--kv-cache-memory-bytes`), KV offloading, fewer or shorter sequences, more replicas.",
                    "V1 preempts by recomputation only: a preempted request re-runs its prefill, so its TTFT "
                    "and the replica's throughput both suffer.",
                ],
            ),
            scenarios=_preemptions,
            symptoms=(DEAD_SERVER, PER_REPLICA),
        ),
    ]


def _queue_depth(v: Vocabulary) -> list[Alert]:
    a, sc = v.cfg.alerts, v.scope
    bound, relative = queue_threshold(a)
    return [
        Alert(
            name="VllmQueueDepthHigh",
            expr=f"{v.names.requests_waiting} > {number(bound)}",
            for_=a.queue_for,
            severity="warning",
            summary="vLLM requests are queueing.",
            description=(
                f"{{{{ $value }}}} requests are waiting on {sc.where} "
                f"(threshold {number(bound)}{f': {relative}' if relative else ''}, for {a.queue_for})."
            ),
            dashboard="kv_cache",
        )
    ]


def _scheduler_throttled(v: Vocabulary) -> list[Alert]:
    a, sc, n = v.cfg.alerts, v.scope, v.names
    # Every slot taken: a queue beside free slots is not the scheduler's limit.
    full, limit = slots_full(v)
    # Deferred requests (vLLM 0.20+) wait on something else than room: leave them out.
    by_reason = v.res.has("requests_waiting_by_reason")
    queue = n.requests_waiting_for_capacity if by_reason else n.requests_waiting
    return [
        Alert(
            name="VllmSchedulerThrottled",
            expr=(
                f"{queue} > 0\n"
                f"and {sc.on_instance_model}\nderiv({queue}[{a.throttled_window}]) > 0\n"
                f"and {sc.on_instance_model}\n{n.kv_cache_usage} < {number(a.throttled_kv_usage_below)}\n"
                f"and {sc.on_instance_model}\n(\n{full}\n)"
            ),
            for_=a.throttled_for,
            severity="warning",
            summary="vLLM's queue grows while the KV cache has room: the scheduler limits are the bottleneck.",
            description=(
                f"The queue on {sc.where} has kept growing for {a.throttled_window} ({{{{ $value }}}} waiting"
                + (" for capacity, deferred requests left out" if by_reason else "")
                + ") "
                f"while KV-cache usage stays below {percent(a.throttled_kv_usage_below)} and running "
                f"requests sit at {limit}; raise --max-num-seqs or --max-num-batched-tokens."
            ),
            dashboard="kv_cache",
        )
    ]


def _kv_cache_pressure(v: Vocabulary) -> list[Alert]:
    a, sc = v.cfg.alerts, v.scope
    kv = v.res["kv_cache_usage"]
    usage, engine = v.names.kv_cache_usage, ""
    if kv.has_label("engine"):
        # Each engine (data-parallel rank) has its own cache: name the one that fills.
        usage = f"max by ({by(sc.instance_model)}, engine) ({selector(kv.name, v.vllm)})"
        engine = " engine {{ $labels.engine }}"
    # A busy server runs its cache near full by design: full is a cause worth a ticket only
    # while requests wait for it or are preempted out of it.
    n = v.names
    pressed = [f"{n.requests_waiting} > 0"]
    if v.res.has("preemptions"):
        pressed.append(f"{n.preemptions} > 0")
    return [
        Alert(
            name="VllmKVCachePressure",
            expr=(
                f"{usage} > {number(a.kv_usage_threshold)}\nand {sc.on_instance_model}\n(\n  "
                + "\n  or\n  ".join(pressed)
                + "\n)"
            ),
            for_=a.kv_usage_for,
            severity="warning",
            summary="vLLM's KV cache is full and requests wait for it.",
            description=(
                f"KV-cache usage of {sc.where}{engine} is {{{{ $value | humanizePercentage }}}} "
                f"(threshold {percent(a.kv_usage_threshold)}, for {a.kv_usage_for}) while requests wait"
                + (" or are preempted" if v.res.has("preemptions") else "")
                + "."
            ),
            dashboard="kv_cache",
        )
    ]


def _kv_cache_filling_up(v: Vocabulary) -> list[Alert]:
    a, sc, n = v.cfg.alerts, v.scope, v.names
    horizon = int(seconds(a.kv_predict_horizon))
    return [
        Alert(
            name="VllmKVCacheFillingUp",
            expr=(
                f"{n.kv_cache_usage} > {number(a.kv_predict_floor)}\n"
                f"and {sc.on_instance_model}\npredict_linear({n.kv_cache_usage}[{a.kv_predict_window}], {horizon}) >= 1"
            ),
            for_=a.kv_predict_for,
            severity="warning",
            summary="vLLM's KV cache will be full soon.",
            description=(
                f"KV-cache usage of {sc.where} is {{{{ $value | humanizePercentage }}}} and, at the rate of "
                f"the last {a.kv_predict_window}, will be full within {a.kv_predict_horizon}."
            ),
            dashboard="kv_cache",
        )
    ]


def _preemption_ratio(v: Vocabulary) -> list[Alert]:
    a, sc = v.cfg.alerts, v.scope
    return [
        Alert(
            name="VllmPreemptions",
            expr=(
                f"{v.names.preemptions_per_request} > {number(a.preemptions_per_request)}\n"
                f"and {sc.on_instance_model}\n{traffic(v)}"
            ),
            for_=a.preemptions_for,
            severity="warning",
            summary="vLLM is preempting requests for lack of KV cache.",
            description=(
                f"{sc.where} preempts {{{{ $value | humanize }}}} times per finished request "
                f"(threshold {number(a.preemptions_per_request)}, for {a.preemptions_for})."
            ),
            dashboard="kv_cache",
        )
    ]


# -- promtool scenarios --------------------------------------------------------------------


def _queue(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    threshold, _ = queue_threshold(io.cfg.alerts)
    sig = io.res["requests_waiting"]
    span = minutes(rule.for_) + 5
    fire = Case(f"VllmQueueDepthHigh fires after {rule.for_} with {threshold + 1:g} waiting")
    # Two engines (data-parallel ranks) of one replica: their queues add up.
    if sig.has_label("engine"):
        io.gauge(fire, sig, (threshold + 1) / 2, span, engine="0")
        io.gauge(fire, sig, (threshold + 1) / 2, span, engine="1")
    else:
        io.gauge(fire, sig, threshold + 1, span)
    io.gauge(fire, sig, 0, span, instance=NEIGHBOUR)
    fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, io.result(), threshold + 1)])
    silent = Case(f"VllmQueueDepthHigh stays silent at exactly {threshold:g} waiting")
    io.gauge(silent, sig, threshold, span)
    silent.checks = [Check(span - 1, rule.name, [])]
    return [fire, silent]


def _throttled(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    a = io.cfg.alerts
    span = minutes(rule.for_) + 15
    waiting, running, kv = io.res["requests_waiting"], io.res["requests_running"], io.res["kv_cache_usage"]
    by_reason = io.res["requests_waiting_by_reason"] if io.res.has("requests_waiting_by_reason") else None

    def queue(case: Case, values: str) -> None:
        """Requests waiting, all of them for capacity where the source splits them by reason."""
        case.add(series_text(waiting.name, io.labels(signal=waiting)), values)
        if by_reason is not None:
            case.add(series_text(by_reason.name, io.labels(signal=by_reason, reason="capacity")), values)

    # KV usage a fifth either side of the bound.
    low, high = (min(1.0, round(a.throttled_kv_usage_below * scale, 6)) for _, scale in reversed(NEAR_SIDES))
    # Running requests at the limit: alerts.max_num_seqs, or (with 0) a steady count at its own peak.
    at_limit = a.max_num_seqs if a.max_num_seqs > 0 else 4
    fire = Case(f"VllmSchedulerThrottled fires when the queue grows for {rule.for_} while KV usage is low")
    queue(fire, f"1+1x{span}")
    io.gauge(fire, running, at_limit, span)
    io.gauge(fire, kv, low, span)
    start, fire_at = 1, 1 + minutes(rule.for_)
    fire.checks = boundary(rule.name, start, rule.for_, [Expect(rule, io.result(), 1 + fire_at)])
    memory = Case("VllmSchedulerThrottled stays silent when the KV cache, not the scheduler, is the limit")
    queue(memory, f"1+1x{span}")
    io.gauge(memory, running, at_limit, span)
    io.gauge(memory, kv, high, span)
    memory.checks = [Check(span - 1, rule.name, [])]
    flat = Case("VllmSchedulerThrottled stays silent while the queue holds steady")
    queue(flat, f"5+0x{span}")
    io.gauge(flat, running, at_limit, span)
    io.gauge(flat, kv, low, span)
    flat.checks = [Check(span - 1, rule.name, [])]
    # Below the limit (alerts.max_num_seqs, or the hour's peak): the queue waits on something else.
    below = Case("VllmSchedulerThrottled stays silent while running requests are below the limit")
    queue(below, f"1+1x{span}")
    if a.max_num_seqs > 0:
        io.gauge(below, running, at_limit - 1, span)
    else:
        limit = 8  # the hour's peak, then half of it
        below.add(
            series_text(running.name, io.labels(signal=running)),
            f"{number(limit)}+0x4 {number(limit / 2)}+0x{span - 5}",
        )
    io.gauge(below, kv, low, span)
    below.checks = [Check(span - 1, rule.name, [])]
    # A queue that grew and then holds is still throttled for the rest of alerts.throttled_window:
    # the trend is over the whole window.
    window = minutes(a.throttled_window)
    grew = fire_at + 2
    holds = Case(
        f"VllmSchedulerThrottled keeps firing over {a.throttled_window} after the queue stops growing"
    )
    queue(holds, f"1+1x{grew} {1 + grew}+0x{span + window}")
    io.gauge(holds, running, at_limit, span + window)
    io.gauge(holds, kv, low, span + window)
    holds.checks = [Check(grew + window - 2, rule.name, [Expect(rule, io.result(), 1 + grew)])]
    # A queue that grows with nothing running at all: a stalled engine, not a throttled one.
    nothing = Case("VllmSchedulerThrottled stays silent when the queue grows and nothing runs")
    queue(nothing, f"1+1x{span}")
    io.gauge(nothing, running, 0, span)
    io.gauge(nothing, kv, low, span)
    nothing.checks = [Check(span - 1, rule.name, [])]
    cases = [fire, memory, flat, below, holds, nothing]
    if by_reason is not None:
        # Deferred requests are held back on purpose (a KV transfer, structured-output
        # compilation): a pile of them is not the scheduler's limit.
        deferred = Case("VllmSchedulerThrottled stays silent when the requests piling up are deferred")
        io.ramp(deferred, waiting, 1, 1, span)
        io.gauge(deferred, by_reason, 0, span, reason="capacity")
        io.ramp(deferred, by_reason, 1, 1, span, reason="deferred")
        io.gauge(deferred, running, at_limit, span)
        io.gauge(deferred, kv, low, span)
        deferred.checks = [Check(span - 1, rule.name, [])]
        cases.append(deferred)
    if a.max_num_seqs == 0:
        # The running peak is the limit for PEAK_WINDOW: running at half of it is not at the
        # limit until the peak has left the window.
        peak = minutes(PEAK_WINDOW)
        old = Case(f"VllmSchedulerThrottled fires once the running peak is more than {PEAK_WINDOW} old")
        lower = 4
        old.add(
            series_text(running.name, io.labels(signal=running)),
            f"{number(2 * lower)}+0x4 {number(lower)}+0x{peak + span}",
        )
        queue(old, f"1+1x{peak + span}")
        io.gauge(old, kv, low, peak + span)
        # The peak (minutes 0 to 4) leaves the window at minute 5 + peak.
        old.checks = [
            Check(peak + 4, rule.name, []),
            Check(
                peak + 5 + minutes(rule.for_),
                rule.name,
                [Expect(rule, io.result(), 6 + peak + minutes(rule.for_))],
            ),
        ]
        cases.append(old)
    return cases


def _kv_pressure(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    threshold = io.cfg.alerts.kv_usage_threshold
    sig, waiting = io.res["kv_cache_usage"], io.res["requests_waiting"]
    span = minutes(rule.for_) + 5
    hot = round(threshold + (1 - threshold) / 2, 6)
    engines = sig.has_label("engine")

    def usage(case: Case, value: float) -> None:
        io.gauge(case, sig, value, span, engine="0")
        if engines:
            # Max, not sum or average: the second engine's 0.1 must not hide the first.
            io.gauge(case, sig, 0.1, span, engine="1")

    # Per engine where the source has engines: the alert names the one that fills.
    labels = {**io.result(), "engine": "0"} if engines else io.result()
    fire = Case(
        f"VllmKVCachePressure fires after {rule.for_} at {hot:g} while requests wait, for the engine that fills"
    )
    usage(fire, hot)
    io.gauge(fire, waiting, 3, span)
    io.gauge(fire, sig, 0.1, span, instance=NEIGHBOUR)
    fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, labels, hot)])
    busy = Case(f"VllmKVCachePressure stays silent at {hot:g} while nothing waits and nothing is preempted")
    usage(busy, hot)
    io.gauge(busy, waiting, 0, span)
    if io.res.has("preemptions"):
        io.counter(busy, io.res["preemptions"], 0, span)
    busy.checks = [Check(span - 1, rule.name, [])]
    cool = threshold  # exactly at the threshold: `>` must not fire
    silent = Case(f"VllmKVCachePressure stays silent at exactly {cool:g}, requests waiting")
    usage(silent, cool)
    io.gauge(silent, waiting, 3, span)
    silent.checks = [Check(span - 1, rule.name, [])]
    # At the production clock (scrape and evaluation every prometheus.scrape_interval): pending
    # until `for` has passed to the scrape, firing at it.
    step = seconds(io.cfg.prometheus.scrape_interval)
    clock = Case(
        f"VllmKVCachePressure at the production clock: fires {rule.for_} after the cache fills, not a scrape sooner",
        every=io.cfg.prometheus.scrape_interval,
        interval=io.cfg.prometheus.scrape_interval,
    )
    usage(clock, hot)
    io.gauge(clock, waiting, 3, span)
    hold = seconds(rule.for_ or "0s") / 60
    clock.checks = [
        Check(hold - step / 60, rule.name, []),
        Check(hold, rule.name, [Expect(rule, labels, hot)]),
    ]
    cases = [fire, busy, silent, clock]
    if io.res.has("preemptions"):
        preempting = Case(f"VllmKVCachePressure fires at {hot:g} while requests are preempted, none waiting")
        usage(preempting, hot)
        io.gauge(preempting, waiting, 0, span)
        io.counter(preempting, io.res["preemptions"], 5, span)
        # The preemption rate exists from the counter's second sample.
        preempting.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, labels, hot)])
        cases.append(preempting)
    return cases


def _kv_filling(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    a = io.cfg.alerts
    sig = io.res["kv_cache_usage"]
    horizon = seconds(a.kv_predict_horizon) / 60
    # Rise so that the prediction crosses 1 as soon as usage passes the floor.
    step = round(max(0.005, (1 - a.kv_predict_floor) / horizon * 1.25), 4)
    # Start half a step off the floor so no sample lands on it exactly (float noise).
    start = round(max(0.0, a.kv_predict_floor - step * (minutes(a.kv_predict_window) + 2.5)), 4)
    crossing = next(m for m in range(1000) if start + step * m > a.kv_predict_floor + 1e-9)
    span = crossing + minutes(rule.for_) + 3
    fire = Case(f"VllmKVCacheFillingUp fires when usage above {a.kv_predict_floor:g} rises toward full")
    io.ramp(fire, sig, start, step, span)
    fire_at = crossing + minutes(rule.for_)
    value = start + step * fire_at
    fire.checks = boundary(rule.name, crossing, rule.for_, [Expect(rule, io.result(), value)])
    steady = Case("VllmKVCacheFillingUp stays silent while high usage holds steady")
    io.gauge(steady, sig, round((a.kv_predict_floor + 1) / 2, 6), span)
    steady.checks = [Check(span - 1, rule.name, [])]
    return [fire, steady]


def _preemptions(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    limit = io.cfg.alerts.preemptions_per_request
    sig = io.res["preemptions"]
    span = minutes(rule.for_) + 5
    cases = []
    for label, factor in (("fires", 1.1), ("stays silent", 0.9)):
        ratio = limit * factor
        case = Case(f"VllmPreemptions {label} at {ratio:g} preemptions per request")
        io.traffic(case, 1000, span)
        io.counter(case, sig, round(1000 * ratio, 6), span)
        if factor > 1:
            case.checks = boundary(
                rule.name, 1, rule.for_, [Expect(rule, io.result(), round(1000 * ratio, 6) / 1000)]
            )
        else:
            case.checks = [Check(span - 1, rule.name, [])]
        cases.append(case)
    # The traffic floor from both sides, preempting well above the limit: too idle to judge is silent.
    ratio = limit * 2
    for side, scale in NEAR_SIDES:
        rate = floor_per_minute(io.v) * scale
        near = Case(f"VllmPreemptions: {ratio:g} preemptions per request, traffic {side} alerts.min_requests")
        io.traffic(near, rate, span + 5)
        io.counter(near, sig, round(rate * ratio, 6), span + 5)
        near.checks = (
            boundary(rule.name, floor_judged_from(io.v), rule.for_, [Expect(rule, io.result(), ratio)])
            if scale > 1
            else [Check(span + 4, rule.name, [])]
        )
        cases.append(near)
    return cases
