"""promtool cases of the p95 latency alerts: the threshold's buckets from both sides, the canary's
own requests, and the traffic floor."""

from __future__ import annotations

from ...signals import Signal
from ..expressions import floor_judged_from, floor_per_minute
from ..model import Alert
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


def p95_cases(key: str) -> Builder:
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
