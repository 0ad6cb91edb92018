"""Latency: one replica's p95 time to first token, inter-token latency or queue time above its threshold."""

from __future__ import annotations

from ...promql import number
from ...vocabulary import Vocabulary
from ..declaration import DEAD_SERVER, LOAD_SYMPTOMS, PER_REPLICA, Declared
from ..expressions import check_bucket_bound, human_seconds, traffic
from ..model import Alert
from ..runbook_kit import Section
from ..scenarios.latency import p95_cases

GROUP = "vllm-obs.latency"


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        _p95_declared(
            v,
            "VllmHighTimeToFirstToken",
            "time_to_first_token",
            "time to first token",
            ("ttft_p95_warning_seconds", "ttft_for"),
            panel="Time to first token",
            runbook=Section(
                meaning=(
                    "Users wait too long for the first token. The 95th percentile time to first token of "
                    "one replica and model has stayed above the threshold. Time to first token is queue time "
                    "plus prefill time, so the cause is almost always one of: requests queueing, long prompts, "
                    "or KV-cache pressure causing preemptions."
                ),
                confirm=[
                    "p95 per replica: `{ttft_p95}`",
                    "Is it queueing? `{queue_p95}` and `{waiting}`",
                    "Is it prefill? `{prefill_p95}` and the prompt-length panel of the *Instance and model* dashboard",
                    "Is the KV cache full? `{kv}` (see VllmKVCachePressure)",
                ],
                act=[
                    "Queue time dominates and the KV cache has room: the scheduler is the limit, raise "
                    "`--max-num-seqs` / `--max-num-batched-tokens` (see VllmSchedulerThrottled).",
                    "Queue time dominates and the KV cache is full: add replicas behind the load balancer, or "
                    "shed load; one server cannot go faster.",
                    "Prefill dominates: long prompts. The V1 engine always chunks prefills and caches prefixes; "
                    "its lever is the token budget per step, `--max-num-batched-tokens`: larger prefills sooner "
                    "(better TTFT, worse inter-token latency), smaller does the opposite. "
                    "`--long-prefill-token-threshold` keeps one long prompt from taking a whole step. (The V0 "
                    "engine needs `--enable-chunked-prefill` and `--enable-prefix-caching` for this.)",
                    "Shared prompts miss the prefix cache: check the prefix-cache hit rate panel; a prompt that "
                    "varies at its start (a timestamp, a request id) defeats it.",
                    "Kubernetes: `kubectl top pod` and the HPA's replica count; a new replica takes minutes to "
                    "load, so scale on `vllm:num_requests_waiting` before TTFT climbs.",
                ],
            ),
        ),
        _p95_declared(
            v,
            "VllmHighTimePerOutputToken",
            "inter_token_latency",
            "inter-token latency (time per output token)",
            ("itl_p95_warning_seconds", "itl_for"),
            panel="Inter-token latency",
            runbook=Section(
                meaning=(
                    "Tokens stream slowly: the 95th percentile time between two output tokens of one replica "
                    "and model has stayed above the threshold. Decode steps are slow because the batch is "
                    "large, requests are being preempted and recomputed, or the device is contended."
                ),
                confirm=[
                    "p95 per replica: `{itl_p95}`",
                    "Batch size: `{running}`; preemptions: `{preemptions}`",
                    "Tokens per engine step: the iteration-tokens panel of the *KV cache and scheduler* dashboard",
                ],
                act=[
                    "Lower `--max-num-batched-tokens` (prefill chunks then share each step with fewer decode "
                    "tokens' worth of work) or `--max-num-seqs`: both trade throughput for per-token latency.",
                    "An accidental `--enforce-eager` (or `enforce_eager` in a chart's values) turns CUDA graphs off "
                    "and slows every decode step: the start-up log then lacks the graph-capture lines. Batch sizes "
                    "above `--max-cudagraph-capture-size` run eagerly too.",
                    "If preemptions are high, treat the KV cache first (VllmKVCachePressure).",
                    "Check the accelerator: thermal throttling, another process on the device, a degraded link.",
                    "Add replicas if the load is simply more than one server can decode.",
                ],
            ),
        ),
        _p95_declared(
            v,
            "VllmHighQueueTime",
            "request_queue_time",
            "time waiting for a slot (queue time)",
            ("queue_time_p95_warning_seconds", "queue_time_for"),
            panel="Queue time",
            runbook=Section(
                meaning=(
                    "Requests wait for a slot before vLLM schedules them: the 95th percentile queue time of "
                    "one replica and model has stayed above the threshold. Every second of it is a second of "
                    "time to first token, whatever the prompt; unlike the queue's depth it does not depend "
                    "on how many slots the server has."
                ),
                confirm=[
                    "p95 per replica: `{queue_p95}`",
                    "Waiting against running: `{waiting}`, `{running}` (running at `--max-num-seqs` and the "
                    "KV cache with room: VllmSchedulerThrottled)",
                    "Is the KV cache full? `{kv}` (see VllmKVCachePressure)",
                ],
                act=[
                    "More capacity than one server has: add replicas behind the load balancer, or autoscale "
                    "on `vllm:num_requests_waiting`.",
                    "Slots free but the queue waits: raise `--max-num-seqs` / `--max-num-batched-tokens`.",
                    "KV cache full: the remedies of VllmKVCachePressure.",
                ],
            ),
        ),
    ]


def _p95_declared(
    v: Vocabulary, name: str, key: str, what: str, knobs: tuple[str, str], panel: str, runbook: Section
) -> Declared:
    """One replica's p95 of `key` above the alerts knob knobs[0] for knobs[1] (the SLO burns page)."""
    threshold, for_ = (f"alerts.{k}" for k in knobs)
    a = v.cfg.alerts
    return Declared(
        name=name,
        knobs=(threshold, for_, "alerts.min_requests"),
        build=lambda v: _p95_rules(v, key, name, what, getattr(a, knobs[0]), getattr(a, knobs[1]), threshold),
        needs=(key,),
        panel=panel,
        runbook=runbook,
        scenarios=p95_cases(key),
        # Queue time is load: a burn page of the model silences it (LOAD_SYMPTOMS).
        symptoms=(DEAD_SERVER, PER_REPLICA, *((LOAD_SYMPTOMS,) if key == "request_queue_time" else ())),
    )


def _p95_rules(
    v: Vocabulary, key: str, name: str, what: str, threshold: float, for_: str, setting: str
) -> list[Alert]:
    """One replica's p95 above the threshold: a warning that names it (the SLO burn pages)."""
    sc, n = v.scope, v.names
    check_bucket_bound(setting, v.res[key].buckets, threshold, v.res.source.origin)
    return [
        Alert(
            name=name,
            expr=f"{n.quantile(key, 'p95')} > {number(threshold)}\nand {sc.on_instance_model}\n{traffic(v)}",
            for_=for_,
            severity="warning",
            summary=f"vLLM p95 {what} is above {human_seconds(threshold)}.",
            description=(
                f"p95 {what} of {sc.where} is {{{{ $value | humanizeDuration }}}} "
                f"(threshold {human_seconds(threshold)}, for {for_})."
            ),
            dashboard="instance",
            threshold=threshold,
        )
    ]
