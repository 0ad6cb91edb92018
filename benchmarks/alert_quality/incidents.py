"""What each kind of incident does to the fleet, over simulated time. `schedule` turns a scenario's
incidents into changes on the targeted members, applied as the fleet's clock passes them; `spiked`
adds a spike's extra requests to a model's arrivals. The times a restart takes are lifecycle.py's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from vllm_obs.promql import seconds

from .fleet import Fleet, Member
from .lifecycle import GRACE, STARTUP, backoff
from .replica import Request
from .scenario import Incident, Scenario
from .traces import Arrivals


def targets(fleet: Fleet, incident: Incident) -> list[Member]:
    """The members an incident acts on: the first `replicas` of its model, or the first
    `fraction` of them (at least one), or all."""
    service = next(s for s in fleet.services if s.model.model == incident.target.model)
    members, t = service.members, incident.target
    if t.replicas is not None:
        return members[: t.replicas]
    if t.fraction is not None:
        return members[: max(1, round(t.fraction * len(members)))]
    return members


def schedule(fleet: Fleet, scenario: Scenario, startup: float = STARTUP) -> None:
    """Schedule every incident of the scenario on the fleet (traffic spikes excepted: see
    `spiked`, which acts on the arrivals)."""
    for incident in scenario.incidents:
        act = ACTIONS[incident.kind]
        for member in targets(fleet, incident):
            act(member, incident, startup)


# -- one function per kind: (member, incident, startup) -> None ------------------------------


def _death(logged: bool) -> Callable[[Member, Incident, float], None]:
    def act(member: Member, incident: Incident, startup: float) -> None:
        """Dead from `at`; started again so as to be ready at the incident's end (later, if
        the orchestrator's first back-off and a start do not fit)."""
        member.at(incident.at, lambda m, at: m.engine_dies(at, logged=logged))
        member.restart(max(incident.end - startup, incident.at + backoff(0)), startup)

    return act


def _hung(member: Member, incident: Incident, startup: float) -> None:
    member.at(incident.at, lambda m, at: setattr(m.replica, "hung", True))
    member.at(incident.end, lambda m, at: setattr(m.replica, "hung", False))


def _crash_restart(member: Member, incident: Incident, startup: float) -> None:
    """`restarts` deaths spread over the incident, each followed by the orchestrator's back-off
    (doubling) and a start; a death comes only once the server is ready again."""
    cycle = incident.duration / incident.params["restarts"]
    t = incident.at
    for k in range(incident.params["restarts"]):
        member.at(t, lambda m, at: m.engine_dies(at, logged=True))
        start = t + backoff(k)
        member.restart(start, startup)
        t = max(t + cycle, start + startup + 1)


def _failed_start(member: Member, incident: Incident, startup: float) -> None:
    """A rollout with a configuration the server cannot start with: a planned stop at `at`,
    then every start fails at engine initialisation (half way through a start) with the
    orchestrator's back-off between them, until a start that can succeed is ready at `end`."""
    member.stop(incident.at)
    good = incident.end - startup
    t, k = incident.at + GRACE, 0
    while t + backoff(k) + startup / 2 < good:
        t += backoff(k)
        member.restart(t, startup / 2, fails=True)
        t += startup / 2
        k += 1
    # The fixed configuration rolls out as a new pod: no back-off before it.
    member.restart(max(good, t), startup)


def _engine_fault(name: str, on: Callable[[Incident], object], off: object) -> Callable:
    def act(member: Member, incident: Incident, startup: float) -> None:
        member.at(incident.at, lambda m, at: setattr(m.replica, name, on(incident)))
        member.at(incident.end, lambda m, at: setattr(m.replica, name, off))

    return act


def _kv_exhaustion(member: Member, incident: Incident, startup: float) -> None:
    member.at(incident.at, lambda m, at: m.replica.limit_kv(incident.params["fraction"]))
    member.at(incident.end, lambda m, at: m.replica.limit_kv(1.0))


def _share(name: str) -> Callable[[Member, Incident, float], None]:
    """A share of the requests routed to the member fail (error_share: a 5xx) or are refused
    (reject_share: a 4xx at admission) for the incident's length."""

    def act(member: Member, incident: Incident, startup: float) -> None:
        member.at(incident.at, lambda m, at: setattr(m, name, incident.params["share"]))
        member.at(incident.end, lambda m, at: setattr(m, name, 0.0))

    return act


def _rolling_restart(member: Member, incident: Incident, startup: float) -> None:
    """One replica after the other, `per_replica` apart in the order of the model's replicas:
    each stopped gracefully and started again at once."""
    step = seconds(str(incident.params["per_replica"]))
    stop = incident.at + member.index * step
    member.stop(stop)
    member.restart(stop + GRACE, startup)


def _backlog(member: Member, incident: Incident, startup: float) -> None:
    """A logged death whose clients re-send what was in flight to the replicas still ready (in
    turn); back, as a death is, at the incident's end. The queue the survivors took meanwhile
    drains only through them: new requests spread over every ready replica."""

    def dies(m: Member, at: float) -> None:
        left = [
            Request(at, r.prompt, r.output, pooling=r.pooling)
            for r in (*m.replica.running, *m.replica.waiting)
        ]
        m.engine_dies(at, logged=True)
        assert m.service is not None
        ready = [o for o in m.service.members if o is not m and o.ready]
        if not ready:
            m.service.refused += len(left)
            return
        for k, request in enumerate(left):
            survivor = ready[k % len(ready)]
            survivor.replica.run_until(at)
            survivor.replica.submit(request)
        m.resent += len(left)

    member.at(incident.at, dies)
    member.restart(max(incident.end - startup, incident.at + backoff(0)), startup)


def _model_upgrade(member: Member, incident: Incident, startup: float) -> None:
    """A planned restart, one replica after the other (`per_replica` apart): each stopped
    gracefully, then started serving the model `to` on the same host and Service."""
    step = seconds(str(incident.params["per_replica"]))
    stop = incident.at + member.index * step
    member.stop(stop)
    member.at(stop + GRACE, lambda m, at: setattr(m, "model", incident.params["to"]))
    member.restart(stop + GRACE, startup)


def _nothing(member: Member, incident: Incident, startup: float) -> None:
    """A quiet window, and a traffic spike (which acts on the arrivals, see `spiked`)."""


ACTIONS: dict[str, Callable[[Member, Incident, float], None]] = {
    "engine_death": _death(logged=True),
    "silent_death": _death(logged=False),
    "hung_engine": _hung,
    "crash_restart": _crash_restart,
    "failed_start": _failed_start,
    "slow_replica": _engine_fault("slowdown", lambda i: i.params["factor"], 1.0),
    "kv_exhaustion": _kv_exhaustion,
    "error_burst": _share("error_share"),
    "admission_rejections": _share("reject_share"),
    "traffic_spike": _nothing,
    "rolling_restart": _rolling_restart,
    "backlog": _backlog,
    "model_upgrade": _model_upgrade,
    "quiet": _nothing,
}


def spiked(base: Arrivals, extra: Arrivals, at: float) -> Arrivals:
    """`base` with `extra` (arrivals from time 0, made of the same trace at the spike's added
    rate for its length) laid over it from `at`: the model's traffic multiplied for a while,
    each added request with its own lengths."""
    time = np.concatenate([base.time, extra.time + at])
    order = np.argsort(time, kind="stable")
    return Arrivals(
        time[order],
        np.concatenate([base.prompt, extra.prompt])[order],
        np.concatenate([base.output, extra.output])[order],
    )
