"""Errors: the share of one replica's requests that fail, by vLLM's count and by HTTP status."""

from __future__ import annotations

from ...promql import number
from ...vocabulary import Vocabulary, by
from ..declaration import DEAD_SERVER, Declared
from ..expressions import percent, traffic
from ..model import Alert
from ..runbook_kit import Section
from ..scenario_kit import REPLICA, Case, Check, Expect, Inputs, boundary, minutes, series_text

GROUP = "vllm-obs.errors"


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        Declared(
            name="VllmRequestErrors",
            knobs=(
                "alerts.error_ratio_warning",
                "alerts.error_ratio_critical",
                "alerts.errors_for",
                "alerts.min_request_rate",
            ),
            build=_request_errors,
            uses=("request_success", "http_requests"),
            panel="Error ratio",
            runbook=Section(
                meaning=(
                    'Requests fail. `source="engine"`: the share of requests vLLM finished with '
                    '`finished_reason="error"` (vLLM 0.13+). `source="http"`: the share of API responses '
                    "with a 5xx status (client mistakes are 4xx and never count)."
                ),
                confirm=[
                    "Engine errors: `{errors}`; HTTP 5xx: `{http_errors}`",
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
            symptoms=(DEAD_SERVER,),
        ),
    ]


def warnings(v: Vocabulary) -> list[str]:
    if "request_success" in v.res.signals and not v.res.reports_engine_errors:
        return [
            f'{v.res.source.origin} has no finished_reason="error" (vLLM 0.13+); '
            'skipped VllmRequestErrors{source="engine"} and the engine error-ratio panels.'
        ]
    return []


def _request_errors(v: Vocabulary) -> list[Alert]:
    a, sc, n, res = v.cfg.alerts, v.scope, v.names, v.res
    out = []
    for severity, threshold in (("warning", a.error_ratio_warning), ("critical", a.error_ratio_critical)):
        if res.reports_engine_errors:
            out.append(
                Alert(
                    name="VllmRequestErrors",
                    expr=f"{n.request_errors} > {number(threshold)}\nand {sc.on_instance_model}\n{traffic(v)}",
                    for_=a.errors_for,
                    severity=severity,
                    labels={"source": "engine"},
                    summary=f"More than {percent(threshold)} of vLLM requests fail.",
                    description=(
                        f"{{{{ $value | humanizePercentage }}}} of the requests of {sc.where} "
                        f'finished with finished_reason="error" (threshold {percent(threshold)}, for {a.errors_for}).'
                    ),
                    dashboard="instance",
                )
            )
        if "http_requests" in res.signals:
            out.append(
                Alert(
                    name="VllmRequestErrors",
                    expr=(
                        f"{n.http_errors} > {number(threshold)}\n"
                        f"and on ({by(sc.instance)})\n{n.http_requests} > {number(a.min_request_rate)}"
                    ),
                    for_=a.errors_for,
                    severity=severity,
                    labels={"source": "http"},
                    summary=f"More than {percent(threshold)} of vLLM requests fail.",
                    description=(
                        f"{{{{ $value | humanizePercentage }}}} of the HTTP requests to {sc.target_ref} "
                        f"answered 5xx (threshold {percent(threshold)}, for {a.errors_for})."
                    ),
                    dashboard="instance",
                )
            )
    return out


# -- promtool scenarios --------------------------------------------------------------------


def _errors(rules: list[Alert], io: Inputs) -> list[Case]:
    by_source: dict[str, list[Alert]] = {}
    for r in rules:
        by_source.setdefault(r.labels["source"], []).append(r)
    a = io.cfg.alerts
    span = minutes(a.errors_for) + 5
    name = rules[0].name
    cases = []
    for source, tier in by_source.items():
        limits = {"warning": a.error_ratio_warning, "critical": a.error_ratio_critical}
        scenarios = [(f"{source} errors just above the warning ratio", limits["warning"] * 1.1)]
        scenarios.append(
            (f"{source} errors just above the critical ratio", min(1.0, limits["critical"] * 1.1))
        )
        scenarios.append((f"{source} errors just below the warning ratio", limits["warning"] * 0.9))
        for title, ratio in scenarios:
            failed = round(1000 * ratio, 6)
            case = Case(f"{name}: {title} ({ratio:g})")
            firing = [r for r in tier if ratio > limits[r.severity]]
            if source == "engine":
                io.traffic(case, 1000, span, stop=1000 - failed, error=failed)
                labels = io.result()
            else:
                http = io.res["http_requests"]
                base = {**io.base, **io.at_target(REPLICA), "handler": "/v1/completions", "method": "POST"}
                case.add(
                    series_text(http.name, {**base, "status": "2xx"}), f"0+{number(1000 - failed)}x{span}"
                )
                case.add(series_text(http.name, {**base, "status": "5xx"}), f"0+{number(failed)}x{span}")
                labels = {"job": io.cfg.prometheus.vllm_job, **io.at_target(REPLICA)}
            value = failed / 1000
            if firing:
                case.checks = boundary(name, 1, a.errors_for, [Expect(r, labels, value) for r in firing])
            else:
                case.checks = [Check(span - 1, name, [])]
            cases.append(case)
    return cases
