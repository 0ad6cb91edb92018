"""KV cache and scheduler: memory pressure against the queue."""

from __future__ import annotations

from ..config import BundleConfig
from ..rules.names import Names
from ..signals import Resolution
from .common import CRIT, WARN
from .queries import RATE, Filters
from .spec import Dashboard, Panel, Query, Row

LEGEND = "{{instance}} {{model_name}}"


def kv_cache(res: Resolution, cfg: BundleConfig) -> Dashboard:
    f = Filters(res, cfg)
    n = Names(cfg.alerts.rate_window)
    a = cfg.alerts
    memory: list[Panel] = []
    if "kv_cache_usage" in res.signals:
        sig = res["kv_cache_usage"]
        per_engine = " engine {{engine}}" if sig.has_label("engine") else ""
        memory.append(
            Panel(
                title="KV-cache usage per engine",
                description=f"{sig.name}, a fraction from 0 to 1. Dashed: the VllmKVCachePressure threshold.",
                unit="percentunit",
                queries=(Query(f"{sig.name}{f.raw(sig)}", f"{LEGEND}{per_engine}"),),
                thresholds=((a.kv_usage_threshold, CRIT),),
                min=0,
                max=1,
            )
        )
    if "preemptions" in res.signals:
        sig = res["preemptions"]
        memory.append(
            Panel(
                title="Preemptions / s",
                description="Running requests evicted for lack of KV-cache blocks and recomputed later.",
                unit="none",
                queries=(
                    Query(
                        f"sum by ({f.per_replica}, model_name) (rate({sig.name}{f.raw(sig)}[{RATE}]))", LEGEND
                    ),
                ),
                min=0,
            )
        )
    if res.has("prefix_cache_hits", "prefix_cache_queries"):
        memory.append(
            Panel(
                title="Prefix-cache hit rate",
                description="Share of prompt tokens served from the prefix cache instead of recomputed.",
                unit="percentunit",
                queries=(Query(f"{n.prefix_cache_hits}{f.replica}", LEGEND),),
                min=0,
                max=1,
            )
        )
    elif "prefix_cache_hit_rate" in res.signals:
        sig = res["prefix_cache_hit_rate"]
        memory.append(
            Panel(
                title="Prefix-cache hit rate",
                description=f"{sig.name}, as the V0 engine reports it.",
                unit="percentunit",
                queries=(Query(f"{sig.name}{f.raw(sig)}", LEGEND),),
                min=0,
                max=1,
            )
        )
    scheduler: list[Panel] = []
    if res.has("requests_waiting", "requests_running"):
        scheduler.append(
            Panel(
                title="Waiting vs running",
                description=(
                    "A growing queue with KV cache to spare means the scheduler limits (--max-num-seqs, "
                    "--max-num-batched-tokens) are the bottleneck (VllmSchedulerThrottled)."
                ),
                unit="none",
                queries=(
                    Query(f"{n.requests_waiting}{f.replica}", f"waiting {LEGEND}"),
                    Query(f"{n.requests_running}{f.replica}", f"running {LEGEND}"),
                ),
                thresholds=((a.queue_waiting_threshold, WARN),),
                min=0,
            )
        )
    if "requests_waiting_by_reason" in res.signals:
        sig = res["requests_waiting_by_reason"]
        scheduler.append(
            Panel(
                title="Waiting by reason",
                description="capacity: no room to schedule; deferred: held back on purpose (vLLM 0.20+).",
                unit="none",
                queries=(
                    Query(
                        f"sum by ({f.per_replica}, reason) ({sig.name}{f.raw(sig)})",
                        "{{reason}} {{instance}}",
                    ),
                ),
                stack=True,
                min=0,
            )
        )
    if "iteration_tokens" in res.signals:
        sig = res["iteration_tokens"]
        scheduler.append(
            Panel(
                title="Tokens per engine step",
                description="Mean batch size in tokens per engine iteration (prefill and decode together).",
                unit="none",
                queries=(Query(f.mean(sig), "{{instance}}"),),
                min=0,
            )
        )
    if "requests_swapped" in res.signals:
        sig = res["requests_swapped"]
        scheduler.append(
            Panel(
                title="Requests swapped to CPU",
                description="V0 engine: requests whose KV cache was swapped out to host memory.",
                unit="none",
                queries=(Query(f"sum by ({f.per_replica}) ({sig.name}{f.raw(sig)})", "{{instance}}"),),
                min=0,
            )
        )
    return Dashboard(
        key="kv_cache",
        title="KV cache and scheduler",
        description="KV-cache usage against the queue and the batch: is memory or the scheduler the limit?",
        rows=(Row("KV cache", tuple(memory)), Row("Scheduler", tuple(scheduler))),
        variables=f.variables(),
    )
