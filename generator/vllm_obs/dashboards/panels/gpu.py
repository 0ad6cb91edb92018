"""GPUs: DCGM exporter figures beside the same server's vLLM figures, a row of the instance dashboard
(only with gpu.enabled). Reads the GPU recording rules, labelled with the vLLM server's instance,
so the instance variable selects a server's GPUs and its requests together.
"""

from __future__ import annotations

from ...config import BundleConfig
from ...promql import number
from ...signals import Resolution
from ...vocabulary import GpuNames as G
from ..spec import Panel, Query
from .common import CRIT, LEGEND, WARN, stat
from .queries import Filters

GPU = "{{instance}} GPU {{gpu}} {{modelName}}"


def gpu_panels(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    """The GPU row of the instance dashboard: nothing unless gpu.enabled."""
    if not cfg.gpu.enabled:
        return ()
    return _against_load(res, cfg, f) + _per_gpu(cfg, f)


def _against_load(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    n = f.names
    g = cfg.gpu
    out = []
    queries = [Query(f"{G.server_utilization}{f.gpu}", "GPU utilisation {{instance}}")]
    if "requests_running" in res.signals:
        running = f"{n.requests_running}{f.replica}"
        slots = (
            f"{running} / {number(cfg.alerts.max_num_seqs)}"
            if cfg.alerts.max_num_seqs
            else f"{running}\n/\n(max_over_time({running}[1h]) > 0)"
        )
        queries.append(Query(slots, f"slots in use {LEGEND}"))
    out.append(
        Panel(
            title="GPU utilisation against running requests",
            description=(
                "Mean GPU utilisation of each server's GPUs, and the share of its request slots in use "
                + (
                    f"(running / --max-num-seqs {number(cfg.alerts.max_num_seqs)})"
                    if cfg.alerts.max_num_seqs
                    else "(running / its peak over the last hour)"
                )
                + f". Slots full while utilisation stays below {g.idle_utilization_below:.0%} (dashed) for "
                f"{g.idle_for} is VllmGpuIdleWhileBusy: clients that stopped reading hold the slots."
            ),
            unit="percentunit",
            queries=tuple(queries),
            thresholds=((g.idle_utilization_below, WARN),),
            min=0,
            max=1,
        )
    )
    if res.has("requests_waiting", "requests_running"):
        out.append(
            Panel(
                title="Requests running and waiting",
                description="The same servers' batches and queues, next to their GPUs.",
                unit="none",
                queries=(
                    Query(f"{n.requests_running}{f.replica}", f"running {LEGEND}"),
                    Query(f"{n.requests_waiting}{f.replica}", f"waiting {LEGEND}"),
                ),
                min=0,
                width=6,
            )
        )
    if "kv_cache_usage" in res.signals:
        out.append(
            Panel(
                title="KV-cache usage",
                description=(
                    "vLLM's KV cache lives in the framebuffer it reserved at start: full KV cache with "
                    "framebuffer to spare means --gpu-memory-utilization could be raised."
                ),
                unit="percentunit",
                queries=(Query(f"{n.kv_cache_usage}{f.replica}", LEGEND),),
                thresholds=((cfg.alerts.kv_usage_threshold, CRIT),),
                min=0,
                max=1,
                width=6,
            )
        )
    return tuple(out)


def _per_gpu(cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    g = cfg.gpu
    sel = f.gpu
    return (
        stat(
            "GPUs with an XID error",
            "GPUs whose last reported XID code is not 0 (DCGM keeps the last code until the driver resets).",
            "none",
            f"count({G.xid}{sel} > 0) or vector(0)",
            thresholds=((1, CRIT),),
            width=6,
        ),
        stat(
            "Fullest framebuffer",
            f"Highest framebuffer use of any GPU selected; VllmGpuMemoryNearlyFull warns above {g.memory_full_threshold:.0%}.",
            "percentunit",
            f"max({G.server_memory_used}{sel})",
            thresholds=((g.memory_full_threshold, CRIT),),
            min=0,
            max=1,
            width=6,
        ),
        Panel(
            title="XID errors",
            description=(
                "The last XID code each GPU reported (0: none). A new code is VllmGpuXidError: 79 (fallen off "
                "the bus), 48 (double-bit ECC), 94/95 (contained/uncontained ECC) and kin mean the GPU faulted; "
                "the engine on it usually dies next."
            ),
            unit="none",
            queries=(Query(f"{G.xid}{sel}", GPU),),
            thresholds=((1, CRIT),),
            min=0,
        ),
        Panel(
            title="GPU utilisation",
            description="Share of time each GPU ran a kernel (DCGM_FI_DEV_GPU_UTIL).",
            unit="percentunit",
            queries=(Query(f"{G.utilization}{sel}", GPU),),
            min=0,
            max=1,
        ),
        Panel(
            title="Framebuffer used",
            description=(
                "Share of each GPU's framebuffer in use. vLLM takes --gpu-memory-utilization (0.9 by default) "
                f"at start; only what comes on top is alarming. Dashed: VllmGpuMemoryNearlyFull ({g.memory_full_threshold:.0%})."
            ),
            unit="percentunit",
            queries=(Query(f"{G.memory_used_ratio}{sel}", GPU),),
            thresholds=((g.memory_full_threshold, CRIT),),
            min=0,
            max=1,
        ),
        Panel(
            title="Framebuffer used and free",
            description="Framebuffer memory used and free per GPU.",
            unit="bytes",
            queries=(
                Query(f"{G.memory_used_bytes}{sel}", f"used {GPU}"),
                Query(f"{G.memory_free_bytes}{sel}", f"free {GPU}"),
            ),
            min=0,
        ),
        Panel(
            title="GPU temperature",
            description="GPU temperature: datacenter GPUs slow their clocks from about 85 °C.",
            unit="celsius",
            queries=(Query(f"{G.temperature}{sel}", GPU),),
            thresholds=((85, WARN),),
        ),
        Panel(
            title="GPU power",
            description="Power draw per GPU: a GPU at its power limit is throttled.",
            unit="watt",
            queries=(Query(f"{G.power}{sel}", GPU),),
            min=0,
        ),
    )
