"""Overview: fleet health at a glance."""

from __future__ import annotations

from ..config import BundleConfig
from ..rules.names import Names, slo_miss
from ..signals import Resolution
from .common import CRIT, WARN, error_panel, keep, latency_panel
from .queries import Filters
from .spec import Dashboard, Panel, Query, Row


def overview(res: Resolution, cfg: BundleConfig) -> Dashboard:
    f = Filters(res, cfg)
    n = Names(cfg.alerts.rate_window)
    a = cfg.alerts
    fleet = [
        Panel(
            title="Targets up",
            description="vLLM API servers answering Prometheus' scrapes. A dead engine takes its server down.",
            unit="none",
            kind="stat",
            queries=(Query(f"sum(up{f.target})", "up"),),
            base_color=CRIT,
            thresholds=((1, "green"),),
            width=4,
            height=5,
        ),
        Panel(
            title="Targets down",
            description="vLLM API servers Prometheus cannot scrape (VllmTargetDown).",
            unit="none",
            kind="stat",
            queries=(Query(f"count(up{f.target} == 0) or vector(0)", "down"),),
            thresholds=((1, CRIT),),
            width=4,
            height=5,
        ),
        Panel(
            title="Requests / s",
            description="Finished requests per second, all models selected.",
            unit="reqps",
            kind="stat",
            queries=(Query(f"sum({n.fleet_requests_finished}{f.model})", "requests/s"),),
            width=4,
            height=5,
        ),
    ]
    if "generation_tokens" in res.signals:
        fleet.append(
            Panel(
                title="Generated tokens / s",
                description="Output tokens per second, all models selected.",
                unit="none",
                kind="stat",
                queries=(Query(f"sum({n.fleet_generation_tokens}{f.model})", "tokens/s"),),
                width=4,
                height=5,
            )
        )
    for key, label, objective in (
        ("time_to_first_token", "TTFT", cfg.slo.ttft_objective),
        ("inter_token_latency", "TPOT", cfg.slo.itl_objective),
    ):
        if key in res.signals:
            threshold = (
                cfg.slo.ttft_threshold_seconds
                if key == "time_to_first_token"
                else cfg.slo.itl_threshold_seconds
            )
            fleet.append(
                Panel(
                    title=f"{label} SLO attainment (1d)",
                    description=(
                        f"Share of {'requests' if label == 'TTFT' else 'output tokens'} within {threshold:g}s "
                        f"over the last day; the objective is {objective:.2%}."
                    ),
                    unit="percentunit",
                    kind="stat",
                    queries=(Query(f"1 - max({slo_miss(key, '1d')}{f.model})", "attainment"),),
                    base_color=CRIT,
                    thresholds=((objective, "green"),),
                    min=0,
                    max=1,
                    width=4,
                    height=5,
                )
            )
    latency = keep(
        latency_panel(
            res,
            cfg,
            "time_to_first_token",
            "Time to first token",
            "job_model",
            f.model,
            "{{model_name}}",
            a.ttft_p95_warning_seconds,
            a.ttft_p95_critical_seconds,
        ),
        latency_panel(
            res,
            cfg,
            "inter_token_latency",
            "Inter-token latency (time per output token)",
            "job_model",
            f.model,
            "{{model_name}}",
            a.itl_p95_warning_seconds,
            a.itl_p95_critical_seconds,
        ),
        latency_panel(
            res,
            cfg,
            "e2e_request_latency",
            "End-to-end request latency",
            "job_model",
            f.model,
            "{{model_name}}",
        ),
    )
    load = [
        Panel(
            title="Throughput",
            description="Prompt and generated tokens per second, per model.",
            unit="none",
            queries=tuple(
                Query(f"sum by (model_name) ({rule}{f.model})", f"{what} {{{{model_name}}}}")
                for key, rule, what in (
                    ("prompt_tokens", n.fleet_prompt_tokens, "prompt"),
                    ("generation_tokens", n.fleet_generation_tokens, "generated"),
                )
                if key in res.signals
            ),
            min=0,
        ),
    ]
    if res.has("requests_waiting", "requests_running"):
        load.append(
            Panel(
                title="Requests running and waiting",
                description=f"Per replica. Dashed line: the queue alert threshold ({a.queue_waiting_threshold:g}).",
                unit="none",
                queries=(
                    Query(f"{n.requests_running}{f.replica}", "running {{instance}} {{model_name}}"),
                    Query(f"{n.requests_waiting}{f.replica}", "waiting {{instance}} {{model_name}}"),
                ),
                thresholds=((a.queue_waiting_threshold, WARN),),
                min=0,
            )
        )
    if "kv_cache_usage" in res.signals:
        load.append(
            Panel(
                title="KV-cache usage",
                description="The fullest engine of each replica (max, never a sum). Dashed: the alert threshold.",
                unit="percentunit",
                queries=(Query(f"{n.kv_cache_usage}{f.replica}", "{{instance}} {{model_name}}"),),
                thresholds=((a.kv_usage_threshold, CRIT),),
                min=0,
                max=1,
            )
        )
    if "preemptions" in res.signals:
        load.append(
            Panel(
                title="Preemptions per finished request",
                description="Requests preempted for lack of KV cache, per finished request. Dashed: the alert threshold.",
                unit="none",
                queries=(Query(f"{n.preemptions_per_request}{f.replica}", "{{instance}} {{model_name}}"),),
                thresholds=((a.preemptions_per_request, WARN),),
                min=0,
            )
        )
    load += keep(error_panel(res, cfg, f.replica, f.target))
    return Dashboard(
        key="overview",
        title="Overview",
        description="Fleet health: targets, traffic, latency percentiles, queue, KV cache, preemptions, errors, SLOs.",
        rows=(
            Row("Fleet", tuple(fleet)),
            Row("Latency", latency),
            Row("Load and saturation", tuple(load)),
        ),
        variables=f.variables(engine=False),
    )
