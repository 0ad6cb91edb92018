"""SLO burn: a model spends its latency error budget too fast, over a long and a short window
(the multi-window, multi-burn-rate alerts of the SRE workbook and kubernetes-mixin)."""

from __future__ import annotations

from ...promql import bucket_text, number
from ...vocabulary import BURN_TIERS, Slo, Vocabulary, by, slo_miss
from ..declaration import Declared
from ..expressions import percent
from ..model import Alert
from ..runbook_kit import Section
from ..scenario_kit import Builder, Case, Check, Expect, Inputs, minutes, series_text

GROUP = "vllm-obs.slo-burn"

# The alert of each SLO, by its signal.
ALERTS = {
    "time_to_first_token": "VllmTimeToFirstTokenBudgetBurn",
    "inter_token_latency": "VllmTimePerOutputTokenBudgetBurn",
}


def declarations(v: Vocabulary) -> list[Declared]:
    by_key = {slo.key: slo for slo in v.slos}
    ttft = by_key.get("time_to_first_token")
    itl = by_key.get("inter_token_latency")
    return [
        Declared(
            name="VllmTimeToFirstTokenBudgetBurn",
            knobs=("slo.ttft_threshold_seconds", "slo.ttft_objective"),
            build=lambda v: _burn_rules(v, ttft),
            needs=("time_to_first_token",),
            panel="TTFT error-budget burn",
            runbook=_with_values(
                Section(
                    meaning=(
                        "The model misses its time-to-first-token SLO (the configured share of requests within "
                        "the threshold) fast enough to exhaust the error budget early. Multi-window, "
                        "multi-burn-rate: `long`/`short` name the two windows that both burn; 1h/5m and 6h/30m "
                        "page, 1d/2h and 3d/6h open a ticket-level warning."
                    ),
                    confirm=[
                        "Miss ratio per window: `{ttft_burn}`",
                        "Which replica: the p95 time to first token per instance, `{ttft_p95}`",
                    ],
                    act=["Find the slow replicas and follow VllmHighTimeToFirstToken."],
                ),
                ttft_burn=slo_miss("time_to_first_token", "1h"),
            ),
            scenarios=_burn_cases(ttft),
        ),
        Declared(
            name="VllmTimePerOutputTokenBudgetBurn",
            knobs=("slo.itl_threshold_seconds", "slo.itl_objective"),
            build=lambda v: _burn_rules(v, itl),
            needs=("inter_token_latency",),
            panel="TPOT error-budget burn",
            runbook=_with_values(
                Section(
                    meaning=(
                        "The model misses its time-per-output-token SLO (the configured share of output tokens "
                        "arriving within the threshold of the previous one) fast enough to exhaust the error "
                        "budget early. `long`/`short` name the burning windows."
                    ),
                    confirm=["Miss ratio per window: `{itl_burn}`", "Per replica: `{itl_p95}`"],
                    act=["Find the slow replicas and follow VllmHighTimePerOutputToken."],
                ),
                itl_burn=slo_miss("inter_token_latency", "1h"),
            ),
            scenarios=_burn_cases(itl),
        ),
    ]


def _with_values(section: Section, **values: str) -> Section:
    return Section(section.meaning, section.confirm, section.act, values)


def _burn_rules(v: Vocabulary, slo: Slo | None) -> list[Alert]:
    assert slo is not None  # the assembler builds an alert only when its signal is there
    sc = v.targets
    out = []
    for tier in BURN_TIERS:
        limit = f"({number(tier.factor)} * {number(slo.budget)})"
        out.append(
            Alert(
                name=ALERTS[slo.key],
                expr=(
                    f"{slo_miss(slo.key, tier.long)} > {limit}\n"
                    f"and on ({by(sc.fleet_model)})\n{slo_miss(slo.key, tier.short)} > {limit}"
                ),
                for_=tier.for_,
                severity=tier.severity,
                labels={"long": tier.long, "short": tier.short},
                summary=f"vLLM is burning its {slo.what} error budget too fast.",
                description=(
                    f"Model {{{{ $labels.model_name }}}} (job {{{{ $labels.job }}}}{sc.in_cluster}) misses its {slo.what} "
                    f"SLO on {{{{ $value | humanizePercentage }}}} of requests over {tier.long}, "
                    f"{number(tier.factor)}x the rate its {percent(slo.objective)} objective allows."
                ),
                dashboard="overview",
            )
        )
    return out


def _burn_cases(slo: Slo | None) -> Builder:
    def build(rules: list[Alert], io: Inputs) -> list[Case]:
        assert slo is not None
        sig = io.res[slo.key]
        threshold, budget = slo.threshold, 1 - slo.objective
        tiers = {(r.labels["long"], r.labels["short"]): r for r in rules}
        factors = {(t.long, t.short): t.factor for t in BURN_TIERS}
        fastest = max(factors.values())
        slowest = min(factors.values())
        cases = []
        for title, miss in (
            ("just above the fastest burn rate", min(1.0, fastest * budget * 1.1)),
            ("just below the fastest burn rate", fastest * budget * 0.9),
            ("just below the slowest burn rate", slowest * budget * 0.9),
        ):
            per_min = 10000
            bad = round(per_min * miss)
            case = Case(f"{rules[0].name}: misses {bad / per_min:.4%} of the SLO, {title}")
            labels = io.labels(signal=sig)
            case.add(
                series_text(sig.bucket, {**labels, "le": bucket_text(threshold)}),
                f"0+{per_min - bad}x{{span}}",
            )
            case.add(series_text(sig.count, labels), f"0+{per_min}x{{span}}")
            value = 1 - (per_min - bad) / per_min
            result = io.fleet_result()
            checks = []
            firing_tiers = [t for t, f in factors.items() if value > f * budget]
            for tier in firing_tiers:
                at = 1 + minutes(tiers[tier].for_)
                checks += [at - 1, at]
            checks = sorted(set(checks)) or [1 + max(minutes(r.for_) for r in rules)]
            for minute in checks:
                expected = [
                    Expect(tiers[t], result, value)
                    for t in firing_tiers
                    if minute >= 1 + minutes(tiers[t].for_)
                ]
                case.checks.append(Check(minute, rules[0].name, expected))
            span = max(c.minute for c in case.checks) + 1
            case.series = {k: v.replace("{span}", str(span)) for k, v in case.series.items()}
            cases.append(case)
        return cases

    return build
