"""The API server process (prometheus_client's process_* series) and the engine's configuration."""

from __future__ import annotations

from ...signals import Resolution
from ..spec import Panel, Query
from .common import WARN
from .queries import RATE, Filters

# cache_config_info carries every CacheConfig field as a label; these answer "how big is the
# KV cache and how is it laid out". Fields a release lacks are left out of the table.
CACHE_FIELDS = (
    ("num_gpu_blocks", "GPU blocks"),
    ("block_size", "Block size (tokens)"),
    ("kv_cache_size_tokens", "KV capacity (tokens)"),
    ("kv_cache_max_concurrency", "Max concurrency"),
    ("cache_dtype", "KV dtype"),
    ("gpu_memory_utilization", "GPU memory share"),
    ("kv_cache_memory_bytes", "KV memory (bytes)"),
    ("enable_prefix_caching", "Prefix caching"),
    ("num_cpu_blocks", "CPU blocks"),
    ("kv_offloading_backend", "Offload backend"),
    ("kv_offloading_size", "Offload size"),
)
CACHE_FIELDS_COLUMNS = tuple((name, header, "") for name, header in CACHE_FIELDS)


def process_panels(res: Resolution, f: Filters) -> tuple[Panel, ...]:
    """CPU, memory and file descriptors of the API server (absent with several API servers)."""
    out: list[Panel] = []
    by = f.per_replica
    if "process_cpu" in res.signals:
        sig = res["process_cpu"]
        out.append(
            Panel(
                title="API server CPU",
                description=(
                    "CPU cores the API server process keeps busy (1 = one core): tokenising, detokenising and "
                    "streaming. Near 1 it is the bottleneck in front of the engine (try --api-server-count)."
                ),
                unit="none",
                queries=(Query(f"sum by ({by}) (rate({sig.name}{f.raw(sig)}[{RATE}]))", "{{instance}}"),),
                min=0,
                width=8,
            )
        )
    if "process_memory" in res.signals:
        sig = res["process_memory"]
        out.append(
            Panel(
                title="API server resident memory",
                description="Resident memory of the API server process: steady growth under steady traffic is a leak.",
                unit="bytes",
                queries=(Query(f"sum by ({by}) ({sig.name}{f.raw(sig)})", "{{instance}}"),),
                min=0,
                width=8,
            )
        )
    if res.has("process_open_fds", "process_max_fds"):
        used, limit = res["process_open_fds"], res["process_max_fds"]
        out.append(
            Panel(
                title="API server file descriptors",
                description=(
                    "Open file descriptors against the process limit (ulimit -n): every client connection "
                    "holds one, and vLLM warns at start when the limit is low. At the limit new connections "
                    "fail. Dashed: 80%."
                ),
                unit="percentunit",
                queries=(
                    Query(
                        f"sum by ({by}) ({used.name}{f.raw(used)})\n/\n(sum by ({by}) ({limit.name}{f.raw(limit)}) > 0)",
                        "{{instance}}",
                    ),
                ),
                thresholds=((0.8, WARN),),
                min=0,
                max=1,
                width=8,
            )
        )
    started = f.family("process_start_time_seconds")
    if started is not None:
        out.append(
            Panel(
                title="API server starts",
                description="Times the API server process started within the time range: each is a restart.",
                unit="none",
                kind="stat",
                queries=(
                    Query(
                        f"sum by ({by}) (changes({started.name}{f.raw(started)}[$__range]))",
                        "{{instance}}",
                        instant=True,
                    ),
                ),
                thresholds=((1, WARN),),
                width=6,
                height=5,
            )
        )
    return tuple(out)


def configuration_panels(res: Resolution, f: Filters) -> tuple[Panel, ...]:
    out: list[Panel] = []
    if "cache_config" in res.signals:
        sig = res["cache_config"]
        engine = (("engine", "Engine", ""),) if sig.has_label("engine") else ()
        out.append(
            Panel(
                title="KV-cache configuration",
                description=(
                    f"How each engine's KV cache is laid out, from {sig.name}: blocks, tokens per block, "
                    "capacity, dtype, the share of GPU memory vLLM took, prefix caching and offloading."
                ),
                unit="none",
                kind="table",
                queries=(Query(f"{sig.name}{f.raw(sig)}", "{{instance}}", instant=True),),
                columns=tuple((label, label, "") for label in f.scope.server) + engine + CACHE_FIELDS_COLUMNS,
                width=24,
                height=6,
            )
        )
    if "engine_sleep_state" in res.signals:
        sig = res["engine_sleep_state"]
        engine = ", engine" if sig.has_label("engine") else ""
        out.append(
            Panel(
                title="Engine sleep state",
                description=(
                    "1 for the state each engine is in: awake serves; weights_offloaded (sleep level 1) and "
                    "discard_all (level 2) do not, and waking takes seconds to minutes."
                ),
                unit="none",
                queries=(
                    Query(
                        f"max by ({f.per_replica}{engine}, sleep_state) ({sig.name}{f.raw(sig)}) > 0",
                        "{{sleep_state}} {{instance}}" + (" engine {{engine}}" if engine else ""),
                    ),
                ),
                kind="bars",
                stack=True,
                min=0,
            )
        )
    return tuple(out)
