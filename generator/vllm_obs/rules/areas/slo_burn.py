"""SLO burn: a model spends an SLO's error budget too fast over a long and a short window (the
SRE workbook's multi-window, multi-burn-rate alerts, written as Pyrra and sloth write them).
docs/slo.md tells the design: why these tiers, floors and guards, and what makes one page."""

from __future__ import annotations

from ...exporter_series import PROBE, select
from ...promql import le_matcher, number, seconds, selector
from ...vocabulary import (
    BURN_TIERS,
    SCRAPE_HISTORY,
    SLO_WINDOWS,
    BurnTier,
    ModelClass,
    Slo,
    SloTarget,
    Vocabulary,
    by,
)
from ..declaration import LOAD_SYMPTOMS, Declared, Inhibition
from ..expressions import MODEL, burn_lookups, check_bucket_bound, listed, looked_up, minus, percent, sum_of
from ..model import Alert, Group, Recording
from ..runbook_kit import Section, placeholders
from ..scenarios.slo_burn import burn_cases

GROUP = "vllm-obs.slo-burn"
RECORDING_GROUP = "vllm-obs.slo"

# The canary's failures that a user's request would have met too (not a probe misconfigured:
# 4xx, an unusable body, DNS or TLS). A refused connection only where no planned restart explains
# it: the Service routes no user to a replica stopped or starting on purpose.
PROBE_FAILURES_USERS_MEET = "timeout|http_5xx"
PROBE_REFUSED = "refused"

# The alert of each SLO, by the SLO's name.
ALERTS = {
    "availability": "VllmAvailabilityBudgetBurn",
    "ttft": "VllmTimeToFirstTokenBudgetBurn",
    "itl": "VllmTimePerOutputTokenBudgetBurn",
}
# The per-replica warnings an SLO page explains for the whole model.
PER_REPLICA_SYMPTOMS = ("VllmHighTimeToFirstToken", "VllmHighTimePerOutputToken", "VllmRequestErrors")
# An SLO page silences the same model's per-replica latency and error warnings; an availability
# page also its latency pages (failed requests miss time to first token too).
_EXPLAINS = Inhibition(alerts=PER_REPLICA_SYMPTOMS, equal="model", matchers=('severity="critical"',))
# A burn page also silences the model's load warnings (queue, KV-cache pressure): it says users wait.
_LOAD = Inhibition(symptoms=(LOAD_SYMPTOMS,), equal="model", matchers=('severity="critical"',))
KNOBS = ("slo.min_bad_events", "slo.min_history", "slo.models", "paging.recovery_for")
FIRST_MOVES = [
    "One replica or all? `{worst}`: one replica far worse than the rest is a replica's fault "
    "(its own warning names the cause; take it out of rotation or restart it); all of them alike "
    "is the model, its configuration or its load.",
    "A rollout or configuration change in the last hour (`kubectl rollout history`, "
    "`changes({version_info}[1h])`)? Roll it back.",
    "Load above capacity (`{waiting}` growing on every replica, the KV cache full)? Scale out, or "
    "shed load at the gateway until replicas are added.",
    "VllmModelCapacityLow firing for the model too? It is the same incident (one page): bring the "
    "replicas back first.",
]


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        Declared(
            name="VllmAvailabilityBudgetBurn",
            knobs=("slo.availability_objective", "slo.inference_handlers", "slo.min_requests", *KNOBS),
            on=bool(v.holding("availability")) and _tells_failures(v),
            build=lambda v: _burn_rules(v, "availability"),
            panel="Availability error-budget burn",
            runbook=_runbook(
                v,
                "availability",
                Section(
                    meaning=(
                        "The model fails requests fast enough to exhaust its availability error budget "
                        "early. Bad requests: those vLLM finished with an error, 5xx answers of the "
                        "inference handlers (`slo.inference_handlers`), requests admission control "
                        "refused, and the canary's timeouts, 5xx and refused connections, counted as the "
                        "request a user would have sent (a connection refused by a replica whose log "
                        "showed a planned stop or restart within the rate window is not); good: requests "
                        "that finished `stop` or `length`. A client that gave up (`abort`) counts as "
                        "neither. " + _tiers_words(v, "availability")
                    ),
                    confirm=[
                        "Which replica fails: `{failures}` (vLLM's errors or HTTP 5xx, the larger)",
                        "Is capacity gone? VllmModelCapacityLow, and the canary's failures by reason",
                    ],
                    act=[
                        "If replicas are down, dead or hung, follow VllmModelCapacityLow.",
                        "Otherwise read the traceback of the first failed request in a failing replica's "
                        "log (VllmRequestErrors); roll back a recent rollout or configuration change.",
                    ],
                ),
                worst="topk(5, {failures})",
            ),
            scenarios=burn_cases("availability"),
            inhibits=(
                _EXPLAINS,
                _LOAD,
                Inhibition(
                    alerts=("VllmTimeToFirstTokenBudgetBurn", "VllmTimePerOutputTokenBudgetBurn"),
                    equal="model",
                    matchers=('severity="critical"',),
                ),
            ),
        ),
        Declared(
            name="VllmTimeToFirstTokenBudgetBurn",
            knobs=("slo.ttft_threshold_seconds", "slo.ttft_objective", "slo.min_requests", *KNOBS),
            on=bool(v.holding("ttft")),
            build=lambda v: _burn_rules(v, "ttft"),
            needs=("time_to_first_token",),
            panel="TTFT error-budget burn",
            runbook=_runbook(
                v,
                "ttft",
                Section(
                    meaning=(
                        "The model misses its time-to-first-token SLO (the share of requests whose "
                        "first token came within the threshold) fast enough to exhaust the error "
                        "budget early. A request that failed counts as a miss (it never got its first "
                        "token); the canary's own requests count not at all. An availability page of "
                        "the same model silences it. " + _tiers_words(v, "ttft")
                    ),
                    confirm=["Which replica: the p95 time to first token per instance, `{ttft_p95}`"],
                    act=["Find the slow replicas and follow VllmHighTimeToFirstToken."],
                ),
                worst="topk(5, {ttft_p95})",
            ),
            scenarios=burn_cases("ttft"),
            inhibits=(_EXPLAINS, _LOAD),
        ),
        Declared(
            name="VllmTimePerOutputTokenBudgetBurn",
            knobs=("slo.itl_threshold_seconds", "slo.itl_objective", "slo.min_tokens", *KNOBS),
            on=bool(v.holding("itl")),
            build=lambda v: _burn_rules(v, "itl"),
            needs=("inter_token_latency",),
            panel="TPOT error-budget burn",
            runbook=_runbook(
                v,
                "itl",
                Section(
                    meaning=(
                        "The model misses its inter-token latency SLO: the share of output tokens that "
                        "must arrive within the threshold of the previous one (vLLM's "
                        "`inter_token_latency_seconds` observes every gap between two tokens, so this SLO "
                        "weighs tokens, not requests, and a failed request is not in it: the availability "
                        "SLO counts it). A pooling model (embeddings) produces no tokens and has none. "
                        + _tiers_words(v, "itl")
                    ),
                    confirm=["Per replica: `{itl_p95}`"],
                    act=["Find the slow replicas and follow VllmHighTimePerOutputToken."],
                ),
                worst="topk(5, {itl_p95})",
            ),
            scenarios=burn_cases("itl"),
            inhibits=(_EXPLAINS, _LOAD),
        ),
    ]


def warnings(v: Vocabulary) -> list[str]:
    if v.holding("availability") and not _tells_failures(v):
        return [
            f"{v.res.source.origin} counts no failed request (vLLM's own count is 0.13+; or admission "
            "control's, or HTTP metrics) and prometheus.probes is empty: skipped "
            f"{ALERTS['availability']}, and time to first token misses no failed request; add a canary "
            "probe (prometheus.probes) to judge them."
        ]
    return []


def _tells_failures(v: Vocabulary) -> bool:
    """Something counts a failed request: the source, or the canary probe. Without either the
    availability SLO's misses read 0 whatever happens, and its alert could never fire."""
    return v.counts_failures or bool(v.cfg.prometheus.probes)


def _runbook(v: Vocabulary, name: str, section: Section, worst: str) -> Section:
    """The section with the queries that reproduce a page and the first five minutes' moves."""
    slo = v.slo(name)
    if slo is None or not v.holding(name):
        return section
    target = v.holding(name)[0][1]
    paging = [burn_lookups(v, target, t) for t in BURN_TIERS if t.paging]

    def shown(query: str) -> str:  # for one model, braces kept through the runbook's format()
        return "`" + query.replace(MODEL, 'model_name="MODEL"').replace("{", "{{").replace("}", "}}") + "`"

    factors = ", ".join(f"{t.long}/{t.short} above {number(t.factor)}x" for t in BURN_TIERS if t.paging)
    why = [
        f"Each paging window's burn, the page's numbers (a tier fires when both its windows exceed its "
        f"factor: {factors}): " + ", ".join(shown(q[w]) for q in paging for w in ("long", "short")),
        f"The {slo.events} a second it judged over the hour: {shown(paging[0]['rate'])}",
    ]
    if "worst" in paging[0]:
        why.append(f"The worst replicas now: {shown(paging[0]['worst'])}")
    why.append(
        f"The hour's bad and all {slo.events}, as the floors count them: "
        f"{shown(slo.bad_in('1h'))}, {shown(slo.events_in('1h'))}"
    )
    if v.cfg.slo.min_history > 0:
        young = ", ".join(
            f"{shown(_held(v, t.long))} under {number(seconds(t.long) * v.cfg.slo.min_history)}"
            for t in BURN_TIERS
            if t.paging
        )
        why.append(
            "The seconds of each paging window Prometheus has held; a young stack's, under these, "
            f"reads the rest of the window as good traffic and counts the bad {slo.events} it saw: {young}"
        )
    worst = worst.format(**placeholders(v))
    return Section(section.meaning, section.confirm, section.act, {"worst": worst}, why, FIRST_MOVES)


def _tiers_words(v: Vocabulary, name: str) -> str:
    """The runbooks' word on the tiers, their floors and the guards."""
    slo = v.slo(name)
    if slo is None:
        return ""  # no such SLO on this source: the alert is skipped
    floor = {"slo.min_requests": v.cfg.slo.min_requests, "slo.min_tokens": v.cfg.slo.min_tokens}[slo.floor]
    targets = ", ".join(
        f"{c.name}: {percent(t.objective)}"
        for c, t in v.holding(name)
        if c.name != "default" or len(v.classes) > 1
    )
    return (
        "`long`/`short` name the two windows that both burn; 1h/5m and 6h/30m page, 1d/2h and 3d/6h "
        f"warn (docs/slo.md). A tier judges a model only with `{slo.floor}` ({number(floor)}) {slo.events} "
        f"and `slo.min_bad_events` ({number(v.cfg.slo.min_bad_events)}) bad ones in its long window. A "
        f"Prometheus that has held less than `slo.min_history` ({percent(v.cfg.slo.min_history)}) of the "
        "window counts the part it has not seen as good traffic and its bad events as seen."
        + (f" Objectives per model ({targets})." if targets else "")
    )


def _burn_rules(v: Vocabulary, name: str) -> list[Alert]:
    slo = v.slo(name)
    assert slo is not None  # the assembler builds an alert only when its SLO is there
    return [_tier(v, slo, cls, target, tier) for cls, target in v.holding(name) for tier in BURN_TIERS]


def limit(target: SloTarget, tier: BurnTier) -> str:
    """The miss ratio at which a tier's windows burn: its burn rate of the SLO's budget."""
    return f"({number(tier.factor)} * {number(target.budget)})"


def _description(v: Vocabulary, target: SloTarget, tier: BurnTier) -> str:
    """The page's current numbers, queried when it notifies: each window's burn, the traffic
    judged and the worst replicas now (not `$value`, the long window when it began)."""
    slo, q = target.slo, burn_lookups(v, target, tier)
    burn = ' | printf "%.1f"'
    worst = ""
    if "worst" in q:  # availability reads the per-replica failure ratio, over the alerts' rate window
        window = v.cfg.alerts.rate_window if slo.name == "availability" else SLO_WINDOWS[0]
        worst = listed(v, q["worst"], v.scope.replica, "value", before=f"; worst replicas over {window}: ")
    return (
        f"Model {{{{ $labels.model_name }}}} (job {{{{ $labels.job }}}}{v.scope.in_cluster}) is burning its "
        f"{slo.what} error budget {looked_up(v, q['long'], burn)}x over {tier.long} and "
        f"{looked_up(v, q['short'], burn)}x over {tier.short} (this tier fires above {number(tier.factor)}x "
        f"the {target.budget:.2%} of misses its {percent(target.objective)} objective allows), on "
        f"{looked_up(v, q['rate'], ' | humanize')} {slo.events} a second over {tier.long}{worst}."
    )


def _cluster(v: Vocabulary) -> str:
    return by(tuple(label for label, var in v.scope.partitions if var == "cluster"))


def _held(v: Vocabulary, window: str) -> str:
    """Seconds of `window` Prometheus has held (per cluster): one value however many rulers or
    replicas record the history."""
    cluster = _cluster(v)
    held = f"time() - min_over_time({SCRAPE_HISTORY}[{window}])"
    return f"max by ({cluster}) ({held})" if cluster else f"max({held})"


def _tier(v: Vocabulary, slo: Slo, cls: ModelClass, target: SloTarget, tier: BurnTier) -> Alert:
    fleet, c = by(v.scope.fleet_model), v.cfg.slo
    floor = {"slo.min_requests": c.min_requests, "slo.min_tokens": c.min_tokens}[slo.floor]
    expr = (
        f"{slo.miss(tier.long)}{cls.selector} > {limit(target, tier)}\n"
        f"and on ({fleet}) {slo.miss(tier.short)} > {limit(target, tier)}\n"
        # Too few events, or too few bad ones, to judge: two failures of a quiet model page nobody.
        f"and on ({fleet}) {slo.events_in(tier.long)} >= {number(floor)}\n"
        f"and on ({fleet}) {slo.bad_in(tier.long)} >= {number(c.min_bad_events)}"
    )
    if c.min_history > 0:
        # A Prometheus that has scraped for minutes reads them, not the window: the part it has not
        # seen counts as good traffic, and the bad events it saw are counted, not extrapolated.
        held = f"on ({_cluster(v)}) group_left () {_held(v, tier.long)}"
        share = f"({number(c.min_history)} * {int(seconds(tier.long))})"
        bad_rate = f"avg_over_time({slo.bad_rate}[{tier.long}])"
        expr += (
            f"\nunless on ({fleet}) {slo.miss(tier.long)} * {held} / {share} <= {limit(target, tier)}"
            f"\nunless on ({fleet}) {bad_rate} * {held} < {number(c.min_bad_events)}"
        )
    return Alert(
        name=ALERTS[slo.name],
        expr=expr,
        for_=tier.for_,
        keep_firing_for=v.cfg.paging.recovery_for if tier.paging else None,
        severity=tier.severity,
        labels={"long": tier.long, "short": tier.short},
        summary=f"vLLM is burning its {slo.what} error budget too fast.",
        description=_description(v, target, tier),
        dashboard="overview",
    )


# -- recording rules: each model's events, then its miss ratio over every window -------------


def recording_groups(v: Vocabulary) -> list[Group]:
    """Per SLO one group: bad and all events per second over the shortest window (per model class), then
    the miss ratio over each window from those, never a raw rate over days. Availability's group comes
    first (TTFT counts failures as misses), after the tiers' guard: how long Prometheus has scraped."""
    availability = v.slo("availability")
    groups = []
    if v.cfg.slo.min_history > 0 and v.slos:
        cluster = _cluster(v)
        history = f"max by ({cluster}) (timestamp(up))" if cluster else "max(timestamp(up))"
        groups.append(Group(f"{RECORDING_GROUP}-history", (Recording(SCRAPE_HISTORY, history),)))
    for slo in v.slos:
        held = v.holding(slo.name)
        if not held or (slo is availability and not _tells_failures(v)):
            continue
        if slo is availability:
            events = _per_class(v, held, _availability_bad, availability.bad_rate)
            events += _per_class(v, held, _availability_total, availability.total_rate)
        else:
            events = _per_class(v, held, _latency_total, slo.total_rate)
            events += _per_class(v, held, _latency_bad, slo.bad_rate)
        windows = [Recording(slo.miss(w), _miss(slo, w)) for w in SLO_WINDOWS]
        groups.append(Group(f"{RECORDING_GROUP}-{slo.name}", (*events, *windows)))
    return groups


def _per_class(v: Vocabulary, held, build, record: str) -> list[Recording]:
    """One recording of `record`: each class's expression (classes never overlap)."""
    parts = [build(v, cls, target) for cls, target in held]
    expr = parts[0] if len(parts) == 1 else "\nor\n".join(f"(\n{p}\n)" for p in parts)
    return [Recording(record, expr)]


def _per_model_of_probe(v: Vocabulary, rates: str) -> str:
    """Probe series' rates per model, under the vLLM job (the probe's series carry its own)."""
    keep = by((*(label for label, _ in v.targets.partitions), "model_name"))
    summed = f"sum by ({keep}) ({rates})"
    return f'label_replace({summed}, "job", "{v.cfg.prometheus.vllm_job}", "", "")'


def _availability_bad(v: Vocabulary, cls: ModelClass, _: SloTarget) -> str:
    """Requests that failed (vLLM's count, refused at admission, or 5xx on the inference
    handlers: the per-replica recording keeps the larger) and the canary's failures, counted as
    the traffic a user would have sent; 0, not nothing, where a model served and none failed."""
    fleet, w, m = by(v.targets.fleet_model), SLO_WINDOWS[0], cls.matchers
    parts = []
    if v.counts_failures:
        parts.append(f"sum by ({fleet}) ({selector(v.names.requests_failing, *m)})")
    if v.cfg.prometheus.probes:
        failed = select(PROBE, "vllm_probe_failures", v.probe, *m, reason=f"~{PROBE_FAILURES_USERS_MEET}")
        refused = f"rate({select(PROBE, 'vllm_probe_failures', v.probe, *m, reason=PROBE_REFUSED)}[{w}])"
        if v.cfg.prometheus.log_exporters:
            # Refused while the log showed a planned stop or restart at any time in the window.
            refused = (
                f"({refused}\nunless on ({by(v.targets.target)})\n"
                f"max_over_time({v.names.restart_planned}[{w}]) == 1)"
            )
        parts.append(_per_model_of_probe(v, f"rate({failed}[{w}])\nor\n{refused}"))
    bad = sum_of(parts, fleet) if len(parts) > 1 else parts[0]
    return f"{bad}\nor\nsum by ({fleet}) ({selector(v.names.requests_good, *m)}) * 0"


def _availability_total(v: Vocabulary, cls: ModelClass, _: SloTarget) -> str:
    fleet, m = by(v.targets.fleet_model), cls.matchers
    availability = v.slo("availability")
    assert availability is not None
    good = f"sum by ({fleet}) ({selector(v.names.requests_good, *m)})"
    return sum_of([good, selector(availability.bad_rate, *m)], fleet)


def _latency_total(v: Vocabulary, cls: ModelClass, target: SloTarget) -> str:
    """A latency SLO's events: its histogram's observations (the canary's one-token answers left
    out); for time to first token also each failed request, a miss that was never observed."""
    slo, fleet, w, m = target.slo, by(v.targets.fleet_model), SLO_WINDOWS[0], cls.matchers
    assert slo.signal is not None
    sig = v.res[slo.signal]
    observed = f"sum by ({fleet}) (rate({selector(sig.count, v.vllm, *m)}[{w}]))"
    if slo.name == "ttft" and v.cfg.prometheus.probes:
        answered = select(PROBE, "vllm_probe_duration_seconds_count", v.probe, *m)
        observed = minus(observed, _per_model_of_probe(v, f"rate({answered}[{w}])"), fleet)
    availability = v.slo("availability")
    if slo.name != "ttft" or availability is None or not v.holding("availability") or not _tells_failures(v):
        return observed
    return sum_of([observed, selector(availability.bad_rate, *m)], fleet)


def _latency_bad(v: Vocabulary, cls: ModelClass, target: SloTarget) -> str:
    """The events over the threshold: all of them less those observed within it."""
    slo, fleet, w, m = target.slo, by(v.targets.fleet_model), SLO_WINDOWS[0], cls.matchers
    assert slo.signal is not None and target.threshold is not None and target.setting is not None
    sig = v.res[slo.signal]
    check_bucket_bound(target.setting, sig.buckets, target.threshold, v.res.source.origin)
    good = f"sum by ({fleet}) (rate({selector(sig.bucket, v.vllm, *m, le_matcher(target.threshold))}[{w}]))"
    if slo.name == "ttft" and v.cfg.prometheus.probes:
        probe = PROBE["vllm_probe_duration_seconds"]
        if target.threshold in probe.buckets:
            within = select(
                PROBE, "vllm_probe_duration_seconds_bucket", v.probe, *m, le_matcher(target.threshold)
            )
        else:
            within = select(PROBE, "vllm_probe_duration_seconds_count", v.probe, *m)
        good = minus(good, _per_model_of_probe(v, f"rate({within}[{w}])"), fleet)
    total = selector(slo.total_rate, *m)
    return f"clamp_min({total} - on ({fleet}) ({good}), 0)\nor\n{total}"


def _miss(slo: Slo, window: str) -> str:
    if window == SLO_WINDOWS[0]:
        return f"{slo.bad_rate}\n/\n({slo.total_rate} > 0)"
    return f"avg_over_time({slo.bad_rate}[{window}])\n/\n(avg_over_time({slo.total_rate}[{window}]) > 0)"
