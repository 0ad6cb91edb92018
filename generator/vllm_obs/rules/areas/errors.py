"""Errors: the share of one replica's requests that fail, by vLLM's count and by HTTP status."""

from __future__ import annotations

from ...promql import number
from ...vocabulary import Vocabulary
from ..declaration import DEAD_SERVER, PER_REPLICA, Declared
from ..expressions import percent, traffic
from ..model import Alert
from ..runbook_kit import Section
from ..scenarios.errors import errors_cases

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
            scenarios=errors_cases,
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
