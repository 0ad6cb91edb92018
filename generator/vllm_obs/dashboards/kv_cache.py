"""KV cache and scheduler: memory pressure against the queue, and each engine of a replica."""

from __future__ import annotations

from ..config import BundleConfig
from ..rules.expressions import queue_threshold
from ..signals import Resolution
from ..vocabulary import DASHBOARDS, Vocabulary
from .panels.common import (
    CRIT,
    FLEET_LINES,
    LEGEND,
    LOWEST_LINES,
    QUEUE_LINES,
    WARN,
    fleet_queries,
    keep,
    queue_queries,
    replica_percentiles,
)
from .panels.engines import engine_panels
from .panels.features import admission_panels, cache_panels, residency_panels
from .panels.kv_transfer import connector_failures, connector_panels, offload_panels
from .panels.queries import RATE, Filters
from .spec import Dashboard, Panel, Query, Row


def kv_cache(v: Vocabulary) -> Dashboard:
    res, cfg = v.res, v.cfg
    f = Filters(v, fleet=True)
    return Dashboard(
        key="kv_cache",
        title=DASHBOARDS["kv_cache"],
        description=(
            "KV-cache usage against the queue and the batch: is memory or the scheduler the limit? With "
            "data-parallel engines, is one engine out of line? Where do prompt tokens come from, and do the "
            "KV connectors (transfer, offloading) keep up?"
        ),
        rows=(
            Row("KV cache", _memory(res, cfg, f)),
            Row("Scheduler", _scheduler(res, cfg, f)),
            Row("Admission control", admission_panels(res, f)),
            Row("Engines (data parallel)", engine_panels(res, cfg, f)),
            Row("Prompt sources and caches", cache_panels(res, f)),
            Row(
                "KV connectors (transfer and offloading)",
                keep(connector_failures(res, f)) + connector_panels(res, f) + offload_panels(res, f),
            ),
            Row("KV-block residency (--kv-cache-metrics)", residency_panels(res, f)),
        ),
        variables=f.variables(),
        annotations=(f.alert_annotation(),),
    )


def _memory(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    n = f.names
    a = cfg.alerts
    out: list[Panel] = []
    if "kv_cache_usage" in res.signals:
        sig = res["kv_cache_usage"]
        per_engine = " engine {{engine}}" if sig.has_label("engine") else ""
        out.append(
            Panel(
                title="KV-cache usage per engine",
                description=(
                    f"{sig.name}, a fraction from 0 to 1. Dashed: the VllmKVCachePressure threshold; "
                    f"VllmKVCacheFillingUp warns when the trend reaches 1 soon. {FLEET_LINES}"
                ),
                unit="percentunit",
                queries=fleet_queries(f, f"{sig.name}{f.raw(sig)}", f"{LEGEND}{per_engine}"),
                thresholds=((a.kv_usage_threshold, CRIT),),
                min=0,
                max=1,
            )
        )
    if "preemptions" in res.signals:
        sig = res["preemptions"]
        out += [
            Panel(
                title="Preemptions / s",
                description=(
                    f"Running requests evicted for lack of KV-cache blocks and recomputed later. {FLEET_LINES}"
                ),
                unit="none",
                queries=fleet_queries(f, f"{n.preemptions}{f.replica}", LEGEND),
                min=0,
            ),
            Panel(
                title="Preemptions per finished request",
                description=(
                    "Preemptions normalised by traffic (VllmPreemptions). Dashed: the alert threshold. "
                    + FLEET_LINES
                ),
                unit="none",
                queries=fleet_queries(f, f"{n.preemptions_per_request}{f.replica}", LEGEND),
                thresholds=((a.preemptions_per_request, WARN),),
                min=0,
            ),
        ]
    if res.has("prefix_cache_hits", "prefix_cache_queries"):
        out.append(
            Panel(
                title="Prefix-cache hit rate",
                description=(
                    "Share of prompt tokens served from the prefix cache instead of recomputed. "
                    + LOWEST_LINES
                ),
                unit="percentunit",
                queries=fleet_queries(f, f"{n.prefix_cache_hits}{f.replica}", LEGEND, lowest=True),
                min=0,
                max=1,
            )
        )
    elif "prefix_cache_hit_rate" in res.signals:
        sig = res["prefix_cache_hit_rate"]
        out.append(
            Panel(
                title="Prefix-cache hit rate",
                description=f"{sig.name}, as the V0 engine reports it. {LOWEST_LINES}",
                unit="percentunit",
                queries=fleet_queries(f, f"{sig.name}{f.raw(sig)}", LEGEND, lowest=True),
                min=0,
                max=1,
            )
        )
    cached = f.family("vllm:prompt_tokens_cached_total")
    if cached is not None and "prompt_tokens" in res.signals:
        out.append(
            Panel(
                title="Prompt tokens that skipped prefill",
                description=(
                    "Share of prompt tokens whose KV came from a cache (local prefix cache or a KV connector) "
                    "rather than being computed: prefill work saved. Per model, every replica selected."
                ),
                unit="percentunit",
                queries=(Query(f.ratio(cached, res["prompt_tokens"], f.per_model), f.legend),),
                min=0,
                max=1,
            )
        )
    return tuple(out)


def _scheduler(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    a = cfg.alerts
    out: list[Panel] = []
    if res.has("requests_waiting", "requests_running"):
        out.append(
            Panel(
                title="Waiting vs running",
                description=(
                    "A growing queue with KV cache to spare means the scheduler limits (--max-num-seqs, "
                    "--max-num-batched-tokens) are the bottleneck (VllmSchedulerThrottled). Dashed: the "
                    f"VllmQueueDepthHigh threshold. {QUEUE_LINES}"
                ),
                unit="none",
                queries=queue_queries(f),
                thresholds=((queue_threshold(a)[0], WARN),),
                min=0,
            )
        )
    if "requests_waiting_by_reason" in res.signals:
        sig = res["requests_waiting_by_reason"]
        out.append(
            Panel(
                title="Waiting by reason",
                description=(
                    "capacity: no KV cache or batch room to schedule it; deferred: held back on purpose "
                    "(priorities, a KV transfer, structured-output compilation). vLLM 0.20+. Per model, "
                    "every replica selected."
                ),
                unit="none",
                queries=(
                    Query(
                        f"sum by ({f.per_model}, reason) ({sig.name}{f.raw(sig)})",
                        f"{{{{reason}}}} {f.legend}",
                    ),
                ),
                stack=True,
                min=0,
            )
        )
    if "iteration_tokens" in res.signals:
        sig = res["iteration_tokens"]
        out += [
            replica_percentiles(
                f,
                sig,
                "Tokens per engine step",
                "Batch size in tokens per engine iteration (prefill and decode together): a p99 pinned at "
                "--max-num-batched-tokens means steps are full.",
                "none",
                quantiles=("p50", "p99"),
                width=12,
            ),
            Panel(
                title="Engine steps / s",
                description=(
                    "Scheduler iterations per second: it drops to 0 when the engine stalls while requests "
                    f"wait. {LOWEST_LINES}"
                ),
                unit="none",
                queries=fleet_queries(
                    f,
                    f"sum by ({f.per_replica}) (rate({sig.name}_count{f.raw(sig)}[{RATE}]))",
                    "{{instance}}",
                    lowest=True,
                    per="",
                ),
                min=0,
            ),
        ]
    if "requests_swapped" in res.signals:
        sig = res["requests_swapped"]
        out.append(
            Panel(
                title="Requests swapped to CPU",
                description=f"V0 engine: requests whose KV cache was swapped out to host memory. {FLEET_LINES}",
                unit="none",
                queries=fleet_queries(
                    f, f"sum by ({f.per_replica}) ({sig.name}{f.raw(sig)})", "{{instance}}", per=""
                ),
                min=0,
            )
        )
    return tuple(out)
