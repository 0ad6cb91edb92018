"""Latency: one replica's p95 time to first token, inter-token latency or queue time above its threshold."""

from __future__ import annotations

from ...promql import number
from ...signals import Signal
from ...vocabulary import Vocabulary
from ..declaration import DEAD_SERVER, PER_REPLICA, Declared
from ..expressions import check_bucket_bound, floor_judged_from, floor_per_minute, human_seconds, traffic
from ..model import Alert
from ..runbook_kit import Section
from ..scenario_kit import (
    NEAR_SIDES,
    NEIGHBOUR,
    Builder,
    Case,
    Check,
    Expect,
    Inputs,
    boundary,
    fire_bucket,
    minutes,
    p95_in_bucket,
    silent_bucket,
)

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
        scenarios=_p95_cases(key),
        symptoms=(DEAD_SERVER, PER_REPLICA),
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


def _p95_cases(key: str) -> Builder:
    def build(rules: list[Alert], io: Inputs) -> list[Case]:
        (rule,) = rules
        sig = io.res[key]
        threshold = rule.threshold
        assert threshold is not None
        span = minutes(rule.for_) + 10
        per_min = max(60.0, floor_per_minute(io.v) * 2)
        cases = []
        hot = fire_bucket(sig.buckets, threshold)
        if hot is not None:
            value = p95_in_bucket(sig.buckets, hot)
            case = Case(
                f"{rule.name}: p95 {value:g}s > {threshold:g}s fires after {rule.for_}, for that replica"
            )
            io.histogram(case, sig, hot, per_min, span)
            io.histogram(case, sig, 0, per_min, span, instance=NEIGHBOUR)
            io.traffic(case, per_min, span)
            io.traffic(case, per_min, span, instance=NEIGHBOUR)
            case.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, io.result(), value)])
            cases.append(case)
        near = _just_over(rule, io, sig, per_min, span)
        if near is not None:
            cases.append(near)
        cool = silent_bucket(sig.buckets, threshold)
        if cool is not None:
            value = p95_in_bucket(sig.buckets, cool)
            case = Case(f"{rule.name} stays silent at p95 {value:g}s <= {threshold:g}s")
            io.histogram(case, sig, cool, per_min, span)
            io.traffic(case, per_min, span)
            case.checks = [Check(span - 1, rule.name, [])]
            cases.append(case)
        if hot is not None and io.cfg.prometheus.probes:
            # The canary probe's own requests are slow here, and numerous enough to pass the
            # traffic floor; they are not served traffic, so the replica stays unjudged.
            probe_only = Case(f"{rule.name} stays silent when the only traffic is the canary probe")
            canary = floor_per_minute(io.v) * 1.25
            io.histogram(probe_only, sig, hot, canary, span)
            io.traffic(probe_only, canary, span)
            io.probe(probe_only, span, per_min=canary)
            probe_only.checks = [Check(span - 1, rule.name, [])]
            cases.append(probe_only)
        if hot is not None:
            # The traffic floor from both sides: slow requests on a replica too idle to judge stay silent.
            value = p95_in_bucket(sig.buckets, hot)
            for side, scale in NEAR_SIDES:
                rate = floor_per_minute(io.v) * scale
                near = Case(f"{rule.name}: p95 {value:g}s, traffic {side} alerts.min_requests")
                io.histogram(near, sig, hot, rate, span)
                io.traffic(near, rate, span)
                judged = [Expect(rule, io.result(), value)] if scale > 1 else []
                near.checks = (
                    boundary(rule.name, floor_judged_from(io.v), rule.for_, judged)
                    if judged
                    else [Check(span - 1, rule.name, [])]
                )
                cases.append(near)
        return cases

    return build


def _just_over(rule: Alert, io: Inputs, sig: Signal, per_min: float, span: int) -> Case | None:
    """Just over the threshold (a bucket bound): 6% of requests in the bucket above it, the rest
    at or under it. The p95 lands a sixth of the way into that bucket, under 1.5x the threshold
    where vLLM's bounds are that close; None where they are not, or no bucket is above."""
    threshold = rule.threshold
    if (
        threshold is None
        or threshold not in sig.buckets
        or sig.buckets.index(threshold) + 1 == len(sig.buckets)
    ):
        return None
    k = sig.buckets.index(threshold)
    over, share = sig.buckets[k + 1], 0.06
    value = threshold + (over - threshold) * ((0.95 - (1 - share)) / share)
    if value >= 1.5 * threshold * 0.95:
        return None
    near = Case(f"{rule.name}: {share:.0%} of requests over {threshold:g}s (p95 {value:.4g}s) fires")
    io.spread_histogram(near, sig, {k: per_min * (1 - share), k + 1: per_min * share}, span)
    io.traffic(near, per_min, span)
    near.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, io.result(), value)])
    return near
