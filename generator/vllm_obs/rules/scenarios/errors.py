"""promtool cases of the error ratio: either side of the threshold, vLLM's count against HTTP 5xx
(counted once, polls left out), and the traffic floor."""

from __future__ import annotations

from ...promql import number
from ..expressions import floor_judged_from, floor_per_minute
from ..model import Alert
from ..scenario_kit import NEAR_SIDES, REPLICA, Case, Check, Expect, Inputs, boundary, minutes, series_text


def errors_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    a = inputs.cfg.alerts
    limit = rule.threshold
    assert limit is not None
    span = minutes(rule.for_) + 5
    per_min = max(1000.0, floor_per_minute(inputs.v) * 2)
    cases = []
    for title, ratio in (("just above", limit * 1.1), ("just below", limit * 0.9)):
        failed = round(per_min * ratio, 6)
        case = Case(f"{rule.name}: failures {title} the threshold ({ratio:g})")
        how = inputs.outcomes(case, span, per_min - failed, failed)
        if ratio > limit:
            case.checks = boundary(
                rule.name, 1, a.errors_for, [Expect(rule, inputs.result(), failed / per_min)]
            )
        else:
            case.checks = [Check(span - 1, rule.name, [])]
        case.name += f", told by {how}"
        cases.append(case)
    if inputs.res.reports_engine_errors and "http_requests" in inputs.res.signals:
        # Both sources see the same failures: the larger counts, never their sum.
        both = Case(f"{rule.name}: the same failures in vLLM's count and in HTTP 5xx count once")
        failed = round(per_min * limit * 0.9, 6)
        inputs.outcomes(both, span, per_min - failed, failed)
        inputs.http(both, span, {"2xx": per_min - failed, "5xx": failed})
        both.checks = [Check(span - 1, rule.name, [])]
        cases.append(both)
        # HTTP alone: a 5xx the engine never saw (an engine that died before answering).
        http_only = Case(f"{rule.name} fires on HTTP 5xx of the inference handlers vLLM did not count")
        failed = round(per_min * limit * 1.1, 6)
        inputs.outcomes(http_only, span, per_min, 0)
        inputs.http(http_only, span, {"2xx": per_min - failed, "5xx": failed})
        http_only.checks = boundary(
            rule.name, 1, a.errors_for, [Expect(rule, inputs.result(), failed / per_min)]
        )
        cases.append(http_only)
        # Load-balancer polls answered 5xx are not requests.
        polls = Case(f"{rule.name} stays silent when only /health answers 5xx")
        inputs.outcomes(polls, span, per_min, 0)
        http = inputs.res["http_requests"]
        base = {**inputs.base, **inputs.at_target(REPLICA), "handler": "/health", "method": "GET"}
        polls.add(series_text(http.name, {**base, "status": "5xx"}), f"0+{number(per_min)}x{span}")
        polls.checks = [Check(span - 1, rule.name, [])]
        cases.append(polls)
    # The traffic floor from both sides, every request failing: a replica too idle to judge stays silent.
    for side, scale in NEAR_SIDES:
        rate = floor_per_minute(inputs.v) * scale
        near = Case(f"{rule.name}: every request failing, traffic {side} alerts.min_requests")
        inputs.outcomes(near, span + 5, 0, rate)
        near.checks = (
            boundary(
                rule.name, floor_judged_from(inputs.v), a.errors_for, [Expect(rule, inputs.result(), 1.0)]
            )
            if scale > 1
            else [Check(span + 4, rule.name, [])]
        )
        cases.append(near)
    return cases
