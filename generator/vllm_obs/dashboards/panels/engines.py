"""Per engine (data-parallel rank) of each replica: is one engine out of line with its siblings?
With --data-parallel-size N a replica has N engines the load balancer should keep even; one far
from the others queues and preempts while the replica's totals look fine.
"""

from __future__ import annotations

from ...config import BundleConfig
from ...signals import Resolution
from ..spec import Panel, Query
from .common import FLEET_LINES, LEGEND, WARN, fleet_queries
from .queries import RATE, TOP, Filters

ENGINE = "{{instance}} engine {{engine}}"
ENGINE_LINES = f"Lines: the {TOP} highest engines at each moment (each shows while it is among them)."
LOWEST_ENGINE_LINES = f"Lines: the {TOP} lowest engines at each moment (each shows while it is among them)."


def engine_panels(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    anchor = res.signals.get("requests_running")
    if anchor is None or not anchor.has_label("engine"):
        return ()
    by = f"{f.per_replica}, engine"
    n = f.names
    # A per-engine panel draws the few engines out of line, by name: the bulk of a fleet is the
    # per-replica panels' spread lines (one engine per replica, they are the same thing), and
    # spread lines over every engine's raw series would cost this row seconds per refresh.
    out: list[Panel] = []
    for key, title, what in (
        ("requests_running", "Running requests per engine", "in each engine's batch"),
        ("requests_waiting", "Waiting requests per engine", "queued at each engine"),
    ):
        if key in res.signals:
            sig = res[key]
            out.append(
                Panel(
                    title=title,
                    description=f"Requests {what}. {ENGINE_LINES}",
                    unit="none",
                    queries=(Query(f.worst(f"sum by ({by}) ({sig.name}{f.raw(sig)})"), ENGINE),),
                    min=0,
                    width=8,
                )
            )
    # The spreads the VllmEngineImbalance alert judges, as recorded (0 for a single-engine replica).
    for key, title, what, spread, limit_name, unit in (
        (
            "kv_cache_usage",
            "KV-cache usage spread across engines",
            "KV-cache usage",
            n.kv_spread,
            "engine_kv_spread",
            "percentunit",
        ),
        (
            "requests_waiting",
            "Queue spread across engines",
            "waiting requests",
            n.waiting_spread,
            "engine_waiting_spread",
            "none",
        ),
    ):
        if key not in res.signals:
            continue
        limit = getattr(cfg.alerts, limit_name, None)
        out.append(
            Panel(
                title=title,
                description=(
                    f"Fullest minus emptiest engine of each replica, in {what}: 0 is an even balance (and all a "
                    "single-engine server can show); a lasting gap is one engine doing its siblings' work."
                    + (" Dashed: the VllmEngineImbalance threshold." if limit is not None else "")
                    + f" {FLEET_LINES}"
                ),
                unit=unit,
                queries=fleet_queries(f, f"{spread}{f.replica}", LEGEND),
                thresholds=((limit, WARN),) if limit is not None else (),
                min=0,
                width=8,
            )
        )
    tokens = [
        Query(f.worst(f.rate(res[key], by)), f"{what} {ENGINE}")
        for key, what in (("prompt_tokens", "prompt"), ("generation_tokens", "generated"))
        if key in res.signals
    ]
    if tokens:
        out.append(
            Panel(
                title="Tokens / s per engine",
                description=f"Prompt (prefill) and generated (decode) tokens per second: the {TOP} busiest engines of each.",
                unit="none",
                queries=tuple(tokens),
                min=0,
                width=8,
            )
        )
    if "iteration_tokens" in res.signals:
        sig = res["iteration_tokens"]
        out.append(
            Panel(
                title="Engine steps / s per engine",
                description=(
                    "Scheduler iterations per second of each engine: an engine at 0 while others step is stuck. "
                    f"{LOWEST_ENGINE_LINES}"
                ),
                unit="none",
                queries=(
                    Query(
                        f.worst(f"sum by ({by}) (rate({sig.name}_count{f.raw(sig)}[{RATE}]))", lowest=True),
                        ENGINE,
                    ),
                ),
                min=0,
                width=8,
            )
        )
    if "preemptions" in res.signals:
        out.append(
            Panel(
                title="Preemptions / s per engine",
                description=f"Which engine runs out of KV cache and evicts requests. {ENGINE_LINES}",
                unit="none",
                queries=(Query(f.worst(f.rate(res["preemptions"], by)), ENGINE),),
                min=0,
                width=8,
            )
        )
    if res.has("prefix_cache_hits", "prefix_cache_queries"):
        out.append(
            Panel(
                title="Prefix-cache hit rate per engine",
                description=(
                    "Each engine's prefix-cache hit rate: requests sharing a prefix must reach the same engine "
                    f"to hit, so a low rate on one engine is routing, not the cache. {LOWEST_ENGINE_LINES}"
                ),
                unit="percentunit",
                queries=(
                    Query(
                        f.worst(
                            f.ratio(res["prefix_cache_hits"], res["prefix_cache_queries"], by), lowest=True
                        ),
                        ENGINE,
                    ),
                ),
                min=0,
                max=1,
                width=8,
            )
        )
    return tuple(out)
