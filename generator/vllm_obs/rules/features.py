"""Engine features operators turn on, each watched only when the source exposes it.

- speculative decoding: acceptance rate and mean accepted length; warn when drafts are
  mostly rejected (they then cost more than they save);
- admission control (vLLM 0.32+): requests turned away by --max-num-queued-*;
- KV connectors: failed NIXL transfers, failed offload allocations;
- data-parallel engines: one engine's KV usage or queue far from its siblings'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import BundleConfig
from ..promql import number, selector
from ..signals import Resolution
from .model import Alert, Recording
from .names import by, gauge, rate, ratio, scope_of

if TYPE_CHECKING:
    from .runbooks import Section

ALERT_GROUP = "vllm-obs.features"


class FeatureNames:
    """Recording rules of the features (level job_instance_model, plus reason where kept)."""

    def __init__(self, window: str) -> None:
        level = "job_instance_model"
        self.spec_acceptance = ratio(level, "vllm_spec_decode_acceptance", window)
        self.spec_accepted_length = f"{level}:vllm_spec_decode_accepted_length:mean_{window}"
        self.spec_drafts = rate(level, "vllm_spec_decode_drafts", window)
        self.rejections = rate("job_instance_model_reason", "vllm_admission_rejections", window)
        self.kv_spread = gauge(level, "vllm_kv_cache_usage", "engine_spread")
        self.waiting_spread = gauge(level, "vllm_requests_waiting", "engine_spread")


def recordings(res: Resolution, cfg: BundleConfig) -> list[Recording]:
    w = cfg.alerts.rate_window
    s = cfg.vllm_selector
    sc = scope_of(cfg, res)
    keep = by(sc.instance_model)
    f = FeatureNames(w)
    out = []

    def summed(key: str) -> str:
        return f"sum by ({keep}) (rate({selector(res[key].name, s)}[{w}]))"

    if res.has("spec_decode_accepted_tokens", "spec_decode_draft_tokens"):
        out.append(
            Recording(
                f.spec_acceptance,
                f"{summed('spec_decode_accepted_tokens')}\n/\n({summed('spec_decode_draft_tokens')} > 0)",
            )
        )
    if res.has("spec_decode_accepted_tokens", "spec_decode_drafts"):
        out.append(Recording(f.spec_drafts, summed("spec_decode_drafts")))
        # vLLM's own definition (v1/spec_decode/metrics.py): 1 + accepted tokens per draft.
        out.append(
            Recording(
                f.spec_accepted_length,
                f"1 + {summed('spec_decode_accepted_tokens')}\n/\n({f.spec_drafts} > 0)",
            )
        )
    if "admission_rejections" in res.signals:
        rejected = selector(res["admission_rejections"].name, s)
        out.append(Recording(f.rejections, f"sum by ({keep}, reason) (rate({rejected}[{w}]))"))
    for key, record in (("kv_cache_usage", f.kv_spread), ("requests_waiting", f.waiting_spread)):
        if key in res.signals and res[key].has_label("engine"):
            series = selector(res[key].name, s)
            # Only replicas with several engines (data parallel): a lone engine has no siblings.
            out.append(
                Recording(
                    record,
                    f"(max by ({keep}) ({series}) - min by ({keep}) ({series}))\n"
                    f"and on ({keep})\ncount by ({keep}) ({series}) > 1",
                )
            )
    return out


def alerts(res: Resolution, cfg: BundleConfig) -> list[Alert]:
    a = cfg.alerts
    sc = scope_of(cfg, res)
    f = FeatureNames(a.rate_window)
    keep = by(sc.instance_model)
    out = []
    if f.spec_acceptance in _recorded(res, cfg):
        drafting = f"{f.spec_drafts} > 0" if res.has("spec_decode_drafts") else None
        expr = f"{f.spec_acceptance} < {number(a.spec_decode_acceptance_below)}"
        if drafting:
            expr += f"\nand on ({keep})\n{drafting}"
        out.append(_spec_alert(expr, sc.where, a))
    elif "spec_decode_acceptance_rate" in res.signals:
        # The V0 engine reports the rate itself, as a gauge.
        rate_gauge = selector(res["spec_decode_acceptance_rate"].name, cfg.vllm_selector)
        out.append(
            _spec_alert(
                f"max by ({keep}) ({rate_gauge}) < {number(a.spec_decode_acceptance_below)}", sc.where, a
            )
        )
    if f.rejections in _recorded(res, cfg):
        out.append(
            Alert(
                name="VllmRequestsRejected",
                expr=f"{f.rejections} > 0",
                for_=a.rejections_for,
                severity="warning",
                summary="vLLM is turning requests away.",
                description=(
                    f"{sc.where} rejects {{{{ $value | humanize }}}} requests/s at admission "
                    "({{ $labels.reason }}: the queue is at --max-num-queued-reqs or "
                    "--max-num-queued-tokens); clients get an error instead of a wait."
                ),
                dashboard="kv_cache",
            )
        )
    for key, connector, what in (
        ("nixl_failed_transfers", "nixl", "NIXL KV transfers failed"),
        ("kv_offload_allocation_failures", "offload", "KV offload store allocations failed"),
    ):
        if key in res.signals:
            failures = selector(res[key].name, cfg.vllm_selector)
            out.append(
                Alert(
                    name="VllmKVTransferFailures",
                    expr=f"sum by ({keep}) (increase({failures}[{a.kv_transfer_window}])) > 0",
                    severity="warning",
                    labels={"connector": connector},
                    summary="vLLM's KV connector is failing.",
                    description=(
                        f"{{{{ $value | humanize }}}} {what} on {sc.where} in the last "
                        f"{a.kv_transfer_window}; affected requests recompute their prefill or fail."
                    ),
                    dashboard="kv_cache",
                )
            )
    recorded = _recorded(res, cfg)
    for record, signal, limit, what in (
        (f.kv_spread, "kv", a.engine_kv_spread, "KV-cache usage"),
        (f.waiting_spread, "queue", a.engine_waiting_spread, "waiting requests"),
    ):
        if record in recorded:
            out.append(
                Alert(
                    name="VllmEngineImbalance",
                    expr=f"{record} > {number(limit)}",
                    for_=a.engine_imbalance_for,
                    severity="warning",
                    labels={"signal": signal},
                    summary="vLLM's data-parallel engines are unevenly loaded.",
                    description=(
                        f"The engines of {sc.where} differ by {{{{ $value | humanize }}}} in {what} "
                        f"(threshold {number(limit)}, for {a.engine_imbalance_for}): one engine "
                        "is saturated while its siblings idle."
                    ),
                    dashboard="kv_cache",
                    threshold=limit,
                )
            )
    return out


def _spec_alert(expr: str, where: str, a) -> Alert:
    limit = a.spec_decode_acceptance_below
    return Alert(
        name="VllmSpecDecodeAcceptanceLow",
        expr=expr,
        for_=a.spec_decode_for,
        severity="warning",
        summary="vLLM's speculative drafts are mostly rejected: they cost more than they save.",
        description=(
            f"Only {{{{ $value | humanizePercentage }}}} of the draft tokens of {where} are accepted "
            f"(threshold {number(limit * 100)}%, for {a.spec_decode_for})."
        ),
        dashboard="instance",
        threshold=limit,
    )


def _recorded(res: Resolution, cfg: BundleConfig) -> set[str]:
    return {r.record for r in recordings(res, cfg)}


def runbook_sections() -> dict[str, Section]:
    from .runbooks import Section

    return {
        "VllmSpecDecodeAcceptanceLow": Section(
            meaning=(
                "Speculative decoding proposes draft tokens that the target model then verifies; a low "
                "share of accepted drafts means the verification work is mostly wasted, and per-token "
                "latency is worse than without speculation. It happens when traffic changes (an n-gram "
                "proposer on text that does not repeat its prompt, a draft model that no longer matches "
                "the target model's style or fine-tune)."
            ),
            confirm=[
                "Acceptance and mean accepted length: `{spec_acceptance}`, `{spec_length}`",
                "Per position: acceptance falls with the position; if even position 0 is rarely "
                "accepted, the proposer does not fit this traffic",
                "Inter-token latency with and without speculation (the instance dashboard)",
            ],
            act=[
                "Lower `num_speculative_tokens` in `--speculative-config`, or turn speculation off for "
                "this model (restart without `--speculative-config`).",
                "For n-gram proposers, raise `prompt_lookup_min` so only longer matches propose.",
                "For a draft model, use one trained or fine-tuned like the target model.",
            ],
        ),
        "VllmRequestsRejected": Section(
            meaning=(
                "vLLM's admission control (vLLM 0.32+, `--max-num-queued-reqs` / "
                "`--max-num-queued-tokens`) turns requests away because the queue is full. Clients get "
                "an error at once instead of waiting: load shedding is working, and capacity is short."
            ),
            confirm=[
                "Rejections by reason: `{rejections}`",
                "The queue at its limit: `{waiting}`; KV-cache usage: `{kv}`",
            ],
            act=[
                "Add replicas (the queue limit protects latency; it does not add capacity).",
                "If bursts are short, raise the queue limits so they wait instead of failing.",
            ],
        ),
        "VllmKVTransferFailures": Section(
            meaning=(
                '`connector="nixl"`: KV-cache transfers between prefill and decode instances '
                "(disaggregated serving over NIXL) fail, so the decode side recomputes the prefill or "
                'the request fails. `connector="offload"`: the KV offload connector cannot allocate '
                "room in its tier (CPU memory, disk) to store evicted blocks, so they are dropped."
            ),
            confirm=[
                "Failed NIXL transfers and expired KV: the KV cache dashboard's connector row",
                "The log: `NIXL` / `handshake` / `notification` errors on both prefill and decode "
                "instances; the network between them (RDMA link state, UCX errors)",
            ],
            act=[
                "NIXL: check the transport between prefill and decode (link, UCX/NIXL versions on both "
                "sides, `VLLM_NIXL_ABORT_REQUEST_TIMEOUT`), then restart the side that fails.",
                "Offload: give the tier more room (`cpu_bytes_to_use` or the disk budget) or lower the "
                "amount offloaded.",
            ],
        ),
        "VllmEngineImbalance": Section(
            meaning=(
                "With data parallelism (`--data-parallel-size`), one engine's KV-cache usage "
                '(`signal="kv"`) or queue (`signal="queue"`) stays far from its siblings\'. The '
                "front end is not spreading requests evenly (long sessions pinned to one engine, a "
                "router that ignores load), so one engine queues and preempts while others idle."
            ),
            confirm=[
                "Per engine: the `engine` variable of the KV cache dashboard; "
                "`{kv_series}` and `{waiting_series}` by `engine`",
            ],
            act=[
                "Check the load balancing in front of the engines (the API server's DP load balancing, "
                "or an external router's policy); avoid pinning long sessions to one engine.",
            ],
        ),
    }


def placeholders(cfg: BundleConfig) -> dict[str, str]:
    f = FeatureNames(cfg.alerts.rate_window)
    return {
        "spec_acceptance": f.spec_acceptance,
        "spec_length": f.spec_accepted_length,
        "rejections": f.rejections,
    }
