"""KV transfer between servers (disaggregated prefill/decode, NIXL) and KV offloading to CPU memory.
Their series exist only when the server runs a KV connector (--kv-transfer-config), so these
panels appear only then.
"""

from __future__ import annotations

from ...signals import Resolution
from ..spec import Panel, Query
from .common import WARN, raw_percentiles
from .queries import RATE, Filters


def connector_panels(res: Resolution, f: Filters) -> tuple[Panel, ...]:
    out: list[Panel] = []
    by = f.per_model
    if "kv_fetch_by_stage" in res.signals:
        sig = res["kv_fetch_by_stage"]
        out.append(
            Panel(
                title="Requests waiting on KV transfer",
                description=(
                    "Requests of a decode server waiting for their KV cache from a prefill server, by stage: "
                    "a growing count is a slow or stuck transfer path, and these requests wait on top of the queue."
                ),
                unit="none",
                queries=(
                    Query(f"sum by ({by}, stage) ({sig.name}{f.raw(sig)})", f"{{{{stage}}}} {f.legend}"),
                ),
                stack=True,
                min=0,
            )
        )
    if "nixl_transfer_time" in res.signals:
        sig = res["nixl_transfer_time"]
        out.append(
            raw_percentiles(
                f,
                sig,
                "NIXL transfer time",
                f"Time per KV transfer between servers, from {sig.name}.",
                "s",
                by,
                f.legend,
            )
        )
        count = f"sum by ({by}) (rate({sig.name}_count{f.raw(sig)}[{RATE}]))"
        out.append(
            Panel(
                title="NIXL transfers / s",
                description="KV transfers completed per second.",
                unit="ops",
                queries=(Query(count, f.legend),),
                min=0,
                width=8,
            )
        )
        if "nixl_bytes_transferred" in res.signals:
            size = res["nixl_bytes_transferred"]
            moved = f"sum by ({by}) (rate({size.name}_sum{f.raw(size)}[{RATE}]))"
            busy = f"sum by ({by}) (rate({sig.name}_sum{f.raw(sig)}[{RATE}]))"
            out += [
                Panel(
                    title="NIXL throughput",
                    description=(
                        "KV bytes moved per second (aggregate), and per transfer while one is in flight "
                        "(bytes / transfer time): the link's effective bandwidth."
                    ),
                    unit="Bps",
                    queries=(
                        Query(moved, f"aggregate {f.legend}"),
                        Query(f"{moved}\n/\n({busy} > 0)", f"per transfer {f.legend}"),
                    ),
                    min=0,
                    width=8,
                ),
                Panel(
                    title="NIXL bytes per transfer",
                    description=f"Mean size of a KV transfer, from {size.name}: it grows with prompt length.",
                    unit="bytes",
                    queries=(Query(f.mean(size, by), f.legend),),
                    min=0,
                    width=8,
                ),
            ]
    for native, title, what, unit in (
        ("vllm:nixl_post_time_seconds", "NIXL transfer post time", "Time to post a transfer to NIXL", "s"),
        (
            "vllm:nixl_num_descriptors",
            "NIXL descriptors per transfer",
            "Memory descriptors per transfer (fragmentation of the KV layout)",
            "none",
        ),
    ):
        fam = f.family(native)
        if fam is not None and fam.type == "histogram":
            out.append(raw_percentiles(f, fam, title, f"{what}, from {fam.name}.", unit, by, f.legend))
    if "prompt_tokens_by_source" in res.signals and out:
        sig = res["prompt_tokens_by_source"]
        out.append(
            Panel(
                title="Prompt tokens loaded via KV transfer",
                description="Prompt tokens per second whose KV arrived from another server instead of being computed.",
                unit="none",
                queries=(Query(f.rate(sig, by, 'source="external_kv_transfer"'), f.legend),),
                min=0,
                width=8,
            )
        )
    return tuple(out)


def connector_failures(res: Resolution, f: Filters) -> Panel | None:
    """Every way a KV connector loses KV: what VllmKVTransferFailures judges."""
    by = f.per_model
    failures = []
    for key, native, what in (
        ("nixl_failed_transfers", "vllm:nixl_num_failed_transfers_total", "failed NIXL transfers"),
        ("nixl_expired_requests", "vllm:nixl_num_kv_expired_reqs_total", "expired KV"),
        (None, "vllm:nixl_num_failed_notifications_total", "failed NIXL notifications"),
        (None, "vllm:nixl_num_notifications_after_expiry_total", "NIXL notifications after expiry"),
        (
            "kv_offload_allocation_failures",
            "vllm:kv_offload_allocation_failure_total",
            "offload allocation failures",
        ),
    ):
        item = res.signals.get(key) if key else f.family(native)
        if item is not None:
            failures.append(Query(f.rate(item, by), f"{what} {f.legend}"))
    if not failures:
        return None
    return Panel(
        title="KV connector failures / s",
        description=(
            "Failed KV transfers (the request recomputes its prefill or fails), requests whose prefilled KV "
            "expired before the decode server fetched it, lost notifications, and offload stores that found "
            "no room in the CPU tier (the KV is dropped). Any sustained value is VllmKVTransferFailures."
        ),
        unit="none",
        queries=tuple(failures),
        thresholds=((0.001, WARN),),
        min=0,
    )


def offload_panels(res: Resolution, f: Filters) -> tuple[Panel, ...]:
    out: list[Panel] = []
    by = f.per_model
    moved = [
        (key, what)
        for key, what in (
            ("kv_offload_load_bytes", "load (to GPU)"),
            ("kv_offload_store_bytes", "store (from GPU)"),
        )
        if key in res.signals
    ]
    if moved:
        out.append(
            Panel(
                title="KV offload throughput",
                description="KV bytes per second loaded back into GPU memory and stored out to the CPU tier.",
                unit="Bps",
                queries=tuple(Query(f.rate(res[k], by), f"{w} {f.legend}") for k, w in moved),
                min=0,
                width=8,
            )
        )
    bandwidth = [
        Query(f"{f.rate(res[b], by)}\n/\n({f.rate(res[t], by)} > 0)", f"{w} {f.legend}")
        for b, t, w in (
            ("kv_offload_load_bytes", "kv_offload_load_time", "load"),
            ("kv_offload_store_bytes", "kv_offload_store_time", "store"),
        )
        if res.has(b, t)
    ]
    if bandwidth:
        out.append(
            Panel(
                title="KV offload bandwidth",
                description="Bytes per second of transfer time: the effective GPU-CPU bandwidth of the offload path.",
                unit="Bps",
                queries=tuple(bandwidth),
                min=0,
                width=8,
            )
        )
    sizes = [
        Query(f.mean(fam, by), f"{w} {f.legend}")
        for native, w in (("vllm:kv_offload_load_size", "load"), ("vllm:kv_offload_store_size", "store"))
        if (fam := f.family(native)) is not None and fam.type == "histogram"
    ]
    if sizes:
        out.append(
            Panel(
                title="KV offload transfer size",
                description="Mean size of one load or store operation.",
                unit="bytes",
                queries=tuple(sizes),
                min=0,
                width=8,
            )
        )
    if "kv_offload_cpu_usage" in res.signals:
        sig = res["kv_offload_cpu_usage"]
        out.append(
            Panel(
                title="KV offload CPU tier usage",
                description="Share of the CPU offload buffer in use: at 1 new stores find no room and are dropped.",
                unit="percentunit",
                queries=(Query(f"max by ({by}) ({sig.name}{f.raw(sig)})", f.legend),),
                thresholds=((0.9, WARN),),
                min=0,
                max=1,
                width=8,
            )
        )
    lookups = [
        Query(f.quantile(fam, 0.99, by), f"p99 {w} {f.legend}")
        for native, w in (
            ("vllm:kv_offload_lookup_sync_delay_seconds", "sync"),
            ("vllm:kv_offload_lookup_async_delay_seconds", "async"),
        )
        if (fam := f.family(native)) is not None and fam.type == "histogram"
    ]
    if lookups:
        out.append(
            Panel(
                title="KV offload lookup latency",
                description="p99 time to look a prefix up in the offload tier: sync lookups stall the scheduler.",
                unit="s",
                queries=tuple(lookups),
                min=0,
                width=8,
            )
        )
    return tuple(out)
