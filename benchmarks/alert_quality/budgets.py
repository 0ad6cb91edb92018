"""How soon each kind of page-worthy incident must page, in simulated seconds from its start, stated
from what its users lose (README, "Budgets from harm"). Nothing here reads the rules under test, so
a rule set of another design meets the same yardstick; kinds that must not page have no budget.
"""

from __future__ import annotations

from .scenario import Incident, Scenario

SLO_PERIOD = 30 * 86_400.0
FAST_BURN_SPEND = 0.02  # the share of a 30-day budget a page may let go before it comes
NOTICE = 300.0  # five minutes: an outage's users are hurt from its first second

CAPACITY = ("engine_death", "silent_death", "hung_engine", "crash_restart", "failed_start", "backlog")
FAILED_SHARE = ("error_burst", "admission_rejections")
LATENCY = ("traffic_spike", "kv_exhaustion", "slow_replica")


def budget(incident: Incident, availability_objective: float) -> float | None:
    """Seconds from the incident's start within which its page must come (None: no budget)."""
    if incident.kind in CAPACITY or incident.kind in LATENCY:
        return NOTICE
    if incident.kind in FAILED_SHARE:
        burn = incident.params["share"] / (1 - availability_objective)
        return FAST_BURN_SPEND * SLO_PERIOD / burn + NOTICE
    return None


def budgets(scenario: Scenario) -> dict[str, float]:
    """Each page-worthy incident's budget, by id."""
    return {
        i.id: b
        for i in scenario.incidents
        if i.expect == "page" and (b := budget(i, scenario.availability_objective)) is not None
    }
