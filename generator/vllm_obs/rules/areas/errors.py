"""Errors: the share of one replica's requests that fail, by vLLM's count and by HTTP status."""

from __future__ import annotations

from ...promql import number
from ...vocabulary import Vocabulary
from ..declaration import DEAD_SERVER, PER_REPLICA, Declared
from ..expressions import floor_judged_from, floor_per_minute, percent, traffic
from ..model import Alert
from ..runbook_kit import Section
from ..scenario_kit import NEAR_SIDES, REPLICA, Case, Check, Expect, Inputs, boundary, minutes, series_text

GROUP = "vllm-obs.errors"


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        Declared(
            name="VllmRequestErrors",
            knobs=(
                "alerts.error_ratio_warning",
                "alerts.errors_for",
                "alerts.min_requests",
                "slo.inference_handlers",
            ),
            on=v.counts_failures,
            build=_request_errors,
            uses=("request_success", "http_requests"),
            panel="Error ratio",
            runbook=Section(
                meaning=(
                    "One replica fails requests: the larger of the share vLLM finished with "
                    '`finished_reason="error"` (vLLM 0.13+) plus those admission control refused, and the '
                    "share of 5xx answers of the inference handlers (`slo.inference_handlers`; client "
                    "mistakes are 4xx and never count, nor do `/health` or `/v1/models` polls). The two "
                    "overlap (a failed non-streaming request is both), so the larger is the count; the "
                    "canary's own requests are left out. A warning that names the replica: the "
                    "availability SLO pages when users feel it."
                ),
                confirm=[
                    "Failure ratio: `{failures}`; vLLM's own count `{errors}`; HTTP 5xx `{http_errors}`",
                    "Log: `Error in chat completion stream generator.` / `Error in completion stream generator.` "
                    "with a traceback; an `EngineDeadError` at its end means the engine died (VllmEngineDead)",
                ],
                act=[
                    "If the engine died or ran out of memory, follow VllmEngineDead / VllmOutOfMemory.",
                    "Otherwise read the traceback of the first error: a bad request, a tokenizer or chat "
                    "template problem, or a bug fixed in a newer vLLM release.",
                ],
            ),
            scenarios=_errors,
            symptoms=(DEAD_SERVER, PER_REPLICA),
        ),
    ]


def warnings(v: Vocabulary) -> list[str]:
    if "request_success" in v.res.signals and not v.res.reports_engine_errors:
        return [
            f'{v.res.source.origin} has no finished_reason="error" (vLLM 0.13+): failed requests '
            "are counted from HTTP 5xx and the canary only; skipped the engine error-ratio panels."
        ]
    return []


def _request_errors(v: Vocabulary) -> list[Alert]:
    a, sc, n = v.cfg.alerts, v.scope, v.names
    threshold = a.error_ratio_warning
    return [
        Alert(
            name="VllmRequestErrors",
            expr=(
                f"{n.request_failures} > {number(threshold)}\n"
                f"and {sc.on_instance_model}\n{traffic(v, n.requests_served)}"
            ),
            for_=a.errors_for,
            severity="warning",
            summary=f"More than {percent(threshold)} of one vLLM replica's requests fail.",
            description=(
                f"{{{{ $value | humanizePercentage }}}} of the requests of {sc.where} failed "
                f"(vLLM's errors or HTTP 5xx, the larger; threshold {percent(threshold)}, for {a.errors_for})."
            ),
            dashboard="instance",
            threshold=threshold,
        )
    ]


# -- promtool scenarios --------------------------------------------------------------------


def _errors(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    a = io.cfg.alerts
    limit = rule.threshold
    assert limit is not None
    span = minutes(rule.for_) + 5
    per_min = max(1000.0, floor_per_minute(io.v) * 2)
    cases = []
    for title, ratio in (("just above", limit * 1.1), ("just below", limit * 0.9)):
        failed = round(per_min * ratio, 6)
        case = Case(f"{rule.name}: failures {title} the threshold ({ratio:g})")
        how = io.outcomes(case, span, per_min - failed, failed)
        if ratio > limit:
            case.checks = boundary(rule.name, 1, a.errors_for, [Expect(rule, io.result(), failed / per_min)])
        else:
            case.checks = [Check(span - 1, rule.name, [])]
        case.name += f", told by {how}"
        cases.append(case)
    if io.res.reports_engine_errors and "http_requests" in io.res.signals:
        # Both sources see the same failures: the larger counts, never their sum.
        both = Case(f"{rule.name}: the same failures in vLLM's count and in HTTP 5xx count once")
        failed = round(per_min * limit * 0.9, 6)
        io.outcomes(both, span, per_min - failed, failed)
        io.http(both, span, {"2xx": per_min - failed, "5xx": failed})
        both.checks = [Check(span - 1, rule.name, [])]
        cases.append(both)
        # HTTP alone: a 5xx the engine never saw (an engine that died before answering).
        http_only = Case(f"{rule.name} fires on HTTP 5xx of the inference handlers vLLM did not count")
        failed = round(per_min * limit * 1.1, 6)
        io.outcomes(http_only, span, per_min, 0)
        io.http(http_only, span, {"2xx": per_min - failed, "5xx": failed})
        http_only.checks = boundary(rule.name, 1, a.errors_for, [Expect(rule, io.result(), failed / per_min)])
        cases.append(http_only)
        # Load-balancer polls answered 5xx are not requests.
        polls = Case(f"{rule.name} stays silent when only /health answers 5xx")
        io.outcomes(polls, span, per_min, 0)
        http = io.res["http_requests"]
        base = {**io.base, **io.at_target(REPLICA), "handler": "/health", "method": "GET"}
        polls.add(series_text(http.name, {**base, "status": "5xx"}), f"0+{number(per_min)}x{span}")
        polls.checks = [Check(span - 1, rule.name, [])]
        cases.append(polls)
    # The traffic floor from both sides, every request failing: a replica too idle to judge stays silent.
    for side, scale in NEAR_SIDES:
        rate = floor_per_minute(io.v) * scale
        near = Case(f"{rule.name}: every request failing, traffic {side} alerts.min_requests")
        io.outcomes(near, span + 5, 0, rate)
        near.checks = (
            boundary(rule.name, floor_judged_from(io.v), a.errors_for, [Expect(rule, io.result(), 1.0)])
            if scale > 1
            else [Check(span + 4, rule.name, [])]
        )
        cases.append(near)
    return cases
