"""SLO burn: a model spends its latency error budget too fast, over a long and a short window
(the multi-window, multi-burn-rate alerts of the SRE workbook and kubernetes-mixin)."""

from __future__ import annotations

import re

from ...config import BundleConfig
from ...exporter_series import PROBE, select
from ...promql import bucket_text, le_matcher, number, seconds, selector
from ...vocabulary import BURN_TIERS, SLO_WINDOWS, BurnTier, Slo, Vocabulary, by, requests_in
from ..declaration import Declared, Inhibition
from ..expressions import check_bucket_bound, minus, percent, sum_of
from ..model import Alert, Group, Recording
from ..runbook_kit import Section
from ..scenario_kit import REPLICA, Builder, Case, Check, Expect, Inputs, QueryCheck, minutes, series_text

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
# One page per incident: an SLO page silences the same model's per-replica latency and error
# warnings; an availability page also its latency pages (failed requests miss those SLOs too).
_EXPLAINS = Inhibition(alerts=PER_REPLICA_SYMPTOMS, equal="model", matchers=('severity="critical"',))


def declarations(v: Vocabulary) -> list[Declared]:
    knobs = ("slo.min_requests", "paging.recovery_for")
    return [
        Declared(
            name="VllmAvailabilityBudgetBurn",
            knobs=("slo.availability_objective", "slo.inference_handlers", *knobs),
            on=v.slo("availability") is not None and _tells_failures(v),
            build=lambda v: _burn_rules(v, v.slo("availability")),
            panel="Availability error-budget burn",
            runbook=_with_values(
                Section(
                    meaning=(
                        "The model fails requests fast enough to exhaust its availability error budget "
                        "early. Bad requests: those vLLM finished with an error, 5xx answers of the "
                        "inference handlers (`slo.inference_handlers`), requests admission control "
                        "refused, and the canary's timeouts, 5xx and refused connections, counted as the "
                        "request a user would have sent (a connection refused by a replica whose log "
                        "showed a planned stop or restart within the rate window is not: no user is "
                        "routed there); good: requests that finished `stop` or `length` "
                        "(a pooling request finishes `stop`). A client that gave up (`abort`) counts as "
                        "neither. What no counter sees: a request aborted before its first token is "
                        "neither good nor bad, and a server that refuses connections records nothing, "
                        "which is why the canary's failures count. `long`/`short` name the two windows "
                        "that both burn; 1h/5m and 6h/30m page, 1d/2h and 3d/6h warn. A window judges "
                        "only once it saw `slo.min_requests` requests. " + _held(v)
                    ),
                    confirm=[
                        "Miss ratio per window: `{availability_burn}`",
                        "Which replica fails: `{failures}` (vLLM's errors or HTTP 5xx, the larger)",
                        "Is capacity gone? VllmModelCapacityLow, and the canary's failures by reason",
                    ],
                    act=[
                        "If replicas are down, dead or hung, follow VllmModelCapacityLow.",
                        "Otherwise read the traceback of the first failed request in a failing replica's "
                        "log (VllmRequestErrors); roll back a recent rollout or configuration change.",
                    ],
                ),
                availability_burn=_slo_miss(v, "availability", "1h"),
            ),
            scenarios=_burn_cases("availability"),
            inhibits=(
                _EXPLAINS,
                Inhibition(
                    alerts=("VllmTimeToFirstTokenBudgetBurn", "VllmTimePerOutputTokenBudgetBurn"),
                    equal="model",
                    matchers=('severity="critical"',),
                ),
            ),
        ),
        Declared(
            name="VllmTimeToFirstTokenBudgetBurn",
            knobs=("slo.ttft_threshold_seconds", "slo.ttft_objective", *knobs),
            build=lambda v: _burn_rules(v, v.slo("ttft")),
            needs=("time_to_first_token",),
            panel="TTFT error-budget burn",
            runbook=_with_values(
                Section(
                    meaning=(
                        "The model misses its time-to-first-token SLO (the configured share of requests "
                        "whose first token came within the threshold) fast enough to exhaust the error "
                        "budget early. A request that failed counts as a miss (it never got its first "
                        "token), so an outage keeps this burning instead of going quiet; the canary's "
                        "own requests count not at all. Multi-window, multi-burn-rate: `long`/`short` "
                        "name the two windows that both burn; 1h/5m and 6h/30m page, 1d/2h and 3d/6h "
                        "warn. An availability page of the same model silences it. " + _held(v)
                    ),
                    confirm=[
                        "Miss ratio per window: `{ttft_burn}`",
                        "Which replica: the p95 time to first token per instance, `{ttft_p95}`",
                    ],
                    act=["Find the slow replicas and follow VllmHighTimeToFirstToken."],
                ),
                ttft_burn=_slo_miss(v, "ttft", "1h"),
            ),
            scenarios=_burn_cases("ttft"),
            inhibits=(_EXPLAINS,),
        ),
        Declared(
            name="VllmTimePerOutputTokenBudgetBurn",
            knobs=("slo.itl_threshold_seconds", "slo.itl_objective", *knobs),
            build=lambda v: _burn_rules(v, v.slo("itl")),
            needs=("inter_token_latency",),
            panel="TPOT error-budget burn",
            runbook=_with_values(
                Section(
                    meaning=(
                        "The model misses its inter-token latency SLO: the configured share of output "
                        "tokens must arrive within the threshold of the previous one (vLLM's "
                        "`inter_token_latency_seconds` histogram observes every gap between two tokens, "
                        "so this SLI weighs tokens, not requests). A failed request counts as one missed "
                        "gap, so an outage keeps it burning. `long`/`short` name the burning windows. "
                        + _held(v)
                    ),
                    confirm=["Miss ratio per window: `{itl_burn}`", "Per replica: `{itl_p95}`"],
                    act=["Find the slow replicas and follow VllmHighTimePerOutputToken."],
                ),
                itl_burn=_slo_miss(v, "itl", "1h"),
            ),
            scenarios=_burn_cases("itl"),
            inhibits=(_EXPLAINS,),
        ),
    ]


def warnings(v: Vocabulary) -> list[str]:
    if v.slo("availability") is not None and not _tells_failures(v):
        return [
            f"{v.res.source.origin} counts no failed request (vLLM's own count is 0.13+; or admission "
            "control's, or HTTP metrics) and prometheus.probes is empty: skipped "
            f"{ALERTS['availability']}, and the latency SLOs miss no failed request; add a canary probe "
            "(prometheus.probes) to judge them."
        ]
    return []


def _tells_failures(v: Vocabulary) -> bool:
    """Something counts a failed request: the source, or the canary probe. Without either the
    availability SLO's misses read 0 whatever happens, and its alert could never fire."""
    return v.counts_failures or bool(v.cfg.prometheus.probes)


def _slo_miss(v: Vocabulary, name: str, window: str) -> str:
    slo = v.slo(name)
    return slo.miss(window) if slo is not None else f"(no {name} SLO in this bundle)"


def _with_values(section: Section, **values: str) -> Section:
    return Section(section.meaning, section.confirm, section.act, values)


def _burn_rules(v: Vocabulary, slo: Slo | None) -> list[Alert]:
    assert slo is not None  # the assembler builds an alert only when its SLO is there
    sc = v.targets
    fleet = by(sc.fleet_model)
    out = []
    name = ALERTS[slo.name]
    for tier in BURN_TIERS:
        limit = _limit(slo, tier)
        paging = tier.severity == "critical"
        long = f"{slo.miss(tier.long)} > {limit}"
        if paging:
            long = _long_or_paging(name, tier, slo.miss(tier.long), fleet, limit)
        out.append(
            Alert(
                name=name,
                expr=(
                    f"{long}\n"
                    f"and on ({fleet})\n{slo.miss(tier.short)} > {limit}\n"
                    # Too few requests to judge: one slow request on a quiet model pages nobody.
                    f"and on ({fleet})\n{requests_in(tier.long)} >= {number(v.cfg.slo.min_requests)}"
                    + (_after_faster(v, slo, tier, fleet) + _capacity_hold(v, slo, tier) if paging else "")
                ),
                for_=tier.for_,
                severity=tier.severity,
                labels={"long": tier.long, "short": tier.short},
                summary=f"vLLM is burning its {slo.what} error budget too fast.",
                description=(
                    f"Model {{{{ $labels.model_name }}}} (job {{{{ $labels.job }}}}{sc.in_cluster}) misses its {slo.what} "
                    f"SLO on {{{{ $value | humanizePercentage }}}} of its {slo.events} over {tier.long}, "
                    f"{number(tier.factor)}x the rate its {percent(slo.objective)} objective allows."
                ),
                dashboard="overview",
            )
        )
    return out


def _limit(slo: Slo, tier: BurnTier) -> str:
    """The miss ratio at which a tier's windows burn: its burn rate of the SLO's budget."""
    return f"({number(tier.factor)} * {number(slo.budget)})"


def _firing(tier: BurnTier, *names: str) -> str:
    """The tier's pages of these alerts, as Prometheus records them while they fire."""
    matcher = f'alertname="{names[0]}"' if len(names) == 1 else f'alertname=~"{"|".join(names)}"'
    return selector("ALERTS", matcher, 'alertstate="firing"', f'long="{tier.long}"', f'short="{tier.short}"')


def _long_or_paging(name: str, tier: BurnTier, long: str, fleet: str, limit: str) -> str:
    """A paging tier's long window burns, or the tier already pages: once it fires, the page
    stays open while the short window still burns. The long window letting go of an earlier
    burst (one the model recovered from before this one began) would otherwise resolve a page
    whose incident goes on, and the same incident would page again once it alone filled the
    long window. The long window's ratio either way: it is the page's $value."""
    return f"(\n  {long} > {limit}\n  or\n  {long} and on ({fleet}) {_firing(tier, name)}\n)"


def _after_faster(v: Vocabulary, slo: Slo, tier: BurnTier, fleet: str) -> str:
    """One incident, one page: a slower paging tier does not fire while a faster one pages, nor
    until the misses that one paged on have left its short window. Its `for` would otherwise
    make it fire after a short incident's page resolved (the 6h/30m tier 15 minutes into its
    short window's burn, which outlasts the 1h/5m tier's), a second page for an incident over.
    A latency SLO's tier waits behind availability's faster page too: a failed request misses
    the latency SLOs, so an error burst that pages availability's 1h/5m tier burns the TTFT
    6h/30m tier as well, and the inhibition that silences that page ends with availability's."""
    return "".join(
        f"\nunless on ({fleet})\ncount_over_time({_paging_at(v, slo, t)}[{_short_reach(tier)}])"
        for t in _faster(tier)
    )


def _paging_at(v: Vocabulary, slo: Slo, tier: BurnTier) -> str:
    """The pages of this tier an SLO's slower tiers wait behind: the SLO's own, and for a
    latency SLO availability's."""
    latency = slo.signal is not None and v.slo("availability") is not None and _tells_failures(v)
    return _firing(tier, *((ALERTS["availability"],) if latency else ()), ALERTS[slo.name])


def _short_reach(tier: BurnTier) -> str:
    """How far back a tier's short window reads: the window and, past the shortest, the rate
    window its recorded ratios look back."""
    reach = seconds(tier.short) + (0 if tier.short == SLO_WINDOWS[0] else seconds(SLO_WINDOWS[0]))
    return f"{int(reach // 60)}m"


def capacity_hold(tier: BurnTier, cfg: BundleConfig) -> str:
    """How long a paging tier stays held after its model's capacity is back, whatever it reads:
    the capacity page stays open paging.recovery_for, then the tier's short window must read
    past all of it."""
    return f"{int((seconds(_short_reach(tier)) + seconds(cfg.paging.recovery_for)) // 60)}m"


def _held(v: Vocabulary) -> str:
    """The runbooks' word on the capacity hold."""
    holds = ", ".join(
        f"{capacity_hold(t, v.cfg)} for {t.long}/{t.short}" for t in BURN_TIERS if t.severity == "critical"
    )
    return (
        "The paging tiers do not fire while the model's capacity page (VllmModelCapacityLow) does, "
        f"nor until the misses of that outage and of its recovery have left their short window "
        f"({holds} after the replicas are back, `paging.recovery_for` included), nor while "
        "their short window has burned without a break since the outage (the replicas that "
        "survived it still drain its backlog), for at most their long window after it: the "
        "capacity page is the incident. Once a paging tier fires it stays open while its short "
        "window still burns, though its long window may have let go of an earlier burst; a "
        "slower paging tier does not fire while a faster one pages (for a latency SLO, "
        "availability's too: a failed request misses the latency SLOs), nor until that page has "
        f"left its short window ({_after_faster_words()}): one incident, one page."
    )


def _after_faster_words() -> str:
    return ", ".join(
        f"{_short_reach(t)} after a {f.long}/{f.short} page for {t.long}/{t.short}"
        for t in BURN_TIERS
        if t.severity == "critical"
        for f in _faster(t)
    )


def _capacity_hold(v: Vocabulary, slo: Slo, tier: BurnTier) -> str:
    """One incident, one page: while a model is below its capacity floor, and until the misses
    of that outage and of its recovery (the backlog drained, replicas back) have left this
    tier's short window, the capacity page is the incident and this tier does not fire. Held by
    the rule, not by an inhibition (which ends with its source): the burn an outage leaves
    behind would page again once the capacity page resolved, or keep the model's page group
    open so that its next capacity loss only updated that page instead of paging. The outage
    itself, and a backlog that outlasts paging.recovery_for, hold it through the recorded
    `held` (_capacity_held)."""
    fleet, floor, reach = by(v.targets.fleet_model), v.names.replicas_below_floor, _short_reach(tier)
    # paging.recovery_for stands in the rule as written (the mixin's knob), after the short
    # window's reach: from that reach into the outage to the hold's end.
    return (
        f"\nunless on ({fleet})\n(\n  {slo.held(tier)}\n  or\n"
        f"  count_over_time({floor}[{v.cfg.paging.recovery_for}] offset {reach})\n)"
    )


def _capacity_held(v: Vocabulary, slo: Slo) -> list[Recording]:
    """Per paging tier, 1 while the tier's short window has burned at every evaluation since its
    model was last below its capacity floor (or within the window's reach of it), for at most
    the tier's long window after the outage: the misses of one outage and of the backlog the
    replicas that survived it drain afterwards. A fixed paging.recovery_for cannot hold that
    burn: twenty of 24 replicas dead for ten minutes left the four survivors a queue their
    users still waited in 15 minutes after the replicas were back, and the time-to-first-token
    page opened as the hold ended (benchmarks/alert_quality, twenty). Once the short window
    stops burning the outage is over; a burn after it, or one that goes on past the long
    window (which then holds misses of after the outage alone), is news and pages. Recorded,
    as the rule reads its own last value: no expression can look back to a break of variable
    age. The value is 1, or nothing."""
    fleet, floor = by(v.targets.fleet_model), v.names.replicas_below_floor
    return [
        Recording(
            slo.held(tier),
            f"(\n  count_over_time({floor}[{_short_reach(tier)}]) * 0 + 1\n  or\n  {slo.held(tier)}\n)\n"
            f"and on ({fleet})\n{slo.miss(tier.short)} > {_limit(slo, tier)}\n"
            f"and on ({fleet})\ncount_over_time({floor}[{tier.long}])",
        )
        for tier in BURN_TIERS
        if tier.severity == "critical"
    ]


# -- promtool scenarios --------------------------------------------------------------------

PER_MIN = 10000  # events a minute: enough that a share of them is exact to 1e-4


def _burn_cases(name: str) -> Builder:
    def build(rules: list[Alert], io: Inputs) -> list[Case]:
        slo = io.v.slo(name)
        assert slo is not None
        budget = 1 - slo.objective
        tiers = {(r.labels["long"], r.labels["short"]): r for r in rules}
        factors = {(t.long, t.short): t.factor for t in BURN_TIERS}
        cases = []
        paging = {t: f for t, f in factors.items() if tiers[t].severity == "critical"}
        # Each tier's burn factor from both sides, a fifth away: a factor 1.5x or 0.67x of the
        # one written fails one of the two. Judged when that tier's `for` has passed: slower
        # tiers are still pending then, faster ones need a rate this one does not reach.
        for tier, factor in factors.items():
            at = 1 + minutes(tiers[tier].for_)
            for side, scale in (("above", 1.2), ("below", 0.8)):
                miss = factor * budget * scale
                if miss >= 1:
                    continue  # no share of misses reaches this burn rate
                bad = round(PER_MIN * miss)
                case = Case(
                    f"{rules[0].name}: misses {bad / PER_MIN:.4%} of its {slo.events}, "
                    f"just {side} burn rate {number(factor)}"
                )
                _events(case, io, slo, PER_MIN, bad)
                value = bad / PER_MIN
                fired = {t: 1 + minutes(tiers[t].for_) for t, f in factors.items() if value > f * budget}
                case.checks = [
                    Check(
                        m,
                        rules[0].name,
                        _one_page(
                            [Expect(tiers[t], io.fleet_result(), value) for t in fired if fired[t] <= m]
                        ),
                    )
                    for m in (at - 1, at)
                ]
                _stretch(case)
                cases.append(case)
        if slo.name != "availability":
            # Every request fails: no histogram observation at all, yet the latency SLO keeps
            # burning (a failed request never got its token) instead of resolving into silence.
            # The paging tiers show it; the slow ones follow from the same windows.
            outage = Case(f"{rules[0].name} keeps paging when every request fails and no token comes out")
            if io.outcomes(outage, SPAN, 0, PER_MIN) != "none":  # else the source cannot tell a failure
                _tier_checks(outage, rules, tiers, paging, budget, 1.0, io.fleet_result())
                cases.append(outage)
        if io.cfg.prometheus.probes:
            cases.append(_canary_only(io, slo, rules[0]))
            if slo.name == "availability":
                cases += _refused_cases(io, tiers[("1h", "5m")])
        cases += _floor_cases(io, slo, rules, tiers)
        cases += _burst_cases(io, slo, rules, tiers)
        cases += _onset_cases(io, slo, tiers)
        cases.append(_left_window_case(io, slo))
        cases += _one_window_cases(io, slo, tiers)
        cases += _held_cases(io, slo, tiers)
        cases += _after_faster_cases(io, slo, tiers)
        for case in cases:
            _scraped(case, io)
        cases += _capacity_hold_cases(io, slo, rules, tiers)
        return cases

    return build


def _scraped(case: Case, io: Inputs, back: int = 0) -> None:
    """The replica answers its scrapes (from minute `back`): its model has its capacity, or the
    paging tiers would be held for the capacity page."""
    history = f"1+0x{case.samples}" if not back else f"0x{back - 1} 1+0x{case.samples - back}"
    case.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), history)


# A capacity page's outage, in capacity-hold cases: the model's only replica is not scraped for
# its first minutes while its requests miss at a share that burns the tier (and no faster one).
CAPACITY_BACK = 12
# And an outage of one minute: one evaluation below the floor holds the tier as long as a long
# outage does, counted from its end.
BRIEF_BACK = 1
# Minutes after a change of the miss share within which the recorded windows may read it a
# little off (the edges put back are exact for steady traffic, _behind): a window judged clear
# of the outage's misses is judged at least this long after they stopped.
SETTLED = 10
# How long a backlog's misses outlast the fixed hold and the tier's `for`, in minutes.
BACKLOG_PAST = 5


def _capacity_hold_cases(
    io: Inputs, slo: Slo, rules: list[Alert], tiers: dict[tuple[str, str], Alert]
) -> list[Case]:
    """A paging tier is held for its model's capacity outage (_capacity_hold), three ways:
    - misses that stop after the outage and come back within paging.recovery_for: silent at
      every minute from the capacity's return to the hold's end and the tier's `for`, firing
      then (a hold a minute short, or none, fails a check);
    - a backlog, misses that go on from the outage past that hold, then stop: silent throughout
      (a fixed hold alone fires);
    - misses that never stop: held for the tier's long window after the outage, then firing."""
    p = io.cfg.paging
    if p.min_ready_replicas < 1 and p.capacity_fraction <= 0:
        return []  # no capacity page in this bundle: nothing holds a tier
    budget = 1 - slo.objective
    cases = []
    for tier, rule in tiers.items():
        t = TIER_OF[tier]
        share = _burning(t, budget)
        if rule.severity != "critical" or t.factor * budget >= share:
            continue  # not paging, or no share of misses reaches this burn rate
        bad, hold, after = round(PER_MIN * share), minutes(capacity_hold(t, io.cfg)), minutes(rule.for_)
        missing = f"{bad / PER_MIN:.2%} of the {slo.events}"
        for back in (CAPACITY_BACK, BRIEF_BACK):
            resumes, fires = _resumes(t, share, t.factor * budget, back, hold), back + hold + after
            if resumes is None:
                continue  # the hold is too short for a burn to break and come back within it
            case = Case(
                f"{rule.name}: the {tier[0]}/{tier[1]} tier is held while its model's capacity page "
                f"fires ({back} min) and for {capacity_hold(t, io.cfg)} after it: {missing} miss, stop "
                f"when it is back, and miss again from {resumes - back} min after: it fires then"
            )
            case.queries = [_paging(io, rule, m, m >= fires) for m in range(back, fires + 1)]
            _outage(case, io, slo, back, [(0, bad), (back, 0), (resumes, bad)])
            cases.append(case)
        back = CAPACITY_BACK
        stops = back + hold + after + BACKLOG_PAST
        clear = stops + minutes(_short_reach(t)) + after + 2
        case = Case(
            f"{rule.name}: a backlog holds the {tier[0]}/{tier[1]} tier: {missing} miss from its model's "
            f"capacity outage ({back} min) until {stops - back} min after it, past the "
            f"{capacity_hold(t, io.cfg)} hold: it never fires"
        )
        case.queries = [_paging(io, rule, m, False) for m in range(back, clear + 1)]
        _outage(case, io, slo, back, [(0, bad), (stops, 0)])
        cases.append(case)
        # The outage's last minute below the floor is back - 1; the recorded hold may be read an
        # evaluation late.
        ends = back + int(seconds(tier[0]) // 60) + after
        case = Case(
            f"{rule.name}: {missing} miss from its model's capacity outage ({back} min) on: the "
            f"{tier[0]}/{tier[1]} tier stays held for its {tier[0]} window after the outage, then fires"
        )
        case.queries = [_paging(io, rule, m, False) for m in range(back, ends - 1, 5)]
        case.queries += [_paging(io, rule, ends - 1, False), _paging(io, rule, ends + 1, True)]
        _outage(case, io, slo, back, [(0, bad)])
        cases.append(case)
    return cases


def _resumes(tier: BurnTier, share: float, limit: float, back: int, hold: int) -> int | None:
    """The first minute misses at `share` may come back, after the outage's misses at `share`
    and none from `back`, for the tier to fire just as its hold ends: the short window read clear
    before it (SETTLED after the outage), burns again neither while the outage is in its reach
    (the tier would be held on) nor only after the hold's end (it would fire late), and the long
    window burns at the hold's end; each a twentieth from the limit. None when no minute does."""
    short, long, reach = (int(seconds(w) // 60) for w in (tier.short, tier.long, _short_reach(tier)))
    end = back + hold
    for resumes in range(back + 1, end):
        per_minute = [share / limit if m < back or m >= resumes else 0.0 for m in range(end + 1)]
        if (
            any(_window_mean(per_minute, m, short) < 0.95 for m in range(back + SETTLED, resumes))
            and all(_window_mean(per_minute, m, short) < 0.95 for m in range(resumes, back + reach + 1))
            and _window_mean(per_minute, end - 1, short) > 1.05
            and _window_mean(per_minute, end, long) > 1.05
        ):
            return resumes
    return None


def _outage(case: Case, io: Inputs, slo: Slo, back: int, parts: list[tuple[int, int]]) -> None:
    """The case's inputs, to its last judged minute: the model's only replica not scraped until
    minute `back`, its events as `parts` (_parts)."""
    _parts(case, io, slo, parts, case.minutes)
    _stretch(case)
    _scraped(case, io, back=back)


# Each burn tier by its (long, short) windows, as the alerts label it.
TIER_OF = {(t.long, t.short): t for t in BURN_TIERS}


def _faster(tier: BurnTier) -> list[BurnTier]:
    """The paging tiers faster than `tier` (a shorter long window)."""
    return [t for t in BURN_TIERS if t.severity == "critical" and seconds(t.long) < seconds(tier.long)]


def _burning(tier: BurnTier, budget: float) -> float:
    """A share of misses that burns `tier` and no faster paging tier, which would page first and
    keep this one silent (_after_faster): every request for the fastest, 0.9 of the next faster
    tier's burn rate for a slower one."""
    faster = _faster(tier)
    return 1.0 if not faster else 0.9 * min(t.factor for t in faster) * budget


def _one_page(expected: list[Expect]) -> list[Expect]:
    """What fires of `expected` when its paging tiers fire from the start and go on: the fastest
    of them alone, the slower ones silent after it (_after_faster)."""
    paging = [e.rule.labels["long"] for e in expected if e.rule.severity == "critical"]
    fastest = min(paging, key=seconds, default=None)
    return [e for e in expected if e.rule.severity != "critical" or e.rule.labels["long"] == fastest]


# A burst of misses that stops, per paging tier: (minute it stops, minute judged after it). The
# tier fires during the burst; once it stops, its short window lets go within that window (and the
# 5 minutes its rates look back) while the long one still burns, so the tier resolves: the short
# window is what makes a tier stop paging for an incident that is over. A slower tier's burst
# burns it and not the faster tier (_burning), 40 minutes of it enough for the 6h window to
# still burn at 77, once the 30m window is clear.
BURSTS = {("1h", "5m"): (6, 13), ("6h", "30m"): (40, 77)}


def _burst_cases(io: Inputs, slo: Slo, rules: list[Alert], tiers: dict[tuple[str, str], Alert]) -> list[Case]:
    budget = 1 - slo.objective
    cases = []
    for tier, (stop, after) in BURSTS.items():
        rule, share = tiers[tier], _burning(TIER_OF[tier], budget)
        if TIER_OF[tier].factor * budget >= share:
            continue  # no share of misses reaches this burn rate
        bad = round(PER_MIN * share)
        case = Case(
            f"{rule.name}: {bad / PER_MIN:.2%} of the {slo.events} miss for {stop} minutes, then none: the "
            f"{tier[0]}/{tier[1]} tier fires, then lets go once its {tier[1]} window is clear"
        )
        _two_parts(case, io, slo, (bad, 0), stop, after + 1)
        case.queries = [_paging(io, rule, stop - 1, True), _paging(io, rule, after, False)]
        cases.append(case)
    return cases


def _paging(io: Inputs, rule: Alert, minute: int, firing: bool) -> QueryCheck:
    """Whether this tier (alone: the others move too) fires at `minute`."""
    state = {"alertname": rule.name, "alertstate": "firing", **rule.labels}
    selected = ", ".join(f'{k}="{v}"' for k, v in state.items())
    labels = {**io.fleet_result(), **state, "severity": rule.severity, "__name__": "ALERTS"}
    return QueryCheck(minute, f"ALERTS{{{selected}}}", [(labels, 1)] if firing else [])


def _same_page(io: Inputs, rule: Alert, minute: int) -> QueryCheck:
    """The tier's alert at `minute` is one alert, with the tier's own labels: a hold that reads
    its ALERTS without the long window (`or ALERTS{...}` alone) keeps ALERTS firing, but through
    a second alert labelled alertstate="firing" that takes over the page, a new notification.
    Only ALERTS_FOR_STATE (a rule with a `for`) keeps an alert's own labels as they are."""
    tier = {"alertname": rule.name, **rule.labels, "severity": rule.severity}
    selected = ", ".join(f'{k}="{v}"' for k, v in tier.items())
    return QueryCheck(
        minute, f"ALERTS_FOR_STATE{{{selected}}} > bool 0", [({**io.fleet_result(), **tier}, 1)]
    )


# The hold of a page: a burst, a clean gap, then a burn that goes on, in multiples of the tier's
# burn rate from each minute on, the minutes in sixtieths of the tier's long window. The second
# burn fires the tier while the first is still in its long window, and when the first has left
# it (at HELD_AT) only the short window still burns.
HELD_PARTS, HELD_FIRED, HELD_AT = ((0, 6.0), (10, 0.0), (50, 2.0)), 56, 75


def _held_cases(io: Inputs, slo: Slo, tiers: dict[tuple[str, str], Alert]) -> list[Case]:
    """A paging tier that fires stays firing while its short window burns, though its long
    window no longer does (_long_or_paging): without it the page resolves at HELD_AT and pages
    again later for the same burn. The windows are asserted where judged."""
    budget = 1 - slo.objective
    cases = []
    for tier, rule in tiers.items():
        limit, scale = TIER_OF[tier].factor * budget, seconds(tier[0]) / 3600
        if rule.severity != "critical" or max(f for _, f in HELD_PARTS) * limit >= 1:
            continue
        step = 1 if scale == 1 else 5
        fired = -(-int(HELD_FIRED * scale + minutes(rule.for_)) // step) * step
        at = int(HELD_AT * scale)
        parts = [(int(m * scale), round(PER_MIN * f * limit)) for m, f in HELD_PARTS]
        per_minute = [
            max((s, f) for s, f in ((int(m * scale), f) for m, f in HELD_PARTS) if s <= i)[1]
            for i in range(at)
        ]
        long, short = int(seconds(tier[0]) // 60), int(seconds(tier[1]) // 60)
        for m, burns in ((fired, True), (at, False)):
            long_mean, short_mean = _window_mean(per_minute, m, long), _window_mean(per_minute, m, short)
            assert short_mean > 1.05 and (long_mean > 1.05 if burns else long_mean < 0.95), (
                tier,
                m,
                long_mean,
            )
        case = Case(
            f"{rule.name}: the {tier[0]}/{tier[1]} tier fires on a burn while an earlier burst is in its "
            f"{tier[0]} window, and stays firing after that burst has left it, the {tier[1]} window still burning",
            every=f"{step}m",
        )
        _parts(case, io, slo, parts, at + 1)
        # Firing at every step from its first to the end, and still the same alert at the end.
        case.queries = [_paging(io, rule, m, True) for m in range(fired, at + 1, step)]
        case.queries += [_same_page(io, rule, at)] if rule.for_ else []
        cases.append(case)
    return cases


# The faster tier's burst in _after_faster_cases, in multiples of its burn rate: a burst of every
# request would leave the slower tier's short window reading 0 for two minutes as it leaves it
# (the 5-minute rates' edges put back assume steady traffic), which resets that tier's `for` and
# hides a wait cut short.
AFTER_FASTER_BURST = 3.0


def _after_faster_cases(io: Inputs, slo: Slo, tiers: dict[tuple[str, str], Alert]) -> list[Case]:
    """A slower paging tier stays silent while the faster one's page is in its short window
    (_after_faster): misses at AFTER_FASTER_BURST times the faster tier's burn rate for its burst
    (BURSTS), which it pages on and resolves within its short window; misses go on at a share that
    burns the slower tier alone, which fires only once the faster page is its short reach behind,
    then its `for`. Judged two minutes either side of the bounds the faster page's end allows."""
    budget = 1 - slo.objective
    cases = []
    for tier, rule in tiers.items():
        faster = _faster(TIER_OF[tier])
        if rule.severity != "critical" or not faster:
            continue
        fast = tiers[(faster[0].long, faster[0].short)]
        stop, quiet, fired = _waited(faster[0], tier, rule)
        bad = round(PER_MIN * _burning(TIER_OF[tier], budget))
        burst = round(PER_MIN * min(1.0, AFTER_FASTER_BURST * faster[0].factor * budget))
        case = Case(
            f"{rule.name}: {burst / PER_MIN:.2%} of the {slo.events} miss for {stop} minutes, then "
            f"{bad / PER_MIN:.2%}: the "
            f"{tier[0]}/{tier[1]} tier fires only once the {fast.labels['long']}/{fast.labels['short']} "
            f"page is {_short_reach(TIER_OF[tier])} behind"
        )
        _parts(case, io, slo, [(0, burst), (stop, bad)], fired + 1)
        case.queries = [
            _paging(io, fast, stop - 1, True),
            _paging(io, rule, quiet, False),
            _paging(io, rule, fired, True),
        ]
        cases.append(case)
        cases += _after_availability_cases(io, slo, tier, rule, faster[0])
    return cases


def _waited(faster: BurnTier, tier: tuple[str, str], rule: Alert) -> tuple[int, int, int]:
    """When the faster tier's burst (BURSTS) stops, and the minutes the slower tier must still be
    silent and must fire by: its short reach and `for` after the faster page's last minute,
    two minutes either side of the bounds that page's end allows."""
    stop = BURSTS[(faster.long, faster.short)][0]
    gone = stop + minutes(_short_reach(faster)) + 2  # the faster page's last minute, at the latest
    wait = minutes(_short_reach(TIER_OF[tier])) + 1 + minutes(rule.for_)
    return stop, stop + wait - 2, gone + wait + 2


def _after_availability_cases(
    io: Inputs, slo: Slo, tier: tuple[str, str], rule: Alert, faster: BurnTier
) -> list[Case]:
    """A latency SLO's slower paging tier waits behind availability's faster page too
    (_after_faster): requests fail at AFTER_FASTER_BURST times availability's burn rate, which
    pages availability and, as misses, burns the latency SLO under its faster tier's rate; then
    the requests succeed, but slow, at a share that burns this tier alone. It fires only once
    the availability page is its short reach behind, then its `for`; judged as the own-SLO case."""
    availability = io.v.slo("availability")
    if slo.signal is None or availability is None:
        return []  # availability's own tiers wait only behind its own pages
    budget, allowed = 1 - slo.objective, 1 - availability.objective
    failed = round(PER_MIN * min(1.0, AFTER_FASTER_BURST * faster.factor * allowed))
    if failed / PER_MIN >= faster.factor * budget:
        return []  # the failures alone would page this SLO's faster tier
    fast = next(
        r for r in _burn_rules(io.v, availability) if r.labels == {"long": faster.long, "short": faster.short}
    )
    stop, quiet, fired = _waited(faster, tier, rule)
    bad = round(PER_MIN * _burning(TIER_OF[tier], budget))
    case = Case(
        f"{rule.name}: {failed / PER_MIN:.2%} of the requests fail for {stop} minutes, then "
        f"{bad / PER_MIN:.2%} of the {slo.events} miss: the {tier[0]}/{tier[1]} tier fires only once "
        f"the availability {faster.long}/{faster.short} page is {_short_reach(TIER_OF[tier])} behind"
    )
    first, then = Case("failing"), Case("slow")
    if io.outcomes(first, SPAN, PER_MIN - failed, failed) == "none":
        return []  # this source cannot tell a failure
    _observed(first, io, slo, PER_MIN - failed, 0)  # a failed request is observed by no histogram
    _events(then, io, slo, PER_MIN, bad)
    case.series = _spliced(first.series, then.series, stop, fired + 1)
    case.queries = [
        _paging(io, fast, stop - 1, True),
        _paging(io, rule, quiet, False),
        _paging(io, rule, fired, True),
    ]
    return [case]


# A burst of misses on a model that was clean for longer than the tier's long window, of the share
# that spends the window's budget share in this many minutes (at most every request): past the
# 5 minutes over which the base rate ramps up to the burst, where the edges put back are whole.
ONSET_SPENT, ONSET_TIER, ONSET_CLEAN = 8.5, ("1h", "5m"), 65


def _onset_cases(io: Inputs, slo: Slo, tiers: dict[tuple[str, str], Alert]) -> list[Case]:
    """The fast tier fires when a burst has spent its long window's share of the budget counted
    instantly, to the minute (the inputs' step): silent at the last whole minute before, firing
    at the first after. A window read without its edges put back (_behind) fires two minutes
    late; any of their three terms left out or doubled fails one side."""
    rule, factor = tiers[ONSET_TIER], TIER_OF[ONSET_TIER].factor
    limit, window = factor * (1 - slo.objective), seconds(ONSET_TIER[0]) / 60
    bad = round(PER_MIN * min(1.0, limit * window / ONSET_SPENT))
    spent = limit * window / (bad / PER_MIN)  # minutes into the burst
    if spent > window - 10:
        return []  # the burst cannot spend it within the window
    quiet, fired = ONSET_CLEAN + int(spent), ONSET_CLEAN + int(spent) + 1
    case = Case(
        f"{rule.name}: {bad / PER_MIN:.2%} of the {slo.events} miss from minute {ONSET_CLEAN}: the "
        f"{ONSET_TIER[0]}/{ONSET_TIER[1]} tier fires in the minute the burst has spent "
        f"{percent(limit)} of the {ONSET_TIER[0]} window's {slo.events} ({spent:.2f} minutes)"
    )
    _two_parts(case, io, slo, (0, bad), ONSET_CLEAN, fired + 1)
    case.queries = [_paging(io, rule, quiet, False), _paging(io, rule, fired, True)]
    return [case]


# A burst of misses in the first minutes, and a minute its long window still holds the rates
# recorded as the burst's end ramped down (minutes 12 to 14): with the window's start put back it
# reads under the margin (what is left is the 1-minute inputs' coarse sampling, 0.3%), without
# it 2%.
LEFT_BURST, LEFT_AT, LEFT_MARGIN = 10, 72, 0.01


def _left_window_case(io: Inputs, slo: Slo) -> Case:
    """The 1h window reads next to no miss once a burst has left it, though the rates recorded as
    it ended still ramp down inside it: what its start weighs too much is taken out (_behind, a
    window ago)."""
    window = ONSET_TIER[0]
    case = Case(
        f"{slo.name} SLO: every request misses for the first {LEFT_BURST} minutes; at minute {LEFT_AT} "
        f"the {window} window reads next to none of them"
    )
    _two_parts(case, io, slo, (PER_MIN, 0), LEFT_BURST, LEFT_AT + 1)
    case.queries = [QueryCheck(LEFT_AT, f"count({slo.miss(window)} < {LEFT_MARGIN})", [({}, 1)])]
    return case


# One window burns, the other just under the burn rate: (miss ratio before, after, in units of
# the tier's burn rate) and how long the first part lasts, in multiples of the second.
ONE_WINDOW = {
    "short": (0.75, 1.2, 2),  # a burst on a model that was just under: only the short window burns
    "long": (1.5, 0.8, 1),  # a burst that eased to just under: only the long window still burns
}


def _one_window_cases(io: Inputs, slo: Slo, tiers: dict[tuple[str, str], Alert]) -> list[Case]:
    """Each tier stays silent while only one of its windows burns. The other window sits a fifth
    under the burn rate (and above 0.7 of it) for the whole `for` before the judged minute, so a
    tier that dropped a window, or read one against a burn rate 0.67x the one written, fires
    there. Only this tier is judged (through ALERTS): the others see both windows move. The
    rules evaluate every 5 minutes (the slowest tier's cases span a day and a half); a ratio of
    steady traffic is the same whatever the clock."""
    budget = 1 - slo.objective
    factors = {(t.long, t.short): t.factor for t in BURN_TIERS}
    cases = []
    for tier, rule in tiers.items():
        long, short, hold = int(seconds(tier[0]) // 60), int(seconds(tier[1]) // 60), minutes(rule.for_)
        step = 5
        for burning, (before, after, ratio) in ONE_WINDOW.items():
            if max(before, after) * factors[tier] * budget >= 1:
                continue  # no share of misses reaches this burn rate
            # The second part: the short window (and the 5m rates it sums) all of it, then the `for`.
            second = -(-(short + 5 + hold + 2 * step) // step) * step
            first = ratio * second
            at = first + second
            per_minute = [before] * first + [after] * second
            quiet = "long" if burning == "short" else "short"
            for m in range(at - hold - step, at + 1, step):
                means = {
                    "long": _window_mean(per_minute, m, long),
                    "short": _window_mean(per_minute, m, short),
                }
                assert means[burning] > 1.05 and 0.7 < means[quiet] < 0.95, (
                    rule.name,
                    tier,
                    burning,
                    m,
                    means,
                )
            case = Case(
                f"{rule.name}: only the {tier[1] if burning == 'short' else tier[0]} window burns "
                f"(the other at {number(min(before, after))}x the rate): the {tier[0]}/{tier[1]} tier stays silent",
                every=f"{step}m",
            )
            bad = tuple(round(PER_MIN * share * factors[tier] * budget) for share in (before, after))
            _two_parts(case, io, slo, bad, first, at + 1)
            case.queries = [_paging(io, rule, at, False)]
            cases.append(case)
    return cases


def _window_mean(per_minute: list[float], at: int, window: int) -> float:
    """A window's miss ratio at minute `at` as the recorded series see it: traffic is steady, so
    the mean of its minutes' ratios (the edges the 5m rates ramp over are put back, _behind)."""
    span = per_minute[max(0, at - window) : at]
    return sum(span) / len(span)


def _two_parts(case: Case, io: Inputs, slo: Slo, bad: tuple[int, int], at: int, span: int) -> None:
    """The case's events: PER_MIN a minute, `bad[0]` of them bad up to minute `at`, then `bad[1]`,
    over minutes 0..span-1."""
    _parts(case, io, slo, [(0, bad[0]), (at, bad[1])], span)


def _parts(case: Case, io: Inputs, slo: Slo, parts: list[tuple[int, int]], span: int) -> None:
    """The case's events: PER_MIN a minute, from each (minute, bad) of `parts` on (the first at
    0) `bad` of them bad, over minutes 0..span-1."""
    series: dict[str, str] | None = None
    for at, bad in parts:
        part = Case("part")
        _events(part, io, slo, PER_MIN, bad)
        series = part.series if series is None else _spliced(series, part.series, at, span)
    assert series is not None
    case.series = series


def _spliced(first: dict[str, str], then: dict[str, str], at: int, span: int) -> dict[str, str]:
    """Series that follow `first` up to minute `at`, then move as `then` moves (a series `then`
    lacks stays where it was), over minutes 0..span-1."""
    out = {}
    step = re.compile(r"(-?[0-9.e]+)\+([0-9.e]+)x[0-9]+")
    for key in sorted(set(first) | set(then)):
        a, b = step.fullmatch(first.get(key, "0+0x1")), step.fullmatch(then.get(key, "0+0x1"))
        if a and b:  # two steady counters or gauges: two steps of promtool's notation
            start, rate, later = float(a[1]), float(a[2]), float(b[2]) if key in then else 0.0
            reached = start + rate * at
            out[key] = (
                f"{number(start)}+{number(rate)}x{at} {number(reached + later)}+{number(later)}x{span - at - 1}"
            )
            continue
        before = _expanded(first.get(key, "0"), span)
        after = _expanded(then[key], span) if key in then else [before[at]] * span
        values = before[: at + 1]
        for m in range(at + 1, span):
            values.append(values[-1] + after[m] - after[m - 1])
        out[key] = " ".join(number(round(x, 9)) for x in values)
    return out


def _expanded(values: str, span: int) -> list[float]:
    """The first `span` values of a promtool series notation (`a+bxN`, `a-bxN`, numbers)."""
    out: list[float] = []
    for token in values.split():
        if "x" in token:
            match = re.fullmatch(r"(-?[0-9.e]+)([+-])([0-9.e]+)x([0-9]+)", token)
            if match is None:
                raise ValueError(f"not a promtool series step: {token}")
            start, op, step, count = match.groups()
            delta = float(step) if op == "+" else -float(step)
            out += [float(start) + delta * i for i in range(min(int(count), span) + 1)]
        else:
            out.append(float(token))
        if len(out) >= span:
            break
    out += [out[-1]] * (span - len(out))
    return out[:span]


def _floor_cases(io: Inputs, slo: Slo, rules: list[Alert], tiers: dict[tuple[str, str], Alert]) -> list[Case]:
    """Each tier's request floor from both sides, a fifth away, every request a miss: a tier
    judges a model only with slo.min_requests requests in its long window. A case is judged 20
    minutes after its tier's `for`: the recorded count averages 5m rates, which ramp up over the
    first five minutes (see _count_reached), so a fifth above the floor is reached by minute 12."""
    floor = io.cfg.slo.min_requests
    cases = []
    for tier, rule in tiers.items():
        span = seconds(tier[0]) / 60
        at = 20 + minutes(rule.for_)
        for side, scale in (("above", 1.2), ("below", 0.8)):
            per_min = round(floor * scale / span, 6)
            case = Case(
                f"{rules[0].name}: every request misses, {side} slo.min_requests over {tier[0]} "
                f"({number(round(per_min * span))} requests)"
            )
            _events(case, io, slo, per_min, per_min)
            expected = []
            for other, judged in tiers.items():
                reached = _count_reached(per_min * seconds(other[0]) / 60, floor)
                if reached is None:
                    continue
                fires = reached + minutes(judged.for_)
                # Only a tier whose state is certain at `at` may be judged there.
                assert abs(fires - at) >= 2, f"{judged.name} {other}: fires at {fires}, judged at {at}"
                if fires < at:
                    expected.append(Expect(judged, io.fleet_result(), 1.0))
            case.checks = [Check(at, rules[0].name, _one_page(expected))]
            _stretch(case)
            cases.append(case)
    return cases


def _count_reached(steady: float, floor: float) -> int | None:
    """The first minute a window's recorded request count reaches `floor`, for traffic that
    starts at minute 0 and whose count, once the 5m rates have ramped up, is `steady`. The
    count is the mean of the 5m rates recorded so far times the window: minute m's rate is
    m/5 of the steady one up to minute 5, so after n minutes the mean is (n + 1)/10 of it for
    n <= 5 and (n - 2)/n after. None when the steady count stays under the floor."""
    if steady < floor:
        return None
    n = 1
    while (steady * ((n + 1) / 10 if n <= 5 else (n - 2) / n)) < floor:
        n += 1
    return n


def _canary_only(io: Inputs, slo: Slo, rule: Alert) -> Case:
    """The canary's own requests (vLLM counts them; here slow ones) move no SLI: no event."""
    case = Case(f"{rule.name}: the canary's own requests, the only traffic, move no SLI")
    per_min = 4
    io.serving(case, SPAN)
    io.traffic(case, per_min, SPAN, **({"length": per_min} if "request_success" in io.res.signals else {}))
    slow = 2 * (slo.threshold or 1)
    io.probe(case, SPAN, per_min=per_min, latency=slow)
    if slo.name == "ttft":
        # vLLM observes their (slow) first tokens; a one-token answer has no inter-token gap.
        sig = io.res["time_to_first_token"]
        labels = io.labels(signal=sig)
        case.add(series_text(sig.bucket, {**labels, "le": bucket_text(slo.threshold)}), f"0+0x{SPAN}")
        case.add(series_text(sig.count, labels), f"0+{per_min}x{SPAN}")
    at = 6
    case.queries = [QueryCheck(at, slo.total_rate, [({**io.fleet_result(), "__name__": slo.total_rate}, 0)])]
    case.checks = [Check(at, rule.name, [])]
    _stretch(case)
    return case


def _refused_cases(io: Inputs, fast: Alert) -> list[Case]:
    """The canary's connections refused while every user request succeeds: a server that
    refuses connections records nothing, so the canary's refusals are the outage's only trace
    and they burn; unless the replica's log shows a planned stop and the start after it (the
    Service routes no user there), where they do not."""
    users, refused = 600, 60  # a minute; 60 / 660 = 9.1% missed, over 14.4 x 0.1%
    at = 1 + minutes(fast.for_)
    log = {
        "ready": (["ready"], "0", {"startup_complete": "1"}),
        "planned": (["stopping", "starting"], "0 60", {"startup_complete": "1", "shutdown": "2"}),
    }
    if not io.cfg.prometheus.log_exporters:
        log = {"no log exporter": log["ready"]}
    cases = []
    for says, (states, since, events) in log.items():
        planned = says == "planned"
        case = Case(
            f"{fast.name} stays silent on the canary's refused connections while the log shows a planned restart"
            if planned
            else f"{fast.name} burns on the canary's refused connections, the only trace of a server "
            f"that refuses them (log: {says})"
        )
        io.outcomes(case, SPAN, users, 0)
        io.probe(case, SPAN, per_min=refused, failing="refused")
        if io.cfg.prometheus.log_exporters:
            io.server_state(case, SPAN, since, states)
            io.event_times(case, SPAN, **events)
        expected = [] if planned else [Expect(fast, io.fleet_result(), refused / (users + refused))]
        case.checks = [Check(at, fast.name, expected)]
        _stretch(case)
        cases.append(case)
    return cases


def _events(case: Case, io: Inputs, slo: Slo, per_min: float, bad: float) -> None:
    """`per_min` events a minute of the SLO, `bad` of them bad, as the source counts them."""
    if slo.name == "availability":
        io.outcomes(case, SPAN, per_min - bad, bad)
        return
    io.outcomes(case, SPAN, per_min, 0)  # the requests: the floor counts them
    _observed(case, io, slo, per_min, bad)


def _observed(case: Case, io: Inputs, slo: Slo, per_min: float, bad: float) -> None:
    """`per_min` observations a minute of a latency SLO's histogram, `bad` of them over its
    threshold."""
    assert slo.signal is not None and slo.threshold is not None
    sig = io.res[slo.signal]
    labels = io.labels(signal=sig)
    case.add(
        series_text(sig.bucket, {**labels, "le": bucket_text(slo.threshold)}),
        f"0+{number(per_min - bad)}x{SPAN}",
    )
    case.add(series_text(sig.count, labels), f"0+{number(per_min)}x{SPAN}")


# Input series are written this long and cut to the case's length (see _stretch).
SPAN = 10_000


def _stretch(case: Case) -> None:
    span = case.minutes
    case.series = {k: v.replace(f"x{SPAN}", f"x{span}") for k, v in case.series.items()}


def _tier_checks(case, rules, tiers, factors, budget, value, result) -> None:
    checks: list[int] = []
    firing_tiers = [t for t, f in factors.items() if value > f * budget]
    for tier in firing_tiers:
        at = 1 + minutes(tiers[tier].for_)
        checks += [at - 1, at]
    checks = sorted(set(checks)) or [1 + max(minutes(r.for_) for r in rules)]
    for minute in checks:
        expected = [
            Expect(tiers[t], result, value) for t in firing_tiers if minute >= 1 + minutes(tiers[t].for_)
        ]
        case.checks.append(Check(minute, rules[0].name, _one_page(expected)))
    _stretch(case)


# -- recording rules: each model's events, then its miss ratio over every window -------------


def recording_groups(v: Vocabulary) -> list[Group]:
    """Per model and SLO, one group each (the monitoring-mixin's 20 rules a group): its bad and
    all events per second over the shortest window, recorded once; the miss ratio over each
    longer window from those (never a raw rate over days); and, for availability, how many
    requests each burn window saw, the burn alerts' floor; last, per paging tier, whether a
    capacity outage still holds it (_capacity_held). Availability's group comes first: the
    latency SLOs count its failures as misses."""
    availability = v.slo("availability")
    if availability is None:
        return []
    fleet = by(v.targets.fleet_model)
    first = [
        Recording(availability.bad_rate, _availability_bad(v)),
        Recording(
            availability.total_rate,
            sum_of([f"sum by ({fleet}) ({v.names.requests_good})", availability.bad_rate], fleet),
        ),
        *_windows(availability),
    ]
    for window in dict.fromkeys(t.long for t in BURN_TIERS):
        seen = f"avg_over_time({availability.total_rate}[{window}]) * {int(seconds(window))}"
        if window == SLO_WINDOWS[0]:
            seen = f"{availability.total_rate} * {int(seconds(window))}"
        first.append(Recording(requests_in(window), seen))
    first += _capacity_held(v, availability)
    groups = [Group(f"{RECORDING_GROUP}-{availability.name}", tuple(first))]
    for slo in v.slos:
        if slo.signal is not None:
            rules = (*_latency_events(v, slo, availability), *_windows(slo), *_capacity_held(v, slo))
            groups.append(Group(f"{RECORDING_GROUP}-{slo.name}", rules))
    return groups


def _windows(slo: Slo) -> list[Recording]:
    behind = [
        Recording(slo.bad_behind, _behind(slo.bad_rate)),
        Recording(slo.total_behind, _behind(slo.total_rate)),
    ]
    return [*behind, *(Recording(slo.miss(window), _miss(slo, window)) for window in SLO_WINDOWS)]


def _per_model_of_probe(v: Vocabulary, rates: str) -> str:
    """Probe series' rates per model, under the vLLM job (the probe's series carry its own)."""
    keep = by((*(label for label, _ in v.targets.partitions), "model_name"))
    summed = f"sum by ({keep}) ({rates})"
    return f'label_replace({summed}, "job", "{v.cfg.prometheus.vllm_job}", "", "")'


def _availability_bad(v: Vocabulary) -> str:
    """Requests that failed (vLLM's count, refused at admission, or 5xx on the inference
    handlers: the per-replica recording keeps the larger) and the canary's failures, counted as
    the traffic a user would have sent: a server that refuses connections records nothing."""
    fleet = by(v.targets.fleet_model)
    parts = []
    if v.counts_failures:
        parts.append(f"sum by ({fleet}) ({v.names.requests_failing})")
    if v.cfg.prometheus.probes:
        w = SLO_WINDOWS[0]
        failed = select(PROBE, "vllm_probe_failures", v.probe, reason=f"~{PROBE_FAILURES_USERS_MEET}")
        refused = f"rate({select(PROBE, 'vllm_probe_failures', v.probe, reason=PROBE_REFUSED)}[{w}])"
        if v.cfg.prometheus.log_exporters:
            # Refused while the log showed a planned stop or restart at any time in the window.
            refused = (
                f"({refused}\nunless on ({by(v.targets.target)})\n"
                f"max_over_time({v.names.restart_planned}[{w}]) == 1)"
            )
        parts.append(_per_model_of_probe(v, f"rate({failed}[{w}])\nor\n{refused}"))
    if not parts:
        # Nothing can tell a failure: every request this source counts is good.
        return f"sum by ({fleet}) ({v.names.requests_good}) * 0"
    return sum_of(parts, fleet) if len(parts) > 1 else parts[0]


def _latency_events(v: Vocabulary, slo: Slo, availability: Slo) -> list[Recording]:
    """A latency SLO's events: observations at or under the threshold are good; a request that
    failed counts as one more miss (it never got its token), the canary's answers not at all."""
    assert slo.signal is not None and slo.threshold is not None and slo.setting is not None
    sig = v.res[slo.signal]
    check_bucket_bound(slo.setting, sig.buckets, slo.threshold, v.res.source.origin)
    fleet = by(v.targets.fleet_model)
    w = SLO_WINDOWS[0]
    good = f"sum by ({fleet}) (rate({selector(sig.bucket, v.vllm, le_matcher(slo.threshold))}[{w}]))"
    observed = f"sum by ({fleet}) (rate({selector(sig.count, v.vllm)}[{w}]))"
    if slo.name == "ttft" and v.cfg.prometheus.probes:
        # The canary's one-token answers are time-to-first-token observations too.
        probe = PROBE["vllm_probe_duration_seconds"]
        if slo.threshold in probe.buckets:
            within = select(PROBE, "vllm_probe_duration_seconds_bucket", v.probe, le_matcher(slo.threshold))
        else:
            within = select(PROBE, "vllm_probe_duration_seconds_count", v.probe)
        answered = select(PROBE, "vllm_probe_duration_seconds_count", v.probe)
        good = minus(good, _per_model_of_probe(v, f"rate({within}[{w}])"), fleet)
        observed = minus(observed, _per_model_of_probe(v, f"rate({answered}[{w}])"), fleet)
    total = sum_of([observed, availability.bad_rate], fleet)
    return [
        Recording(slo.total_rate, total),
        Recording(
            slo.bad_rate, f"clamp_min({slo.total_rate} - on ({fleet}) ({good}), 0)\nor\n{slo.total_rate}"
        ),
    ]


def _miss(slo: Slo, window: str) -> str:
    if window == SLO_WINDOWS[0]:
        return f"{slo.bad_rate}\n/\n({slo.total_rate} > 0)"
    bad = f"clamp_min({_events_over(slo.bad_rate, slo.bad_behind, window)}, 0)"
    return f"{bad}\n/\n({_events_over(slo.total_rate, slo.total_behind, window)} > 0)"


def _events_over(rate: str, behind: str, window: str) -> str:
    """Events a second over `window`: the mean of the base rate recorded at every evaluation,
    with the events its edges leave out (_behind) put back at the window's end and taken out at
    its start."""
    return (
        f"(\n  avg_over_time({rate}[{window}])\n"
        f"  + ({behind} - ({behind} offset {window} or {behind} * 0)) / {int(seconds(window))}\n)"
    )


def _behind(rate: str) -> str:
    """The events of the last base window (5m) the base rates recorded so far have not weighed.

    Each recorded rate looks back the base window, so the mean of those recorded over a window
    weighs its last 5 minutes on a ramp (a burst that began a minute ago is a fifth of the rate
    recorded then) and the 5 minutes before its start on the opposite ramp: a window summed so
    lags an instant count by up to half the base window, and a 30% error burst paged the 1h/5m
    tier 60 s after its detection time (benchmarks/alert_quality, day). What the ramp leaves out
    now is the base window's events (the rate now, whole) less the mean of the rates recorded
    over it, plus what it left out a base window ago, taken as half of the rate then: exact
    where the rate was steady from 10 to 5 minutes ago (a burst that began or ended in the last
    5 minutes, or more than 10 ago), else off by at most an eighth of a base window's events.
    Read a window ago from its own recorded history, it is what the window's start weighs too
    much. Before the base window has passed, nothing was."""
    base = SLO_WINDOWS[0]
    b = int(seconds(base))
    return f"{b} * {rate}\n- {b} * avg_over_time({rate}[{base}])\n+ {b // 2} * ({rate} offset {base} or {rate} * 0)"
