"""How soon each kind of page-worthy incident must page, stated from what its users lose, in
simulated seconds from the incident's start. Nothing here reads the rules under test (no `for`,
window or group wait of the bundle): a budget moves only when the harm does, and a rule set
with another design is judged by the same yardstick.

- Capacity lost (a death logged or silent, a hang, a crash loop, a start that fails, a backlog
  after one): every user routed to a lost replica fails or waits from the first second, and a
  model near or below its floor cannot serve its traffic. Five minutes: the time an on-call
  engineer is expected to be looking at an outage (the SRE workbook's fast page).
- A share of failed or refused requests: the time that share takes to spend 2% of a 30-day
  error budget of the users' availability objective (the scenario's, 99.9% unless it says),
  plus five minutes to notice. A 30% burst: 173 s + 300 s; a 5% one: 1037 s + 300 s.
- A latency SLO missed by most requests (a spike beyond capacity, the KV cache exhausted, a
  slow replica that deserves a page): five minutes, as for lost capacity; the users wait now.
Kinds that must not page (a planned restart or upgrade, a quiet window) have no budget.
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
