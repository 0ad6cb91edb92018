"""Engine feature rows, each present only when the source exposes the feature: speculative decoding,
LoRA and the model-FLOPs estimate (instance dashboard); admission control, prompt sources and
caches, KV-block residency (KV cache dashboard). KV transfer and offloading are in kv_transfer.py.
"""

from __future__ import annotations

from ...config import BundleConfig
from ...signals import Resolution
from ..spec import Panel, Query
from .common import WARN, keep, latency_panel, raw_percentiles, stat
from .queries import RATE, Filters


def spec_decode_panels(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    out: list[Panel | None] = []
    if res.has("spec_decode_draft_tokens", "spec_decode_accepted_tokens"):
        drafted, accepted = res["spec_decode_draft_tokens"], res["spec_decode_accepted_tokens"]
        engine = ", engine" if accepted.has_label("engine") else ""
        per = f"{f.per_model}{engine}"
        legend = f.legend + (" engine {{engine}}" if engine else "")
        out.append(
            stat(
                "Draft acceptance rate",
                "Share of drafted tokens the target model accepted, all selected: below ~0.3 the drafts "
                "cost more verification than they save.",
                "percentunit",
                f.ratio(accepted, drafted, "job"),
                min=0,
                max=1,
                width=6,
            )
        )
        if "spec_decode_drafts" in res.signals:
            drafts = res["spec_decode_drafts"]
            out.append(
                stat(
                    "Mean acceptance length",
                    "Tokens each verification step yields on average: 1 + accepted tokens per draft. 1 means "
                    "speculation gains nothing.",
                    "none",
                    f"1 + {f.ratio(accepted, drafts, 'job')}",
                    width=6,
                )
            )
        if "generation_tokens" in res.signals:
            out.append(
                stat(
                    "Output from drafts",
                    "Share of generated tokens that came from accepted drafts.",
                    "percentunit",
                    f.ratio(accepted, res["generation_tokens"], "job"),
                    min=0,
                    max=1,
                    width=6,
                )
            )
        below = getattr(cfg.alerts, "spec_decode_acceptance_below", None)
        out.append(
            Panel(
                title="Draft acceptance rate per replica",
                description=(
                    "Accepted / drafted tokens per replica, model and engine: one low line is a drafter that "
                    "fits that traffic badly."
                    + (" Dashed: the VllmSpecDecodeAcceptanceLow threshold." if below is not None else "")
                ),
                unit="percentunit",
                queries=(Query(f.ratio(accepted, drafted, per), legend),),
                # Low is bad: the line below the threshold shows orange.
                thresholds=((below, "green"),) if below is not None else (),
                base_color=WARN if below is not None else "green",
                min=0,
                max=1,
            )
        )
        if "spec_decode_drafts" in res.signals:
            drafts = res["spec_decode_drafts"]
            out.append(
                Panel(
                    title="Mean acceptance length per replica",
                    description="1 + accepted tokens per draft: the speed-up ceiling of speculative decoding.",
                    unit="none",
                    queries=(Query(f"1 + {f.ratio(accepted, drafts, per)}", legend),),
                    min=1,
                )
            )
            if "spec_decode_accepted_per_position" in res.signals:
                pos = res["spec_decode_accepted_per_position"]
                out.append(
                    Panel(
                        title="Acceptance by draft position",
                        description=(
                            "Share of drafts whose token at each position was accepted: where it falls off, "
                            "further speculative tokens (num_speculative_tokens) only cost compute."
                        ),
                        unit="percentunit",
                        queries=(
                            Query(
                                f"{f.rate(pos, f'{f.per_model}, position')}\n/ ignoring (position) group_left ()\n"
                                f"({f.rate(drafts, f.per_model)} > 0)",
                                "position {{position}} {{instance}}",
                            ),
                        ),
                        min=0,
                        max=1,
                    )
                )
        flows = [
            Query(f.rate(drafted, f.per_model), f"proposed {f.legend}"),
            Query(f.rate(accepted, f.per_model), f"accepted {f.legend}"),
            Query(
                f"{f.rate(drafted, f.per_model)}\n- {f.rate(accepted, f.per_model)}", f"rejected {f.legend}"
            ),
        ]
        if "spec_decode_drafts" in res.signals:
            flows.append(Query(f.rate(res["spec_decode_drafts"], f.per_model), f"drafts {f.legend}"))
        out.append(
            Panel(
                title="Draft tokens / s",
                description=(
                    "Tokens proposed by the drafter, accepted by the target model, and rejected (wasted "
                    "work); and drafts (verification steps) per second."
                ),
                unit="none",
                queries=tuple(flows),
                min=0,
            )
        )
        a = cfg.alerts
        out.append(
            latency_panel(
                f,
                "inter_token_latency",
                "Inter-token latency with speculation",
                f.legend,
                a.itl_p95_warning_seconds,
                None,
            )
        )
    if "spec_decode_acceptance_rate" in res.signals:
        sig = res["spec_decode_acceptance_rate"]
        out.append(
            Panel(
                title="Draft acceptance rate (V0)",
                description=f"{sig.name}, as the V0 engine reports it (a gauge over its own window).",
                unit="percentunit",
                queries=(Query(f"max by ({f.per_model}) ({sig.name}{f.raw(sig)})", f.legend),),
                min=0,
                max=1,
            )
        )
    return keep(*out)


def lora_panels(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    if "lora_requests" not in res.signals:
        return ()
    n = f.names
    t = f.recorded_target
    return (
        Panel(
            title="LoRA adapters running and waiting",
            description=(
                "Adapters with requests in the batch now (at most max_lora fit at once) and adapters whose "
                "requests wait for a slot: waiting adapters while running sits at max_lora means raise "
                "--max-loras. Counted from the adapter lists of vllm:lora_requests_info, up to 16."
            ),
            unit="none",
            queries=(
                Query(f"{n.lora_running}{t}", "running {{instance}} (max_lora {{max_lora}})"),
                Query(f"{n.lora_waiting}{t}", "waiting {{instance}}"),
            ),
            min=0,
        ),
        Panel(
            title="LoRA adapters now",
            description=(
                "The adapters each server runs and queues, by name (vLLM joins the names with commas into "
                "one label value, so only this table lists them; adapter names are the configured ones)."
            ),
            unit="none",
            kind="table",
            queries=(Query(f"{n.lora_latest}{t}", "{{instance}}", instant=True),),
            columns=tuple((label, label, "") for label in f.scope.server)
            + (
                ("max_lora", "max_lora", ""),
                ("running_lora_adapters", "Running adapters", ""),
                ("waiting_lora_adapters", "Waiting adapters", ""),
            ),
        ),
    )


def admission_panels(res: Resolution, f: Filters) -> tuple[Panel, ...]:
    out = []
    if "admission_rejections" in res.signals:
        sig = res["admission_rejections"]
        out.append(
            Panel(
                title="Requests rejected at admission",
                description=(
                    "Requests vLLM turned away before queueing them, by reason (the queue limits "
                    "--max-num-queued-reqs / --max-num-queued-tokens): clients got an error at once."
                ),
                unit="reqps",
                queries=(Query(f.rate(sig, f"{f.per_model}, reason"), f"{{{{reason}}}} {f.legend}"),),
                stack=True,
                min=0,
            )
        )
    return tuple(out)


def cache_panels(res: Resolution, f: Filters) -> tuple[Panel, ...]:
    out = []
    if "prompt_tokens_by_source" in res.signals:
        sig = res["prompt_tokens_by_source"]
        out.append(
            Panel(
                title="Prompt tokens by source",
                description=(
                    "Prompt tokens per second by where their KV came from: computed (local_compute), the local "
                    "prefix cache (local_cache_hit) or a KV transfer (external_kv_transfer)."
                ),
                unit="none",
                queries=(Query(f.rate(sig, f"{f.per_model}, source"), f"{{{{source}}}} {f.legend}"),),
                stack=True,
                min=0,
            )
        )
    if "prompt_tokens_cached_by_source" in res.signals:
        sig = res["prompt_tokens_cached_by_source"]
        out.append(
            Panel(
                title="Cached prompt tokens by tier",
                description="Prompt tokens served from a cache per second, by tier: device, host, disk, p2p, external.",
                unit="none",
                queries=(Query(f.rate(sig, f"{f.per_model}, source"), f"{{{{source}}}} {f.legend}"),),
                stack=True,
                min=0,
            )
        )
    rates = []
    for hits, queries, what in (
        ("prefix_cache_hits", "prefix_cache_queries", "local prefix"),
        ("external_prefix_cache_hits", "external_prefix_cache_queries", "external prefix"),
        ("mm_cache_hits", "mm_cache_queries", "multimodal"),
    ):
        if res.has(hits, queries):
            rates.append(Query(f.ratio(res[hits], res[queries], f.per_model), f"{what} {f.legend}"))
    if rates:
        out.append(
            Panel(
                title="Cache hit rates",
                description=(
                    "Hits per lookup of the local prefix cache, the external (KV connector) prefix cache and "
                    "the multimodal input cache. A cache nothing looked up in has no rate (no line)."
                ),
                unit="percentunit",
                queries=tuple(rates),
                min=0,
                max=1,
            )
        )
    computed = f.family("vllm:request_prefill_kv_computed_tokens")
    if computed is not None and "request_prompt_tokens" in res.signals:
        out.append(
            Panel(
                title="Prompt and computed tokens per request",
                description="Mean prompt length against the prompt tokens each request really computed: the gap is cache.",
                unit="none",
                queries=(
                    Query(f.mean(res["request_prompt_tokens"], f.per_model), f"prompt {f.legend}"),
                    Query(f.mean(computed, f.per_model), f"computed {f.legend}"),
                ),
                min=0,
            )
        )
    return tuple(out)


def residency_panels(res: Resolution, f: Filters) -> tuple[Panel, ...]:
    out = []
    for native, title, what in (
        (
            "vllm:kv_block_lifetime_seconds",
            "KV-block lifetime",
            "how long a KV block lives from allocation to eviction",
        ),
        (
            "vllm:kv_block_idle_before_evict_seconds",
            "KV-block idle time before eviction",
            "how long an evicted block sat unused: short means useful blocks are evicted (cache too small)",
        ),
        ("vllm:kv_block_reuse_gap_seconds", "KV-block reuse gap", "time between two uses of a cached block"),
    ):
        fam = f.family(native)
        if fam is not None and fam.type == "histogram":
            out.append(
                raw_percentiles(
                    f, fam, title, f"{what.capitalize()}; from {fam.name}.", "s", f.per_model, f.legend
                )
            )
    return tuple(out)


def mfu_panels(res: Resolution, f: Filters) -> tuple[Panel, ...]:
    flops = f.family("vllm:estimated_flops_per_gpu_total")
    reads = f.family("vllm:estimated_read_bytes_per_gpu_total")
    writes = f.family("vllm:estimated_write_bytes_per_gpu_total")
    out = []
    by = f"{f.per_replica}, engine" if flops is not None and "engine" in flops.labels else f.per_replica
    if flops is not None:
        out.append(
            Panel(
                title="Estimated compute per GPU",
                description=(
                    "FLOP/s the model's arithmetic needs per GPU, vLLM's estimate: against the GPU's peak it is "
                    "the model-FLOPs utilisation. 0 unless the server runs with --enable-mfu-metrics."
                ),
                unit="flops",
                queries=(Query(f"sum by ({by}) (rate({flops.name}{f.raw(flops)}[{RATE}]))", "{{instance}}"),),
                min=0,
            )
        )
    if reads is not None and writes is not None:
        out.append(
            Panel(
                title="Estimated memory traffic per GPU",
                description=(
                    "Bytes/s the model reads and writes per GPU, vLLM's estimate: against the memory bandwidth "
                    "it shows how memory-bound decoding is. 0 unless --enable-mfu-metrics."
                ),
                unit="Bps",
                queries=(
                    Query(f"sum by ({by}) (rate({reads.name}{f.raw(reads)}[{RATE}]))", "read {{instance}}"),
                    Query(
                        f"sum by ({by}) (rate({writes.name}{f.raw(writes)}[{RATE}]))", "write {{instance}}"
                    ),
                ),
                min=0,
            )
        )
    return tuple(out)
