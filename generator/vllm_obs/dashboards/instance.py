"""Instance and model: one replica's latency breakdown, traffic and errors."""

from __future__ import annotations

from ..config import BundleConfig
from ..rules.names import Names
from ..signals import Resolution
from .common import error_panel, keep, latency_panel
from .queries import RATE, Filters
from .spec import Dashboard, Panel, Query, Row

LEGEND = "{{instance}} {{model_name}}"


def instance(res: Resolution, cfg: BundleConfig) -> Dashboard:
    f = Filters(res, cfg)
    n = Names(cfg.alerts.rate_window)
    a = cfg.alerts
    latency = keep(
        latency_panel(
            res,
            cfg,
            "time_to_first_token",
            "Time to first token",
            "job_instance_model",
            f.replica,
            LEGEND,
            a.ttft_p95_warning_seconds,
            a.ttft_p95_critical_seconds,
        ),
        latency_panel(
            res,
            cfg,
            "inter_token_latency",
            "Inter-token latency",
            "job_instance_model",
            f.replica,
            LEGEND,
            a.itl_p95_warning_seconds,
            a.itl_p95_critical_seconds,
        ),
        latency_panel(
            res, cfg, "e2e_request_latency", "End-to-end latency", "job_instance_model", f.replica, LEGEND
        ),
    )
    phases = [
        Query(f"{n.quantile(key, 'p95')}{f.replica}", f"{what} {LEGEND}")
        for key, what in (
            ("request_queue_time", "queue"),
            ("request_prefill_time", "prefill"),
            ("request_decode_time", "decode"),
        )
        if key in res.signals
    ]
    if phases:
        latency += (
            Panel(
                title="Where the time goes (p95)",
                description="Queue, prefill and decode time: queue means capacity, prefill means long prompts.",
                unit="s",
                queries=tuple(phases),
                min=0,
            ),
        )
    traffic: list[Panel] = []
    if "request_success" in res.signals:
        sig = res["request_success"]
        traffic.append(
            Panel(
                title="Finished requests by reason",
                description="stop and length are normal endings; abort is a client that went away; error failed.",
                unit="reqps",
                queries=(
                    Query(
                        f"sum by ({f.per_replica}, finished_reason) (rate({sig.name}{f.raw(sig)}[{RATE}]))",
                        "{{finished_reason}} {{instance}}",
                    ),
                ),
                stack=True,
                min=0,
            )
        )
    if "http_requests" in res.signals:
        sig = res["http_requests"]
        traffic.append(
            Panel(
                title="HTTP responses by status",
                description="API responses per second by status class; 4xx are client mistakes, 5xx server failures.",
                unit="reqps",
                queries=(
                    Query(
                        f"sum by ({f.per_replica}, status) (rate({sig.name}{f.target}[{RATE}]))",
                        "{{status}} {{instance}}",
                    ),
                ),
                stack=True,
                min=0,
            )
        )
    tokens = [
        Query(f"{rule}{f.replica}", f"{what} {LEGEND}")
        for key, rule, what in (
            ("prompt_tokens", n.prompt_tokens, "prompt"),
            ("generation_tokens", n.generation_tokens, "generated"),
        )
        if key in res.signals
    ]
    if tokens:
        traffic.append(
            Panel(
                title="Tokens / s",
                description="Prompt and generated tokens per second.",
                unit="none",
                queries=tuple(tokens),
                min=0,
            )
        )
    lengths = []
    for key, what in (("request_prompt_tokens", "prompt"), ("request_generation_tokens", "generated")):
        if key in res.signals:
            sig = res[key]
            lengths.append(Query(f.mean(sig), f"{what} {{{{instance}}}}"))
    if lengths:
        traffic.append(
            Panel(
                title="Mean request length",
                description="Mean prompt and generation length in tokens; long prompts raise time to first token.",
                unit="none",
                queries=tuple(lengths),
                min=0,
            )
        )
    traffic += keep(error_panel(res, cfg, f.replica, f.target))
    return Dashboard(
        key="instance",
        title="Instance and model",
        description="One replica and model: latency percentiles and their phases, traffic, lengths, errors.",
        rows=(Row("Latency", latency), Row("Traffic and errors", tuple(traffic))),
        variables=f.variables(),
    )
