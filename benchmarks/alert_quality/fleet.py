"""The simulated fleet: each model's replicas behind a Service spreading requests over the ready ones
(serving, and ready by the canary's /ready where one probes; none ready fails the request). Incidents
are changes scheduled on members (incidents.py); a restarted server gets a fresh engine and counters."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .background import Background
from .exposition import ReplicaMetrics
from .lifecycle import GRACE, Server
from .replica import EngineParams, Replica, Request
from .scenario import Model
from .traces import Arrivals

QUIET = Background(error_share=0.0, abort_share=0.0, rhythm=0.0, client_timeout=0.0)  # none at all


def instance_name(model: str, index: int) -> str:
    """A replica's scrape target name, as a pod IP and port would be (unique in the fleet)."""
    return f"{model}-{index}:8000"


def instance_names(models) -> list[str]:
    """Every replica's name, in the fleet's order, from the scenario's models."""
    return [instance_name(m.model, i) for m in models for i in range(m.replicas)]


@dataclass
class Member:
    model: str
    namespace: str
    index: int
    params: EngineParams
    epoch: float  # Unix seconds of simulated time 0
    template: object
    drain: bool = False  # see ReplicaMetrics: a long run's memory stays flat
    replica: Replica = field(init=False)
    metrics: ReplicaMetrics = field(init=False)
    server: Server = field(init=False)
    task: str = "generate"  # or "embed": a pooling model
    error_share: float = 0.0  # of the requests routed here, failed inside the engine (a 5xx)
    reject_share: float = 0.0  # refused at admission (a 4xx)
    background: Background = field(default_factory=lambda: QUIET)  # errors and aborts of a healthy day
    lost: int = 0  # in flight when its engine died or a stop's grace ran out, over every start
    resent: int = 0  # of those, re-sent by their clients to other replicas (a backlog)
    died_at: float | None = None  # the last engine death
    probe_ready: bool = True  # what the canary's /ready says (canary.py), as kubelet reads it
    service: Service | None = field(default=None, repr=False, compare=False)  # told of each change
    _pending: list = field(default_factory=list)
    _order: itertools.count = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.server = Server.ready_at(self.epoch)
        self._fresh_engine(0.0)
        self.host = instance_name(self.model, self.index)  # kept when it serves another model

    @property
    def instance(self) -> str:
        return self.host

    @property
    def ready(self) -> bool:
        return self.server.serving and self.probe_ready

    def exposition(self) -> str:
        """The replica's /metrics now: what it observed since the last read taken in."""
        self.metrics.update(self.replica)
        return self.metrics.render()

    # -- scheduling ----------------------------------------------------------------------

    def at(self, when: float, change: Callable[[Member, float], None]) -> None:
        """Schedule `change(member, when)`."""
        heapq.heappush(self._pending, (when, next(self._order), change))
        if self.service is not None:
            self.service.earliest = min(self.service.earliest, when)

    def apply_until(self, t: float) -> None:
        """Apply every change scheduled before t, in time order, the engine run up to each."""
        while self._pending and self._pending[0][0] < t:
            when, _, change = heapq.heappop(self._pending)
            if self.server.engine_alive:
                self.replica.run_until(when)
            change(self, when)

    # -- what incidents do ---------------------------------------------------------------

    def engine_dies(self, at: float, logged: bool = True) -> None:
        self.lost += self.replica.die()
        self.died_at = at
        self.server.engine_dies(at, logged)

    def stop(self, at: float) -> None:
        """Schedule a planned stop at `at`: out of the Service at once, stopped after the grace
        period, what it still holds then lost. (Both scheduled now, so that a start scheduled
        after this call for the moment the grace ends comes after the stop.)"""
        self.at(at, lambda m, t: m.server.stopping(t))
        self.at(at + GRACE, Member._stopped)

    def _stopped(self, at: float) -> None:
        self.lost += self.replica.die()
        self.server.stopped(at)

    def restart(self, at: float, startup: float, fails: bool = False) -> None:
        """The process starts at `at`; loading a third of the way in; ready (or failed) after
        `startup`."""
        self.at(at, lambda m, t: m.server.begins_start(t))
        self.at(at + startup / 3, lambda m, t: m.server.loads(t))
        self.at(at + startup, lambda m, t: m.server.fails_start(t) if fails else m._started(t))

    def _started(self, at: float) -> None:
        self._fresh_engine(at)
        self.server.completes_start(at)

    def _fresh_engine(self, at: float) -> None:
        self.replica = Replica(self.params)
        self.replica.now = at
        self.replica.timeout = self.background.client_timeout or None
        self.metrics = ReplicaMetrics(self.model, self.epoch + at, self.template, drain=self.drain)


@dataclass
class Service:
    model: Model
    members: list[Member]
    arrivals: Arrivals
    next: int = 0  # the first arrival not yet routed
    refused: int = 0  # requests that found no ready replica
    routed: list[int] = field(default_factory=list)  # per member
    earliest: float = float("inf")  # the first change scheduled on any member not yet applied
    ready: list[int] = field(default_factory=list)  # the members ready, as of the last change

    def apply_until(self, t: float) -> None:
        """Every member's changes scheduled before t, then who is ready."""
        if self.earliest < t:
            for member in self.members:
                member.apply_until(t)
            heads = [m._pending[0][0] for m in self.members if m._pending]
            self.earliest = min(heads, default=float("inf"))
        self.ready = [k for k, m in enumerate(self.members) if m.ready]


class Fleet:
    def __init__(
        self,
        models: list[tuple[Model, EngineParams, Arrivals]],
        started: float,
        seed: int,
        template=None,
        drain: bool = False,
        background: Background = QUIET,
    ) -> None:
        """background: the errors and client aborts of a healthy fleet (background.py); its
        draws come from a generator of their own, so the routing is the same without them."""
        self.rng = np.random.default_rng(seed)
        self.noise = np.random.default_rng([seed, 1])
        self.services: list[Service] = []
        for model, params, arrivals in models:
            members = [
                Member(
                    model.model,
                    model.namespace,
                    i,
                    params,
                    started,
                    template,
                    drain,
                    task=model.task,
                    background=background,
                )
                for i in range(model.replicas)
            ]
            service = Service(model, members, arrivals, routed=[0] * len(members))
            for member in members:
                member.service = service
            self.services.append(service)
        self.now = 0.0

    @property
    def members(self) -> list[Member]:
        return [m for s in self.services for m in s.members]

    def advance(self, t: float, metrics: bool = True) -> None:
        """Route every request that arrived before t and run every live engine to t, each
        member's scheduled changes applied in time order between the arrivals. metrics=False
        leaves the expositions to be brought up to date when read (`Member.exposition`)."""
        for service in self.services:
            a = service.arrivals
            times, prompts, outputs = a.time, a.prompt, a.output
            service.earliest = min(
                (m._pending[0][0] for m in service.members if m._pending), default=float("inf")
            )
            service.ready = [k for k, m in enumerate(service.members) if m.ready]
            while service.next < len(times) and times[service.next] < t:
                i = service.next
                service.next += 1
                at = float(times[i])
                if service.earliest < at:
                    service.apply_until(at)
                ready = service.ready
                if not ready:
                    service.refused += 1
                    continue
                k = ready[int(self.rng.integers(len(ready)))]
                service.routed[k] += 1
                self._route(service.members[k], at, int(prompts[i]), int(outputs[i]))
            for member in service.members:
                member.apply_until(t)
                if member.server.engine_alive:
                    member.replica.run_until(t)
                if metrics:
                    member.metrics.update(member.replica)
        self.now = t

    def _route(self, member: Member, at: float, prompt: int, output: int) -> None:
        """One request to one member: refused or failed by the share an incident set (or the
        background's errors), else submitted to its engine, where its client may abandon it."""
        draw, seen, quiet = self.rng.random(), member.replica.seen, member.background
        if draw < member.reject_share:
            seen.refused += 1
        elif draw < member.reject_share + member.error_share + quiet.error_share:
            seen.errored += 1
        else:
            member.replica.run_until(at)
            request = Request(at, prompt, output, pooling=member.task == "embed")
            member.replica.submit(request)
            if quiet.abort_share and self.noise.random() < quiet.abort_share:
                patience = float(self.noise.exponential(quiet.abort_after))
                member.at(at + patience, lambda m, t, r=request: m.replica.abort(r))
