"""promtool cases of the SLO burn alerts: each tier's factor, windows, floors and history guard
from both sides, a quiet model, a pooling model, the canary, and a backlog that keeps a page
open. Every check is judged where windows.py finds the tier's state certain."""

from __future__ import annotations

import math
import re
from dataclasses import replace

from ...promql import bucket_text, number, seconds
from ...vocabulary import BURN_TIERS, SCRAPE_HISTORY, BurnTier, ModelClass, SloTarget
from ..expressions import burn_lookups
from ..model import Alert
from ..scenario_kit import (
    MODEL,
    REPLICA,
    Builder,
    Case,
    Check,
    Expect,
    Inputs,
    QueryCheck,
    minutes,
    series_text,
)
from .windows import Tier, Traffic, Windows

PER_MIN = 10000  # events a minute: enough that a share of them is exact to 1e-4
# Input series are written this long and cut to the case's length.
SPAN = 10_000
# Model names a class's cases may use, the first its rules select.
MODELS = (MODEL, "other-model-7b", "embed-e5", "chat-70b")


def burn_cases(name: str) -> Builder:
    def build(rules: list[Alert], inputs: Inputs) -> list[Case]:
        found = _class_of(inputs, name)
        if found is None:
            return []
        inputs, cls, target = found
        held = [c for c, _ in inputs.v.holding(name)]
        mine = rules[held.index(cls) * len(BURN_TIERS) :][: len(BURN_TIERS)]
        tiers = list(zip(BURN_TIERS, mine, strict=True))
        b = _Burn(inputs, target, tiers)
        cases = b.factor_cases() + b.one_window_cases() + b.floor_cases() + b.min_bad_cases()
        cases += b.min_bad_past_floor_cases()
        cases += b.young_cases() + b.recovery_cases()
        if name == "ttft":
            cases += b.outage_cases() + [b.backlog_case()]
        if name == "itl":
            cases += b.failures_left_out_cases() + [b.pooling_case()]
        if name == "availability":
            cases.append(b.quiet_case())
        if inputs.cfg.prometheus.probes and name != "itl":  # a one-token answer has no token gap
            cases.append(b.canary_only_case())
            if name == "availability":
                cases += b.refused_cases()
        return cases

    return build


def _class_of(inputs: Inputs, name: str) -> tuple[Inputs, ModelClass, SloTarget] | None:
    """Inputs for a model of the first class that holds SLO `name` and selects one of MODELS."""
    for cls, target in inputs.v.holding(name):
        for model in MODELS:
            if cls.matches({**inputs.partition(REPLICA), "model_name": model}):
                return inputs.with_model(model), cls, target
    return None


class _Burn:
    """One SLO's cases, for one model class."""

    def __init__(self, inputs: Inputs, target: SloTarget, tiers: list[tuple[BurnTier, Alert]]) -> None:
        self.inputs, self.target, self.tiers = inputs, target, tiers
        self.slo, c = target.slo, inputs.cfg.slo
        self.floor = {"slo.min_requests": c.min_requests, "slo.min_tokens": c.min_tokens}[self.slo.floor]
        self.name = tiers[0][1].name

    def judge(self, tier: BurnTier, rule: Alert) -> Tier:
        c = self.inputs.cfg.slo
        long = int(seconds(tier.long) // 60)
        return Tier(
            limit=tier.factor * self.target.budget,
            long=long,
            short=int(seconds(tier.short) // 60),
            floor=self.floor,
            min_bad=c.min_bad_events,
            young=long * 60 * c.min_history if c.min_history > 0 else None,
            for_=minutes(rule.for_),
            keep=minutes(rule.keep_firing_for),
        )

    # -- the checks ------------------------------------------------------------------------

    def checks(self, case: Case, w: Windows, at: list[int], observed: bool = True) -> None:
        """At each minute, every tier the windows say fires, with its long window's ratio;
        `observed`: the replica's histogram saw the misses (not so for failed requests)."""
        for m in at:
            for tier, rule in self.tiers:
                assert w.certain(m, self.judge(tier, rule)), (case.name, tier, m)
            firing = [
                self.expect(tier, rule, w, m, observed)
                for tier, rule in self.tiers
                if w.firing(m, self.judge(tier, rule))
            ]
            case.checks.append(Check(m, self.name, firing))

    def expect(self, tier: BurnTier, rule: Alert, w: Windows, m: int, observed: bool) -> Expect:
        """The tier's page at minute m, with what its description queries (one replica serves)."""
        judge = self.judge(tier, rule)
        long, short = w.ratio(m, judge.long) or 0.0, w.ratio(m, judge.short) or 0.0
        now = (w.ratio(m, 5) or 0.0) if observed else 0.0
        return self.page(tier, rule, long, short, w.per_second(m, judge.long), now)

    def page(self, tier: BurnTier, rule: Alert, long: float, short: float, rate: float, now: float) -> Expect:
        """A page whose windows miss `long` and `short`, on `rate` events a second, the replica `now`."""
        q, fleet = burn_lookups(self.inputs.v, self.target, tier), self.inputs.fleet_result()
        budget = self.target.budget
        lookups = {
            q["long"]: [(fleet, long / budget)],
            q["short"]: [(fleet, short / budget)],
            q["rate"]: [(fleet, rate)],
        }
        if "worst" in q and now > 0:
            lookups[q["worst"]] = [(self.inputs.result(REPLICA), now)]
        return Expect(rule, fleet, long, lookups)

    def judged(self, case: Case, w: Windows, tier: BurnTier, rule: Alert, at: list[int]) -> None:
        """Whether this tier alone fires at each minute (the others move too)."""
        judge = self.judge(tier, rule)
        for m in at:
            assert w.certain(m, judge), (case.name, tier, m)
            case.queries.append(_paging(self.inputs, rule, m, w.firing(m, judge)))

    def boundary(self, w: Windows, tier: BurnTier, rule: Alert, after: int = 0, step: int = 1) -> list[int]:
        """The last minute the tier is silent and the first it fires, from minute `after`."""
        judge = self.judge(tier, rule)
        first = next(m for m in range(after, w.span, step) if w.firing(m, judge))
        return [first - step, first]

    # -- traffic ---------------------------------------------------------------------------

    def events(self, case: Case, per_min: float, bad: float, inputs: Inputs | None = None) -> None:
        """`per_min` events a minute of the SLO, `bad` of them bad, as the source counts them."""
        inputs = inputs or self.inputs
        if self.slo.name == "availability":
            inputs.outcomes(case, SPAN, per_min - bad, bad)
            return
        inputs.outcomes(case, SPAN, per_min, 0)  # the requests: the floors count them
        self.observed(case, per_min, bad, inputs)

    def observed(self, case: Case, per_min: float, bad: float, inputs: Inputs | None = None) -> None:
        """`per_min` observations a minute of the latency SLO's histogram, `bad` over its threshold."""
        inputs = inputs or self.inputs
        sig = inputs.res[self.slo.signal]
        labels = inputs.labels(signal=sig)
        within = f"0+{number(per_min - bad)}x{SPAN}"
        case.add(series_text(sig.bucket, {**labels, "le": bucket_text(self.target.threshold)}), within)
        case.add(series_text(sig.count, labels), f"0+{number(per_min)}x{SPAN}")

    def parts(self, case: Case, per_min: float, parts: list[tuple[int, float]], span: int) -> None:
        """The case's events: `per_min` a minute, from each (minute, bad) of `parts` on that many bad."""
        series: dict[str, str] | None = None
        for at, bad in parts:
            part = Case("part")
            self.events(part, per_min, bad)
            series = part.series if series is None else _spliced(series, part.series, at, span)
        assert series is not None
        case.series = series

    def scraped(self, case: Case) -> None:
        """Prometheus scrapes the replica from minute 0: its history starts with the case."""
        case.add(series_text("up", {**self.inputs.base, **self.inputs.at_target(REPLICA)}), f"1+0x{SPAN}")

    # -- the cases -------------------------------------------------------------------------

    def factor_cases(self) -> list[Case]:
        """Each tier's burn factor from both sides, a fifth away, with steady misses: a factor 1.5x
        or 0.67x the one written fails one side. Judged at the tier's `for` boundary."""
        cases = []
        for tier, rule in self.tiers:
            for side, scale in (("above", 1.2), ("below", 0.8)):
                share = tier.factor * self.target.budget * scale
                if share >= 1:
                    continue  # no share of misses reaches this burn rate
                bad = round(PER_MIN * share)
                case = Case(
                    f"{self.name}: {bad / PER_MIN:.4%} of its {self.slo.events} miss, just {side} the "
                    f"{tier.long}/{tier.short} tier's {number(tier.factor)}x"
                )
                at = 1 + minutes(rule.for_)
                w = Windows(Traffic.parts(PER_MIN, [(0, bad)], at + 2))
                self.events(case, PER_MIN, bad)
                self.checks(case, w, [at - 1, at])
                cases.append(_cut(case))
        return cases

    def one_window_cases(self) -> list[Case]:
        """Each tier stays silent while only one of its windows burns: a burst that eased to a
        fifth under the rate (the long window still burns), a burst on a model just under it
        (only the short one burns). Where it is judged the tier with that window cut out fires."""
        cases = []
        for tier, rule in self.tiers:
            judge, limit = self.judge(tier, rule), tier.factor * self.target.budget
            step = 1 if judge.long <= 60 else 5
            for burning, (before, after, ratio) in (("long", (1.5, 0.8, 1)), ("short", (0.75, 1.2, 2))):
                if max(before, after) * limit >= 1:
                    continue
                second = -(-(judge.short + 5 + judge.for_ + 2 * step) // step) * step
                first = ratio * second
                at = first + second
                bad = [round(PER_MIN * share * limit) for share in (before, after)]
                w = Windows(Traffic.parts(PER_MIN, [(0, bad[0]), (first, bad[1])], at + 1), step)
                kept, other = (judge.long, judge.short) if burning == "long" else (judge.short, judge.long)
                for m in range(at - judge.for_ - step, at + 1, step):  # the tier less the other window fires
                    assert w.ratio(m, kept) > 1.05 * limit and 0.7 * limit < w.ratio(m, other) < 0.95 * limit
                case = Case(
                    f"{self.name}: only the {tier.long if burning == 'long' else tier.short} window of the "
                    f"{tier.long}/{tier.short} tier burns: it stays silent",
                    every=f"{step}m",
                )
                self.parts(case, PER_MIN, [(0, bad[0]), (first, bad[1])], at + 1)
                self.judged(case, w, tier, rule, [at])
                cases.append(case)
        return cases

    def floor_cases(self) -> list[Case]:
        """Each tier's traffic floor from both sides, a fifth away, every event a miss, most early, on
        a Prometheus as old as the case. Above: all in the judged window, judged once its last half
        (0.3x slo.min_bad_events) is all that a floor or minimum read over half the window sees."""
        cases = []
        for tier, rule in self.tiers:
            judge = self.judge(tier, rule)
            step, half = (1 if judge.long <= 60 else 5), judge.long // 2
            at = judge.long + judge.for_ + 2 * step
            for side, scale in (("above", 1.2), ("below", 0.8)):
                events = self.floor * scale
                if side == "above":  # past the rate's 5m and the tier's hold, on the steps
                    when = max(at, -(-(judge.long + 5 + judge.keep + 3 * step) // step) * step)
                    start, late = when - judge.long, 0.3 * judge.min_bad / half
                    early = (events - late * (when - half)) / (half - start)
                    # None before the judged window, so no earlier window holds more than it does.
                    phases = [(0, 0.0, 0.0), (start, early, early), (half, late, late)]
                else:
                    when, early, late = at, 0.8 * events / half, 0.2 * events / half
                    phases = [(0, early, early), (half, late, late)]
                w = Windows(_phases(phases, when + 1, scraped_from=0), step, step)
                case = Case(
                    f"{self.name}: every {self.slo.events[:-1]} misses, {side} {self.slo.floor} over "
                    f"{tier.long} ({number(round(self.floor * scale))} {self.slo.events}, most early in it)",
                    every=f"{step}m",
                    interval=f"{step}m",
                )
                self.phased(case, phases, when, step)
                self.scraped(case)
                self.judged(case, w, tier, rule, [when])
                cases.append(_cut(case, step))
        return cases

    def min_bad_cases(self) -> list[Case]:
        """Each tier's minimum of bad events from both sides, a fifth away, on a quiet model whose misses burn
        the tier and whose traffic passes its floor: above, three fifths in the long window's first half;
        below, seven tenths late. Only where the floor allows so few bad events to burn the tier."""
        cases = []
        for tier, rule in self.tiers:
            judge = self.judge(tier, rule)
            low, high = 1.05 * judge.floor, 0.8 * judge.min_bad / judge.limit
            if low >= high:
                continue  # the floor's events at this burn rate hold more bad ones than the minimum
            step, half = (1 if judge.long <= 60 else 5), judge.long // 2
            events = math.sqrt(low * high)  # over the long window
            at = judge.long + judge.for_ + 2 * step
            per_min = events / judge.long
            for side, scale, first in (("above", 1.2, 0.6), ("below", 0.8, 0.3)):
                early, late = (judge.min_bad * scale * share / half for share in (first, 1 - first))
                w = Windows(_phases([(0, per_min, early), (half, per_min, late)], at + 1), step, step)
                # The minimum alone decides: a third lower, or half higher, and the tier flips.
                assert w.firing(
                    at, replace(judge, min_bad=judge.min_bad * (1.5 if side == "above" else 0.67))
                ) != (side == "above"), (tier, side)
                case = Case(
                    f"{self.name}: a quiet model ({number(round(events))} {self.slo.events} over {tier.long}) "
                    f"with {number(round(judge.min_bad * scale, 2))} bad ones, {side} slo.min_bad_events",
                    every=f"{step}m",
                    interval=f"{step}m",
                )
                self.phased(case, [(0, per_min, early), (half, per_min, late)], at, step)
                # Above: also the minute before it fires, where a shorter window already would.
                edge = self.boundary(w, tier, rule, step=step)[:1] if side == "above" else []
                self.judged(case, w, tier, rule, edge + [at])
                cases.append(_cut(case, step))
        return cases

    def min_bad_past_floor_cases(self) -> list[Case]:
        """Where the floor's events at the burn rate hold more bad ones than the minimum but fewer than
        1.5x it: steady misses on a quiet model just past its floor, on an old Prometheus, with a
        tenth over the rate's share and under 1.5x the minimum, so a minimum read higher fails it."""
        cases = []
        for tier, rule in self.tiers:
            judge = self.judge(tier, rule)
            events = 1.05 * judge.floor
            low, high = max(1.1 * judge.limit * events, 1.05 * judge.min_bad), 0.95 * 1.5 * judge.min_bad
            if judge.floor * judge.limit < judge.min_bad or low >= high:
                continue  # the minimum decides below the floor (min_bad_cases), or the floor implies it
            step = 1 if judge.long <= 60 else 5
            at, bad = judge.long + judge.for_ + 2 * step, math.sqrt(low * high)
            per_min = events / judge.long
            w = Windows(Traffic.parts(per_min, [(0, bad / judge.long)], at + 1, scraped_from=0), step, step)
            assert not w.firing(at, replace(judge, min_bad=1.5 * judge.min_bad)), tier
            case = Case(
                f"{self.name}: a quiet model ({number(round(events))} {self.slo.events} over {tier.long}) "
                f"with {number(round(bad, 2))} bad ones, fewer than 1.5x slo.min_bad_events",
                every=f"{step}m",
                interval=f"{step}m",
            )
            self.phased(case, [(0, per_min, bad / judge.long)], at, step)
            self.scraped(case)
            self.judged(case, w, tier, rule, [at])
            cases.append(_cut(case, step))
        return cases

    def recovery_cases(self) -> list[Case]:
        """Each paging tier holds for its keep_firing_for once its windows stop burning, then
        resolves: a steady burst well over the tier's rate, then none. Judged at the last minute
        it holds and the first it does not, so a hold halved or doubled fails one of them."""
        cases = []
        for tier, rule in self.tiers:
            judge = self.judge(tier, rule)
            if not judge.keep:
                continue
            end = judge.for_ + 5
            span = end + judge.short + 5 + judge.keep + 10
            # Steep, so the short window clears sharply; eased until the minute it clears is certain.
            for share in (min(10 * judge.limit, 0.9) * 0.95**k for k in range(12)):
                bad = round(PER_MIN * share)
                w = Windows(Traffic.parts(PER_MIN, [(0, bad), (end, 0)], span))
                last = max(m for m in range(span) if w.firing(m, judge))
                if w.certain(last, judge) and w.certain(last + 1, judge):
                    break
            case = Case(
                f"{self.name}: the {tier.long}/{tier.short} tier holds {rule.keep_firing_for} after its "
                "windows stop burning, then resolves"
            )
            self.parts(case, PER_MIN, [(0, bad), (end, 0)], last + 2)
            self.judged(case, w, tier, rule, [last, last + 1])
            cases.append(_cut(case))
        return cases

    def phased(self, case: Case, phases: list[tuple[int, float, float]], span: int, step: int) -> None:
        """The case's events: from each (minute, events a minute, bad a minute) of `phases` on,
        sampled every `step` minutes, over minutes 0..span."""
        series: dict[str, str] | None = None
        for at, per_min, bad in phases:
            part = Case("part")
            self.events(part, per_min * step, bad * step)
            series = (
                part.series if series is None else _spliced(series, part.series, at // step, span // step + 1)
            )
        assert series is not None
        case.series = series

    def young_cases(self) -> list[Case]:
        """A stack that began scraping with the case. Misses at 1.4x a tier's limit fire it only
        once they are the limit's share of slo.min_history of its window (the unseen part counts
        as good); a quiet model's few bad events page nobody (counted as seen, not extrapolated).
        Both cross past half the window, where `held` over half the window would read less."""
        if self.inputs.cfg.slo.min_history <= 0:
            return []
        cases = []
        for tier, rule in self.tiers:
            judge = self.judge(tier, rule)
            share = 1.4 * judge.limit
            if share >= 1 or judge.young is None:
                continue  # no share of misses reaches this burn rate
            young, step = judge.young / 60, 1 if judge.long <= 360 else 5
            span = int(0.8 * young) + judge.for_ + 3 * step
            per_min = max(PER_MIN, math.ceil(1.5 * self.floor / judge.long))  # past its floor
            name = (
                f"{self.name}: {share:.2%} of its {self.slo.events} missing on a young Prometheus fire the "
                f"{tier.long}/{tier.short} tier only once the misses seen are {number(tier.factor)}x the "
                f"budget of {percent_of(self.inputs)} of {tier.long}"
            )
            cases += self._young(name, judge, tier, rule, per_min, per_min * share, span, step)
            # Quiet: min_bad seen at 0.7 of young, the ratio past its limit by 0.8 of that.
            bad, per_min = judge.min_bad / (0.7 * young), 1.2 * self.floor / judge.long
            if per_min * judge.limit * young <= 0.8 * judge.min_bad and bad < per_min:
                name = (
                    f"{self.name}: a quiet model on a young Prometheus fires the {tier.long}/{tier.short} "
                    f"tier only once it has seen {number(judge.min_bad)} bad {self.slo.events}"
                )
                cases += self._young(name, judge, tier, rule, per_min, bad, span, step)
        return cases

    def _young(
        self, name: str, judge: Tier, tier: BurnTier, rule: Alert, per_min: float, bad: float, span: int, step: int
    ) -> list[Case]:
        """A case with `bad` of `per_min` events a minute bad from minute 0, scraped from minute 0,
        judged at the nearest minutes around the tier's first firing where its state is certain
        (none where no such minutes fall within `span`: a configuration's own windows and `for`)."""
        w = Windows(Traffic.parts(per_min, [(0, bad)], span, scraped_from=0), step, step)
        first = next((m for m in range(0, span, step) if w.firing(m, judge)), None)
        if first is None:
            return []
        at = [
            next((m for m in range(first - step, 0, -step) if w.certain(m, judge)), None),
            next((m for m in range(first, span, step) if w.certain(m, judge)), None),
        ]
        if None in at:
            return []
        case = Case(name, every=f"{step}m", interval=f"{step}m")
        self.events(case, per_min * step, bad * step)
        self.scraped(case)
        self.judged(case, w, tier, rule, at)
        return [_cut(case, step)]

    def outage_cases(self) -> list[Case]:
        """Every request fails: no histogram observation at all, yet time to first token burns (a
        failed request never got its token)."""
        case = Case(f"{self.name} burns when every request fails and no token comes out")
        at = 1 + minutes(self.tiers[0][1].for_)
        if self.inputs.outcomes(case, SPAN, 0, PER_MIN) == "none":
            return []  # this source cannot tell a failure
        w = Windows(Traffic.parts(PER_MIN, [(0, PER_MIN)], at + 2))
        self.checks(case, w, [at - 1, at], observed=False)
        return [_cut(case)]

    def backlog_case(self) -> Case:
        """Three of four replicas die for ten minutes; every request then waits past the threshold
        for 25 minutes more, the survivors draining the backlog: the model's page (the capacity page,
        then this one) stays open throughout."""
        inputs, case = (
            self.inputs,
            Case(f"{self.name}: a backlog after an outage keeps the model's page open"),
        )
        down, back, drained, span = 60, 70, 95, 110
        for i, who in enumerate((REPLICA, "vllm-2:8000", "vllm-3:8000", "vllm-4:8000")):
            inputs.serving(case, SPAN, who)
            lost = i > 0
            up = f"1x{down - 1} 0x{back - down - 1} 1x{SPAN}" if lost else f"1+0x{SPAN}"
            case.add(series_text("up", {**inputs.base, **inputs.at_target(who)}), up)
        per_min = 600
        inputs.outcomes(case, SPAN, per_min, 0)
        sig = inputs.res[self.slo.signal]
        labels = inputs.labels(signal=sig)
        within = [per_min if not down <= m < drained else 0 for m in range(span)]
        case.add(
            series_text(sig.bucket, {**labels, "le": bucket_text(self.target.threshold)}), _counter(within)
        )
        case.add(series_text(sig.count, labels), f"0+{per_min}x{SPAN}")
        page = 'count(ALERTS{alertstate="firing", severity="critical"}) > bool 0'
        case.queries = [QueryCheck(m, page, [({}, 1)]) for m in range(down + 3, drained + 8)]
        return _cut(case)

    def failures_left_out_cases(self) -> list[Case]:
        """A failed request is not in a token-weighted SLO: the inter-token events are the
        observed gaps alone, whatever fails."""
        case = Case(f"{self.name}: failed requests are no inter-token events")
        if self.inputs.outcomes(case, SPAN, 600, 60) == "none":
            return []
        self.observed(case, 6000, 0)
        total = self.slo.total_rate
        case.queries = [QueryCheck(10, total, [({**self.inputs.fleet_result(), "__name__": total}, 100)])]
        return [_cut(case)]

    def pooling_case(self) -> Case:
        """A pooling model (embeddings) makes no tokens: no inter-token SLO at all, and one failed
        request of ten a second pages nobody."""
        inputs = self.inputs.with_model("embed-e5")
        case = Case(f"{self.name}: a pooling model's one failed request pages nobody")
        inputs.outcomes(case, SPAN, 600, 0)
        failed = "0x61 1+0x100"
        if inputs.res.reports_engine_errors:
            sig = inputs.res["request_success"]
            case.add(series_text(sig.name, inputs.labels(signal=sig, finished_reason="error")), failed)
        case.checks = [Check(m, self.name, []) for m in (62, 64, 66, 70)]
        miss = self.slo.miss("5m")
        case.queries = [QueryCheck(66, f'{miss}{{model_name="embed-e5"}}', [])]
        return _cut(case)

    def quiet_case(self) -> Case:
        """A quiet model (two requests a minute) that fails two of them pages nobody."""
        case = Case(f"{self.name}: a quiet model's two failed requests page nobody")
        self.inputs.outcomes(case, SPAN, 2, 0)
        if self.inputs.res.reports_engine_errors:
            sig = self.inputs.res["request_success"]
            case.add(
                series_text(sig.name, self.inputs.labels(signal=sig, finished_reason="error")), "0x61 2+0x100"
            )
        case.checks = [Check(m, self.name, []) for m in range(62, 76, 2)]
        return _cut(case)

    def canary_only_case(self) -> Case:
        """The canary's own requests (vLLM counts them; here slow ones) move no SLI."""
        inputs, rule = self.inputs, self.tiers[0][1]
        case = Case(f"{self.name}: the canary's own requests, the only traffic, move no SLI")
        per_min = 4
        inputs.serving(case, SPAN)
        inputs.traffic(
            case, per_min, SPAN, **({"length": per_min} if "request_success" in inputs.res.signals else {})
        )
        inputs.probe(case, SPAN, per_min=per_min, latency=2 * (self.target.threshold or 1))
        if self.slo.name == "ttft":
            sig = inputs.res["time_to_first_token"]
            labels = inputs.labels(signal=sig)
            case.add(
                series_text(sig.bucket, {**labels, "le": bucket_text(self.target.threshold)}), f"0+0x{SPAN}"
            )
            case.add(series_text(sig.count, labels), f"0+{per_min}x{SPAN}")
        total = self.slo.total_rate
        case.queries = [QueryCheck(6, total, [({**inputs.fleet_result(), "__name__": total}, 0)])]
        case.checks = [Check(6, rule.name, [])]
        return _cut(case)

    def refused_cases(self) -> list[Case]:
        """The canary's connections refused while every user request succeeds: a server that
        refuses connections records nothing, so they burn; unless the replica's log shows a
        planned stop and the start after it (the Service routes no user there)."""
        inputs, fast = self.inputs, self.tiers[0][1]
        users, refused = 600, 60  # a minute; 60 / 660 = 9.1% missed, over 14.4 x 0.1%
        at = 1 + minutes(fast.for_)
        log = {
            "ready": (["ready"], "0", {"startup_complete": "1"}),
            "planned": (["stopping", "starting"], "0 60", {"startup_complete": "1", "shutdown": "2"}),
        }
        if not inputs.cfg.prometheus.log_exporters:
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
            inputs.outcomes(case, SPAN, users, 0)
            inputs.probe(case, SPAN, per_min=refused, failing="refused")
            if inputs.cfg.prometheus.log_exporters:
                inputs.server_state(case, SPAN, since, states)
                inputs.event_times(case, SPAN, **events)
            share, tier = refused / (users + refused), self.tiers[0][0]
            w = Windows(Traffic.parts(users + refused, [(0, refused)], at + 2))
            rate = w.per_second(at, self.judge(tier, fast).long)
            expected = [] if planned else [self.page(tier, fast, share, share, rate, 0)]
            case.checks = [Check(at, fast.name, expected)]
            cases.append(_cut(case))
        return cases


def _phases(phases: list[tuple[int, float, float]], span: int, scraped_from: int | None = None) -> Traffic:
    """Events and bad ones a minute from each (minute, events, bad) of `phases` on, as `phased` writes them."""
    now = [next(p for p in reversed(phases) if p[0] <= m) for m in range(span)]
    return Traffic(tuple(p[1] for p in now), tuple(p[2] for p in now), scraped_from)


def percent_of(inputs: Inputs) -> str:
    return f"{inputs.cfg.slo.min_history:.0%}"


def _paging(inputs: Inputs, rule: Alert, minute: int, firing: bool) -> QueryCheck:
    """Whether this tier (alone: the others move too) fires at `minute`."""
    state = {"alertname": rule.name, "alertstate": "firing", **rule.labels}
    selected = ", ".join(f'{k}="{v}"' for k, v in state.items())
    labels = {**inputs.fleet_result(), **state, "severity": rule.severity, "__name__": "ALERTS"}
    return QueryCheck(minute, f"ALERTS{{{selected}}}", [(labels, 1)] if firing else [])


def _counter(per_minute: list[float]) -> str:
    """A counter rising by each minute's events, then flat."""
    values, total = ["0"], 0.0
    for n in per_minute:
        total += n
        values.append(number(total))
    return " ".join(values)


def _cut(case: Case, step: int = 1) -> Case:
    """The case's series cut to its length (written SPAN long)."""
    samples = case.minutes // step + 1
    case.series = {k: v.replace(f"x{SPAN}", f"x{samples}") for k, v in case.series.items()}
    return case


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
            start, op, delta, count = match.groups()
            sign = 1 if op == "+" else -1
            out += [float(start) + sign * float(delta) * i for i in range(min(int(count), span) + 1)]
        else:
            out.append(float(token))
        if len(out) >= span:
            break
    out += [out[-1]] * (span - len(out))
    return out[:span]


__all__ = ["burn_cases", "SCRAPE_HISTORY"]
