"""How soon each kind of page-worthy incident must page, from the bundle's own configuration
(issue 23's targets), in simulated seconds.

- An engine that dies and says so (its log line), a crash loop: one scrape (or log export) to
  see it, one evaluation, Alertmanager's group_wait, and 5 s. A start that fails: the same
  from its first failure, which comes after the planned stop's grace and a start's length
  (lifecycle.py).
- A silent death (no log line): the same after the bundle's `target_down_for`, the time a
  target must fail its scrapes before it counts as down (one failed scrape is not a death).
- A hung engine: the canary's interval and timeout, the hang alert's `for`, one evaluation
  and group_wait.
- An error burst or admission rejections of a known share: the fast-burn tier's detection time,
  the time the burn takes to spend 2% of a 30-day budget (share / (1 - objective) times the
  allowed rate), plus one evaluation and group_wait.
Kinds whose harm depends on the load (a spike, KV exhaustion, a slow replica) have no budget:
their time to page is reported as measured.
"""

from __future__ import annotations

from vllm_obs.config import BundleConfig
from vllm_obs.promql import seconds

from .canary import INTERVAL, TIMEOUT_S
from .lifecycle import GRACE, STARTUP
from .scenario import Incident

SLO_PERIOD = 30 * 86_400.0
FAST_BURN_SPEND = 0.02  # the 1h/5m tier pages once 2% of the period's budget is spent
SLACK = 5.0


def budget(incident: Incident, config: BundleConfig) -> float | None:
    """Seconds from the incident's start within which its page must come (None: no budget)."""
    a, p = config.alerts, config.prometheus
    scrape, evaluation = seconds(p.scrape_interval), seconds(p.evaluation_interval)
    notify = evaluation + seconds(config.alertmanager.group_wait)
    if incident.kind in ("engine_death", "crash_restart"):
        return scrape + notify + SLACK
    if incident.kind == "failed_start":
        return GRACE + STARTUP + scrape + notify + SLACK
    if incident.kind == "silent_death":
        return seconds(a.target_down_for) + scrape + notify + SLACK
    if incident.kind == "hung_engine":
        return INTERVAL + TIMEOUT_S + seconds(a.hung_for) + notify + SLACK
    if incident.kind in ("error_burst", "admission_rejections"):
        burn = incident.params["share"] / (1 - config.slo.availability_objective)
        return FAST_BURN_SPEND * SLO_PERIOD / burn + notify + SLACK
    return None
