"""Instance and model: one replica's latency breakdown, traffic, workload, process and configuration."""

from __future__ import annotations

from ..config import BundleConfig
from ..signals import Resolution
from ..vocabulary import DASHBOARDS, Vocabulary
from .panels.common import LEGEND, error_panel, heatmap, keep, latency_panel, replica_percentiles
from .panels.features import lora_panels, mfu_panels, spec_decode_panels
from .panels.gpu import gpu_panels
from .panels.process import configuration_panels, process_panels
from .panels.queries import Filters
from .spec import Dashboard, Panel, Query, Row


def instance(v: Vocabulary) -> Dashboard:
    res, cfg = v.res, v.cfg
    # One replica at a time (no All): what this dashboard is for, and what keeps it cheap on a
    # fleet; the Overview and KV cache dashboards find the replica to open.
    f = Filters(v, one_replica=True)
    return Dashboard(
        key="instance",
        title=DASHBOARDS["instance"],
        description=(
            "One replica and model: latency percentiles, distributions and phases, traffic and errors, "
            "request lengths, speculative decoding and LoRA adapters where on, its GPUs, the API server "
            "process and the KV-cache configuration."
        ),
        rows=(
            Row("Latency", _latency(res, cfg, f)),
            Row("Traffic and errors", _traffic(res, cfg, f)),
            Row("Workload", _workload(res, cfg, f)),
            Row("Speculative decoding", spec_decode_panels(res, cfg, f)),
            Row("LoRA adapters", lora_panels(res, cfg, f)),
            Row("GPUs", gpu_panels(res, cfg, f)),
            Row("API server process", process_panels(res, f)),
            Row("Configuration", configuration_panels(res, f)),
            Row("Model FLOPs and memory traffic (--enable-mfu-metrics)", mfu_panels(res, f)),
        ),
        variables=f.variables(),
        annotations=(f.alert_annotation(),),
    )


def _latency(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    a = cfg.alerts
    out: list[Panel | None] = []
    for key, title, what, warn, crit in (
        (
            "time_to_first_token",
            "Time to first token",
            "times to first token",
            a.ttft_p95_warning_seconds,
            None,
        ),
        (
            "inter_token_latency",
            "Inter-token latency",
            "gaps between output tokens",
            a.itl_p95_warning_seconds,
            None,
        ),
        ("e2e_request_latency", "End-to-end latency", "request durations", None, None),
    ):
        if key in res.signals:
            out.append(latency_panel(f, key, title, LEGEND, warn, crit))
            out.append(heatmap(f, res[key], f"{title} distribution", what, "s"))
    phases = [
        (key, what)
        for key, what in (
            ("request_queue_time", "queue"),
            ("request_prefill_time", "prefill"),
            ("request_decode_time", "decode"),
        )
        if key in res.signals
    ]
    if phases:
        out.append(
            Panel(
                title="Where the time goes (p95)",
                description=(
                    "Queue, prefill and decode time, p95 over the panel's rate interval: queue means capacity, "
                    "prefill means long prompts."
                ),
                unit="s",
                queries=tuple(
                    Query(f.quantile(res[k], 0.95, f.per_replica_model), f"{w} {LEGEND}") for k, w in phases
                ),
                min=0,
            )
        )
        out.append(
            Panel(
                title="Mean time per request phase",
                description=(
                    "Mean queue, prefill and decode time per request over the panel's rate interval, stacked: "
                    "their sum is the mean time a request spends in the engine."
                ),
                unit="s",
                queries=tuple(Query(f.mean(res[k], f.per_replica_model), f"{w} {LEGEND}") for k, w in phases),
                stack=True,
                min=0,
            )
        )
    if "request_queue_time" in res.signals:
        out.append(
            latency_panel(
                f,
                "request_queue_time",
                "Queue time",
                LEGEND,
                warn=a.queue_time_p95_warning_seconds,
            )
        )
    if "request_render_time" in res.signals:
        # The API server's renderer (vLLM 0.34+): no engine label, registered by the first request.
        sig = res["request_render_time"]
        group = f"{f.per_replica_model}, request_type"
        out.append(
            Panel(
                title="Render time",
                description=(
                    "Time the API server spends turning a request into engine input (chat template, "
                    "tokenization, multimodal preprocessing), p50 and p95 by request type, before the "
                    "request reaches the engine. vLLM registers the series with the first request."
                ),
                unit="s",
                queries=tuple(
                    Query(f.quantile(sig, q, group), f"{name} {{{{request_type}}}} {LEGEND}")
                    for q, name in ((0.5, "p50"), (0.95, "p95"))
                ),
                min=0,
            )
        )
    if "request_time_per_output_token" in res.signals:
        sig = res["request_time_per_output_token"]
        out.append(
            replica_percentiles(
                f,
                sig,
                "Time per output token, per request",
                f"Each request's mean gap between output tokens, from {sig.name}: what one user perceives.",
                "s",
            )
        )
    return keep(*out)


def _traffic(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    n = f.names
    out: list[Panel] = []
    if "request_success" in res.signals:
        sig = res["request_success"]
        out += [
            Panel(
                title="Finished requests by reason",
                description="stop and length are normal endings; abort is a client that went away; error failed.",
                unit="reqps",
                queries=(
                    Query(
                        f.rate(sig, f"{f.per_replica}, finished_reason"), "{{finished_reason}} {{instance}}"
                    ),
                ),
                stack=True,
                min=0,
            ),
            Panel(
                title="Finish reason share",
                description=(
                    "Share of finished requests by reason: a rising length share is truncation (max_tokens "
                    "too low), a rising abort share is clients giving up, error is the engine failing."
                ),
                unit="percentunit",
                queries=(
                    Query(
                        f"{f.rate(sig, f'{f.per_replica}, finished_reason')}\n/ ignoring (finished_reason) "
                        f"group_left ()\n({f.rate(sig, f.per_replica)} > 0)",
                        "{{finished_reason}} {{instance}}",
                    ),
                ),
                stack=True,
                min=0,
                max=1,
            ),
        ]
    if "http_requests" in res.signals:
        sig = res["http_requests"]
        out += [
            Panel(
                title="HTTP responses by status",
                description="API responses per second by status class; 4xx are client mistakes, 5xx server failures.",
                unit="reqps",
                queries=(Query(f.rate(sig, f"{f.per_replica}, status"), "{{status}} {{instance}}"),),
                stack=True,
                min=0,
            ),
            Panel(
                title="HTTP requests by endpoint",
                description="API requests per second by route (completions, chat, embeddings, health, metrics).",
                unit="reqps",
                queries=(Query(f.rate(sig, f"{f.per_replica}, handler"), "{{handler}} {{instance}}"),),
                stack=True,
                min=0,
            ),
        ]
    tokens = [
        Query(f"{rule}{f.replica}", f"{what} {LEGEND}")
        for key, rule, what in (
            ("prompt_tokens", n.prompt_tokens, "prompt"),
            ("generation_tokens", n.generation_tokens, "generated"),
        )
        if key in res.signals
    ]
    if tokens:
        out.append(
            Panel(
                title="Tokens / s",
                description="Prompt and generated tokens per second.",
                unit="none",
                queries=tuple(tokens),
                min=0,
            )
        )
    out += keep(error_panel(f, f.replica, f.recorded_target))
    return tuple(out)


def _workload(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    out: list[Panel] = []
    for key, title, what in (
        ("request_prompt_tokens", "Prompt length", "prompt lengths"),
        ("request_generation_tokens", "Output length", "output lengths"),
    ):
        if key not in res.signals:
            continue
        sig = res[key]
        out.append(
            replica_percentiles(
                f,
                sig,
                title,
                f"Tokens per request, from {sig.name}'s buckets (approximate within a bucket):",
                "none",
                width=12,
            )
        )
        out.append(heatmap(f, sig, f"{title} distribution", what, "none"))
    lengths = [
        Query(f.mean(res[key], f.per_model), f"{what} {LEGEND}")
        for key, what in (("request_prompt_tokens", "prompt"), ("request_generation_tokens", "generated"))
        if key in res.signals
    ]
    if lengths:
        out.append(
            Panel(
                title="Mean request length",
                description="Mean prompt and generation length in tokens; long prompts raise time to first token.",
                unit="none",
                queries=tuple(lengths),
                min=0,
            )
        )
    return tuple(out)
