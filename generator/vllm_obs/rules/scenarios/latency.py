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
    def build(rules: list[Alert], inputs: Inputs) -> list[Case]:
        (rule,) = rules
        sig = inputs.res[key]
        threshold = rule.threshold
        assert threshold is not None
        span = minutes(rule.for_) + 10
        per_min = max(60.0, floor_per_minute(inputs.v) * 2)
        cases = []
        hot = fire_bucket(sig.buckets, threshold)
        if hot is not None:
            value = p95_in_bucket(sig.buckets, hot)
            case = Case(
                f"{rule.name}: p95 {value:g}s > {threshold:g}s fires after {rule.for_}, for that replica"
            )
            inputs.histogram(case, sig, hot, per_min, span)
            inputs.histogram(case, sig, 0, per_min, span, instance=NEIGHBOUR)
            inputs.traffic(case, per_min, span)
            inputs.traffic(case, per_min, span, instance=NEIGHBOUR)
            case.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, inputs.result(), value)])
            cases.append(case)
        near = _just_over(rule, inputs, sig, per_min, span)
        if near is not None:
            cases.append(near)
        cool = silent_bucket(sig.buckets, threshold)
        if cool is not None:
            value = p95_in_bucket(sig.buckets, cool)
            case = Case(f"{rule.name} stays silent at p95 {value:g}s <= {threshold:g}s")
            inputs.histogram(case, sig, cool, per_min, span)
            inputs.traffic(case, per_min, span)
            case.checks = [Check(span - 1, rule.name, [])]
            cases.append(case)
        if hot is not None and inputs.cfg.prometheus.probes:
            # The canary probe's own requests are slow here, and numerous enough to pass the
            # traffic floor; they are not served traffic, so the replica stays unjudged.
            probe_only = Case(f"{rule.name} stays silent when the only traffic is the canary probe")
            canary = floor_per_minute(inputs.v) * 1.25
            inputs.histogram(probe_only, sig, hot, canary, span)
            inputs.traffic(probe_only, canary, span)
            inputs.probe(probe_only, span, per_min=canary)
            probe_only.checks = [Check(span - 1, rule.name, [])]
            cases.append(probe_only)
        if hot is not None:
            # The traffic floor from both sides: slow requests on a replica too idle to judge stay silent.
            value = p95_in_bucket(sig.buckets, hot)
            for side, scale in NEAR_SIDES:
                rate = floor_per_minute(inputs.v) * scale
                near = Case(f"{rule.name}: p95 {value:g}s, traffic {side} alerts.min_requests")
                inputs.histogram(near, sig, hot, rate, span)
                inputs.traffic(near, rate, span)
                judged = [Expect(rule, inputs.result(), value)] if scale > 1 else []
                near.checks = (
                    boundary(rule.name, floor_judged_from(inputs.v), rule.for_, judged)
                    if judged
                    else [Check(span - 1, rule.name, [])]
                )
                cases.append(near)
        return cases

    return build


def _just_over(rule: Alert, inputs: Inputs, sig: Signal, per_min: float, span: int) -> Case | None:
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
    inputs.spread_histogram(near, sig, {k: per_min * (1 - share), k + 1: per_min * share}, span)
    inputs.traffic(near, per_min, span)
    near.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, inputs.result(), value)])
    return near
