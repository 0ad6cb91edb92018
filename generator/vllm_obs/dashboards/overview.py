"""Overview: fleet health at a glance, every replica in one table, latency and its distribution."""

from __future__ import annotations

from ..config import BundleConfig
from ..promql import number
from ..rules.expressions import queue_threshold
from ..signals import Resolution
from ..vocabulary import BURN_TIERS, DASHBOARDS, HISTOGRAMS, Names, Slo, Vocabulary
from .panels.common import (
    CRIT,
    FLEET_LINES,
    LEGEND,
    QUEUE_LINES,
    WARN,
    error_panel,
    fleet_queries,
    heatmap,
    keep,
    latency_panel,
    queue_queries,
    stat,
)
from .panels.queries import Filters
from .panels.replicas import replicas_table
from .spec import Dashboard, Panel, Query, Row

# The burn factors of the multi-window alerts, slowest first, each with its colour on the burn panels.
BURN_COLOURS = ("yellow", WARN, CRIT, "dark-red")
BURN_FACTORS = tuple(zip(sorted(t.factor for t in BURN_TIERS), BURN_COLOURS, strict=True))
# Histograms whose per-model bucket rate the rules record: their distributions are drawn from it.
PER_MODEL_BUCKETS = {h.key for h in HISTOGRAMS if h.fleet}


def overview(v: Vocabulary) -> Dashboard:
    res, cfg = v.res, v.cfg
    f = Filters(v, engine=False, fleet=True)
    n = f.names
    a = cfg.alerts
    return Dashboard(
        key="overview",
        title=DASHBOARDS["overview"],
        description=(
            "Fleet health: targets, traffic, latency percentiles and distributions, SLOs, queue, "
            "KV cache, preemptions, errors, and every replica in one table."
        ),
        rows=(
            Row("Fleet", _fleet(res, cfg, f, n)),
            Row("Replicas", keep(replicas_table(res, cfg, f))),
            Row("Latency", _latency(res, cfg, f)),
            Row("Error budget", _burn(res, cfg, f)),
            Row("Load and saturation", _load(res, cfg, f, n, a)),
        ),
        variables=f.variables(),
        annotations=(f.alert_annotation(),),
    )


def _fleet(res: Resolution, cfg: BundleConfig, f: Filters, n: Names) -> tuple[Panel, ...]:
    a = cfg.alerts
    out = [
        stat(
            "Targets up",
            "vLLM API servers answering Prometheus' scrapes. A dead engine takes its server down.",
            "none",
            f"sum(up{f.target})",
            base_color=CRIT,
            thresholds=((1, "green"),),
        ),
        stat(
            "Targets down",
            "vLLM API servers Prometheus cannot scrape (VllmTargetDown), 0 when all answer.",
            "none",
            f"count(up{f.target} == 0) or vector(0)",
            thresholds=((1, CRIT),),
        ),
    ]
    out.append(
        Panel(
            title="Ready replicas per model",
            description=(
                "Replicas ready (scraped, engine alive, canary answering; restarted on purpose counts as "
                "ready) and expected (kube-state-metrics' desired replicas, paging.expected_replicas, or the "
                "most ready within paging.expected_window). Below the dashed floor, or below "
                "paging.capacity_fraction of those expected, the model pages (VllmModelCapacityLow)."
            ),
            unit="none",
            queries=(
                Query(f"{n.replicas_ready}{f.model}", "ready {{model_name}}"),
                Query(f"{n.replicas_expected}{f.model}", "expected {{model_name}}"),
            ),
            thresholds=((cfg.paging.min_ready_replicas, CRIT),),
            min=0,
            width=8,
        )
    )
    if "requests_running" in res.signals:
        sig = res["requests_running"]
        out.append(
            stat(
                "Engines reporting",
                "Engine cores (data-parallel ranks count one each) whose series Prometheus has: a target "
                "that answers scrapes without them is VllmMetricsAbsent.",
                "none",
                f"count({sig.name}{f.raw(sig)}) or vector(0)",
                base_color=CRIT,
                thresholds=((1, "green"),),
            )
        )
    out.append(
        stat(
            "Requests / s",
            "Finished requests per second, all models selected (the canary probe's left out).",
            "reqps",
            f"sum({n.fleet_requests_finished}{f.model})",
        )
    )
    for key, rule, title in (
        ("prompt_tokens", n.fleet_prompt_tokens, "Prompt tokens / s"),
        ("generation_tokens", n.fleet_generation_tokens, "Generated tokens / s"),
    ):
        if key in res.signals:
            out.append(
                stat(title, f"{title[:-4]} per second, all models selected.", "none", f"sum({rule}{f.model})")
            )
    if res.has("requests_waiting", "requests_running"):
        out += [
            stat(
                "Running",
                "Requests in the engines' batches now, all replicas selected.",
                "none",
                f"sum({n.requests_running}{f.replica})",
            ),
            stat(
                "Waiting",
                f"Requests queued now, all replicas selected; a replica above {queue_threshold(a)[0]:g} "
                "for long warns (VllmQueueDepthHigh).",
                "none",
                f"sum({n.requests_waiting}{f.replica})",
            ),
        ]
    if "kv_cache_usage" in res.signals:
        out.append(
            stat(
                "KV cache (fullest engine)",
                "KV-cache usage of the fullest engine selected: it is the one that preempts. "
                "Orange: the VllmKVCachePressure threshold.",
                "percentunit",
                f"max({n.kv_cache_usage}{f.replica})",
                thresholds=((a.kv_usage_threshold, WARN),),
                min=0,
                max=1,
            )
        )
    if "preemptions" in res.signals:
        out.append(
            stat(
                "Preemptions / s",
                "Running requests evicted for lack of KV-cache blocks, per second: any sustained value costs "
                "recomputation.",
                "none",
                f"sum({n.preemptions}{f.replica})",
                thresholds=((0.001, WARN),),
            )
        )
    if res.has("prefix_cache_hits", "prefix_cache_queries"):
        out.append(
            stat(
                "Prefix-cache hit rate",
                "Share of prompt tokens served from the prefix cache, all replicas selected.",
                "percentunit",
                f.ratio(res["prefix_cache_hits"], res["prefix_cache_queries"], "job"),
                min=0,
                max=1,
            )
        )
    for key, label, warn in (
        ("time_to_first_token", "TTFT", a.ttft_p95_warning_seconds),
        ("inter_token_latency", "Inter-token latency", a.itl_p95_warning_seconds),
        ("e2e_request_latency", "End-to-end latency", None),
    ):
        if key in res.signals:
            out.append(
                stat(
                    f"{label} p95 (worst model)",
                    f"p95 over {a.rate_window} of the slowest model selected"
                    + (": orange is the warning alert threshold." if warn else "."),
                    "s",
                    f"max({n.quantile(key, 'p95', 'job_model')}{f.model})",
                    thresholds=((warn, WARN),) if warn else (),
                )
            )
    for slo in f.v.slos:
        good = f"within {slo.threshold:g}s" if slo.threshold is not None else "that succeeded"
        out.append(
            stat(
                f"{slo.label} SLO attainment (1d)",
                f"Share of {slo.events} {good} over the last day; the objective is {slo.objective:.2%}.",
                "percentunit",
                f"1 - max({slo.miss('1d')}{f.model})",
                base_color=CRIT,
                thresholds=((slo.objective, "green"),),
                min=0,
                max=1,
            )
        )
    return tuple(out)


def _latency(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    a = cfg.alerts
    out: list[Panel | None] = []
    for key, title, what, warn, crit in (
        (
            "time_to_first_token",
            "Time to first token",
            "times to first token",
            a.ttft_p95_warning_seconds,
            None,
        ),
        (
            "inter_token_latency",
            "Inter-token latency",
            "gaps between output tokens",
            a.itl_p95_warning_seconds,
            None,
        ),
        ("e2e_request_latency", "End-to-end request latency", "request durations", None, None),
        ("request_queue_time", "Queue time", "times spent waiting for a slot", None, None),
        (
            "request_time_per_output_token",
            "Time per output token, per request",
            "requests' token gaps",
            None,
            None,
        ),
    ):
        if key not in res.signals:
            continue
        out.append(latency_panel(f, key, title, "{{model_name}}", warn, crit, per_model=True))
        if key in PER_MODEL_BUCKETS:
            out.append(heatmap(f, res[key], f"{title} distribution", what, "s", recorded=True))
    return keep(*out)


def _burn(res: Resolution, cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    pages = " and ".join(number(t.factor) for t in BURN_TIERS if t.severity == "critical")
    warns = " and ".join(number(t.factor) for t in BURN_TIERS if t.severity == "warning")
    out = []
    for slo in f.v.slos:
        out.append(
            Panel(
                title=f"{slo.label} error-budget burn",
                description=(
                    f"How fast each model spends its {slo.label} error budget ({slo.budget:.2%} of "
                    f"{slo.events} may miss): the miss ratio over each window divided by the budget. 1 spends "
                    "it exactly in the SLO period; the dashed lines are the burn factors of the budget-burn "
                    f"alerts ({pages} page, {warns} warn, each with a short window)."
                ),
                unit="none",
                queries=tuple(
                    Query(_per_class(f, slo, t.long), f"{t.long} {{{{model_name}}}}") for t in BURN_TIERS
                ),
                thresholds=BURN_FACTORS,
                min=0,
            )
        )
    return tuple(out)


def _per_class(f: Filters, slo: Slo, window: str) -> str:
    """The miss ratio over `window` as a multiple of each model's budget (slo.models' own)."""
    parts = [
        f"{slo.miss(window)}{{{', '.join((*cls.matchers, f.model[1:-1]))}}} / {target.budget:g}"
        for cls, target in f.v.holding(slo.name)
    ]
    return parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)


def _load(res: Resolution, cfg: BundleConfig, f: Filters, n: Names, a) -> tuple[Panel, ...]:
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
    if "request_success" in res.signals:
        sig = res["request_success"]
        load.append(
            Panel(
                title="Finished requests by reason",
                description=(
                    "stop and length are normal endings (a rising share of length is truncation); abort is "
                    "a client that went away; error failed."
                ),
                unit="reqps",
                queries=(
                    Query(f.rate(sig, "model_name, finished_reason"), "{{finished_reason}} {{model_name}}"),
                ),
                stack=True,
                min=0,
            )
        )
    if res.has("requests_waiting", "requests_running"):
        load.append(
            Panel(
                title="Requests running and waiting",
                description=(
                    f"Per replica. Dashed line: the queue alert threshold ({queue_threshold(a)[0]:g}). "
                    f"{QUEUE_LINES} Click a line to open that replica."
                ),
                unit="none",
                queries=queue_queries(f),
                thresholds=((queue_threshold(a)[0], WARN),),
                min=0,
                drill="instance",
            )
        )
    if "kv_cache_usage" in res.signals:
        load.append(
            Panel(
                title="KV-cache usage",
                description=(
                    "The fullest engine of each replica (max, never a sum). Dashed: the alert threshold. "
                    f"{FLEET_LINES} Click a line to open that replica's KV cache."
                ),
                unit="percentunit",
                queries=fleet_queries(f, f"{n.kv_cache_usage}{f.replica}", LEGEND),
                thresholds=((a.kv_usage_threshold, CRIT),),
                min=0,
                max=1,
                drill="kv_cache",
            )
        )
    if "preemptions" in res.signals:
        load.append(
            Panel(
                title="Preemptions per finished request",
                description=(
                    "Requests preempted for lack of KV cache, per finished request. Dashed: the alert "
                    f"threshold. {FLEET_LINES}"
                ),
                unit="none",
                queries=fleet_queries(f, f"{n.preemptions_per_request}{f.replica}", LEGEND),
                thresholds=((a.preemptions_per_request, WARN),),
                min=0,
                drill="kv_cache",
            )
        )
    load += keep(error_panel(f, f.replica, f.recorded_target))
    return tuple(load)
