"""The `workbook` rule set: this checkout's bundle with its SLO burn pages as the SRE workbook writes
them (kubernetes-mixin's tiers: TIERS), to judge the bundle's paging against the textbook. It keys
on the burn alerts' names, `long`/`short` labels and recorded miss ratios; the README gives the form.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from vllm_obs.config import BundleConfig
from vllm_obs.errors import BundleError
from vllm_obs.layout import ALERT_RULES
from vllm_obs.vocabulary import scope_of, slos


@dataclass(frozen=True)
class Tier:
    long: str
    short: str
    factor: float
    hold: str
    severity: str


# The SRE workbook's four tiers with kubernetes-mixin's holds and severities.
TIERS = (
    Tier("1h", "5m", 14.4, "2m", "critical"),
    Tier("6h", "30m", 6.0, "15m", "critical"),
    Tier("1d", "2h", 3.0, "1h", "warning"),
    Tier("3d", "6h", 1.0, "3h", "warning"),
)
# Each SLO's burn alert, by the SLO's name in vllm_obs.vocabulary.slos.
BURN_ALERTS = {
    "availability": "VllmAvailabilityBudgetBurn",
    "ttft": "VllmTimeToFirstTokenBudgetBurn",
    "itl": "VllmTimePerOutputTokenBudgetBurn",
}
CAPACITY_ALERT = "VllmModelCapacityLow"
CAPACITY_HOLD = "2m"


def miss_ratio(metric: str, window: str) -> str:
    return f"job_model:{metric}:slo_miss_ratio_{window}"


def tier_expression(metric: str, tier: Tier, budget: float, fleet: tuple[str, ...]) -> str:
    threshold = f"({tier.factor:g} * {budget:g})"
    return (
        f"{miss_ratio(metric, tier.long)} > {threshold}\n"
        f"and on ({', '.join(fleet)})\n"
        f"{miss_ratio(metric, tier.short)} > {threshold}"
    )


def rewrite(alert_rules: dict, recorded: set[str], cfg: BundleConfig) -> dict:
    """The bundle's alert rule file (parsed) with the workbook's pages; `recorded` is every name
    the bundle's recording rules record (each tier must read recorded ratios)."""
    by_alert = {BURN_ALERTS[s.name]: s for s in slos(cfg) if s.name in BURN_ALERTS}
    fleet = scope_of(cfg).fleet_model
    tiers = {(t.long, t.short): t for t in TIERS}
    seen: dict[str, set[tuple[str, str]]] = {}
    capacity = 0
    for group in alert_rules.get("groups", []):
        for rule in group.get("rules", []):
            rule.pop("keep_firing_for", None)
            name = rule.get("alert")
            if name == CAPACITY_ALERT:
                rule["for"] = CAPACITY_HOLD
                capacity += 1
            if name not in by_alert:
                continue
            slo, labels = by_alert[name], rule.get("labels", {})
            key = (labels.get("long"), labels.get("short"))
            tier = tiers.get(key)
            if tier is None:
                raise BundleError(
                    f"{name} has a tier long={key[0]} short={key[1]} that the workbook does not have; "
                    f"its tiers are {', '.join(f'{t.long}/{t.short}' for t in TIERS)}."
                )
            for window in (tier.long, tier.short):
                if miss_ratio(slo.metric, window) not in recorded:
                    raise BundleError(
                        f"the bundle records no {miss_ratio(slo.metric, window)}, which {name} reads."
                    )
            rule["expr"] = tier_expression(slo.metric, tier, slo.budget, fleet)
            rule["for"] = tier.hold
            rule["labels"] = {**labels, "severity": tier.severity}
            # Its own words: the bundle's description queries series the workbook's tiers need not record.
            rule.setdefault("annotations", {})["description"] = (
                "Model {{ $labels.model_name }} (job {{ $labels.job }}) misses its SLO on "
                f"{{{{ $value | humanizePercentage }}}} of its events over {tier.long}, and over {tier.short} "
                f"too: more than {tier.factor:g}x its {slo.budget:.2%} budget (the SRE workbook's tier)."
            )
            seen.setdefault(name, set()).add(key)
    for name in by_alert:
        missing = set(tiers) - seen.get(name, set())
        if name in seen and missing:
            raise BundleError(
                f"{name} lacks the workbook tier(s) {', '.join('/'.join(k) for k in sorted(missing))}."
            )
    if not seen:
        raise BundleError("the bundle has no SLO burn alert to rewrite; it is not a bundle of this project.")
    if capacity == 0:
        raise BundleError(f"the bundle has no {CAPACITY_ALERT}; it is not a bundle of this project.")
    return alert_rules


def recorded_names(rule_files: list[Path]) -> set[str]:
    return {
        rule["record"]
        for path in rule_files
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", [])
        for rule in group.get("rules", [])
        if "record" in rule
    }


def apply(bundle: Path, cfg: BundleConfig) -> None:
    """Rewrite a generated bundle's alert rule file in place."""
    path = bundle / ALERT_RULES
    rules = sorted((bundle / "alerts").glob("*.rules.yml"))
    data = rewrite(yaml.safe_load(path.read_text()), recorded_names(rules), cfg)
    staged = path.with_suffix(".tmp")
    staged.write_text(yaml.safe_dump(data, sort_keys=False, width=120))
    staged.replace(path)
