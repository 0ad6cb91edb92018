"""Engine features, each watched only when the source exposes it (silently absent otherwise):
speculative decoding's acceptance, admission control's refusals (vLLM 0.32+), failed KV-connector
transfers and offload allocations, and data-parallel engines far from their siblings.
"""

from __future__ import annotations

from ...promql import number, selector
from ...vocabulary import Vocabulary, by
from ..declaration import PER_REPLICA, Declared
from ..model import Alert, Recording
from ..runbook_kit import Section
from ..scenarios.features import imbalance_cases, kv_transfer_cases, rejected_cases, spec_decode_cases

GROUP = "vllm-obs.features"


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        Declared(
            name="VllmSpecDecodeAcceptanceLow",
            knobs=("alerts.spec_decode_acceptance_below", "alerts.spec_decode_for"),
            build=_spec_decode_rule,
            panel="Draft acceptance rate per replica",
            runbook=Section(
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
            scenarios=spec_decode_cases,
            symptoms=(PER_REPLICA,),
        ),
        Declared(
            name="VllmRequestsRejected",
            knobs=("alerts.rejections_for",),
            build=_rejections_rule,
            panel="Requests rejected at admission",
            runbook=Section(
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
            scenarios=rejected_cases,
            symptoms=(PER_REPLICA,),
        ),
        Declared(
            name="VllmKVTransferFailures",
            knobs=("alerts.kv_transfer_window",),
            build=_kv_transfer_rules,
            panel="KV connector failures / s",
            runbook=Section(
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
            scenarios=kv_transfer_cases,
            symptoms=(PER_REPLICA,),
        ),
        Declared(
            name="VllmEngineImbalance",
            knobs=("alerts.engine_kv_spread", "alerts.engine_waiting_spread", "alerts.engine_imbalance_for"),
            build=_imbalance_rules,
            panel="KV-cache usage spread across engines",
            runbook=Section(
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
            scenarios=imbalance_cases,
            symptoms=(PER_REPLICA,),
        ),
    ]


def recordings(v: Vocabulary) -> list[Recording]:
    res, n = v.res, v.names
    w = v.cfg.alerts.rate_window
    keep = by(v.scope.instance_model)
    out = []

    def summed(key: str) -> str:
        return f"sum by ({keep}) (rate({selector(res[key].name, v.vllm)}[{w}]))"

    if res.has("spec_decode_accepted_tokens", "spec_decode_draft_tokens"):
        out.append(
            Recording(
                n.spec_acceptance,
                f"{summed('spec_decode_accepted_tokens')}\n/\n({summed('spec_decode_draft_tokens')} > 0)",
            )
        )
    if res.has("spec_decode_accepted_tokens", "spec_decode_drafts"):
        out.append(Recording(n.spec_drafts, summed("spec_decode_drafts")))
        # vLLM's own definition (v1/spec_decode/metrics.py): 1 + accepted tokens per draft.
        out.append(
            Recording(
                n.spec_accepted_length,
                f"1 + {summed('spec_decode_accepted_tokens')}\n/\n({n.spec_drafts} > 0)",
            )
        )
    if "admission_rejections" in res.signals:
        rejected = selector(res["admission_rejections"].name, v.vllm)
        out.append(Recording(n.rejections, f"sum by ({keep}, reason) (rate({rejected}[{w}]))"))
    for key, record in (("kv_cache_usage", n.kv_spread), ("requests_waiting", n.waiting_spread)):
        if key in res.signals and res[key].has_label("engine"):
            series = selector(res[key].name, v.vllm)
            # Every replica, 0 for a lone engine: the KV cache and scheduler dashboard draws the fleet's
            # spread from this record alone, so a fleet without data parallelism needs it too (cheaper
            # than or-ing in a zero per replica at query time).
            out.append(Recording(record, f"max by ({keep}) ({series})\n-\nmin by ({keep}) ({series})"))
    return out


def _recorded(v: Vocabulary) -> set[str]:
    return {r.record for r in recordings(v)}


def _spec_decode_rule(v: Vocabulary) -> list[Alert]:
    a, n, res = v.cfg.alerts, v.names, v.res
    keep = by(v.scope.instance_model)
    if n.spec_acceptance in _recorded(v):
        expr = f"{n.spec_acceptance} < {number(a.spec_decode_acceptance_below)}"
        if res.has("spec_decode_drafts"):
            expr += f"\nand on ({keep})\n{n.spec_drafts} > 0"
    elif "spec_decode_acceptance_rate" in res.signals:
        # The V0 engine reports the rate itself, as a gauge.
        rate_gauge = selector(res["spec_decode_acceptance_rate"].name, v.vllm)
        expr = f"max by ({keep}) ({rate_gauge}) < {number(a.spec_decode_acceptance_below)}"
    else:
        return []
    limit = a.spec_decode_acceptance_below
    return [
        Alert(
            name="VllmSpecDecodeAcceptanceLow",
            expr=expr,
            for_=a.spec_decode_for,
            severity="warning",
            summary="vLLM's speculative drafts are mostly rejected: they cost more than they save.",
            description=(
                f"Only {{{{ $value | humanizePercentage }}}} of the draft tokens of {v.scope.where} are accepted "
                f"(threshold {number(limit * 100)}%, for {a.spec_decode_for})."
            ),
            dashboard="instance",
            threshold=limit,
        )
    ]


def _rejections_rule(v: Vocabulary) -> list[Alert]:
    if "admission_rejections" not in v.res.signals:
        return []  # a feature the server does not run: no warning
    a = v.cfg.alerts
    return [
        Alert(
            name="VllmRequestsRejected",
            expr=f"{v.names.rejections} > 0",
            for_=a.rejections_for,
            severity="warning",
            summary="vLLM is turning requests away.",
            description=(
                f"{v.scope.where} rejects {{{{ $value | humanize }}}} requests/s at admission "
                "({{ $labels.reason }}: the queue is at --max-num-queued-reqs or "
                "--max-num-queued-tokens); clients get an error instead of a wait."
            ),
            dashboard="kv_cache",
        )
    ]


def _kv_transfer_rules(v: Vocabulary) -> list[Alert]:
    a, keep = v.cfg.alerts, by(v.scope.instance_model)
    out = []
    for key, connector, what in (
        ("nixl_failed_transfers", "nixl", "NIXL KV transfers failed"),
        ("kv_offload_allocation_failures", "offload", "KV offload store allocations failed"),
    ):
        if key in v.res.signals:
            failures = selector(v.res[key].name, v.vllm)
            out.append(
                Alert(
                    name="VllmKVTransferFailures",
                    expr=f"sum by ({keep}) (increase({failures}[{a.kv_transfer_window}])) > 0",
                    severity="warning",
                    labels={"connector": connector},
                    summary="vLLM's KV connector is failing.",
                    description=(
                        f"{{{{ $value | humanize }}}} {what} on {v.scope.where} in the last "
                        f"{a.kv_transfer_window}; affected requests recompute their prefill or fail."
                    ),
                    dashboard="kv_cache",
                )
            )
    return out


def _imbalance_rules(v: Vocabulary) -> list[Alert]:
    a, n = v.cfg.alerts, v.names
    recorded = _recorded(v)
    out = []
    for record, signal, limit, what in (
        (n.kv_spread, "kv", a.engine_kv_spread, "KV-cache usage"),
        (n.waiting_spread, "queue", a.engine_waiting_spread, "waiting requests"),
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
                        f"The engines of {v.scope.where} differ by {{{{ $value | humanize }}}} in {what} "
                        f"(threshold {number(limit)}, for {a.engine_imbalance_for}): one engine "
                        "is saturated while its siblings idle."
                    ),
                    dashboard="kv_cache",
                    threshold=limit,
                )
            )
    return out
