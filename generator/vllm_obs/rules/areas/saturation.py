"""Saturation: the queue, the scheduler's limits, the KV cache and preemptions of one replica."""

from __future__ import annotations

from ...promql import number, seconds, selector
from ...vocabulary import Vocabulary, by
from ..declaration import DEAD_SERVER, LOAD_SYMPTOMS, PER_REPLICA, Declared
from ..expressions import percent, queue_threshold, slots_full, traffic
from ..model import Alert
from ..runbook_kit import Section
from ..scenarios.saturation import (
    kv_filling_cases,
    kv_pressure_cases,
    preemptions_cases,
    queue_cases,
    throttled_cases,
)

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
                    "waiting request adds its wait to its time to first token; a normal peak's queue drains "
                    "within minutes, so this alert waits `alerts.queue_for` (5m by default), and an SLO burn "
                    "page of the model silences it (the page already says users wait)."
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
            scenarios=queue_cases,
            symptoms=(DEAD_SERVER, PER_REPLICA, LOAD_SYMPTOMS),
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
            scenarios=throttled_cases,
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
            scenarios=kv_pressure_cases,
            symptoms=(DEAD_SERVER, PER_REPLICA, LOAD_SYMPTOMS),
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
            scenarios=kv_filling_cases,
            symptoms=(DEAD_SERVER, PER_REPLICA, LOAD_SYMPTOMS),
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
            scenarios=preemptions_cases,
            symptoms=(DEAD_SERVER, PER_REPLICA, LOAD_SYMPTOMS),
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
