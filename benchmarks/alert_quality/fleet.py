"""The simulated fleet: each scenario model's replicas behind a Service that spreads its
requests at random over the ready ones, as a Kubernetes Service (kube-proxy) does.

A replica taken out of service (dead, restarting, out of the endpoints) receives nothing; a
request that finds no ready replica of its model fails, as a connection to a Service without
endpoints is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .exposition import ReplicaMetrics
from .replica import EngineParams, Replica, Request
from .scenario import Model
from .traces import Arrivals


@dataclass
class Member:
    model: str
    namespace: str
    index: int
    replica: Replica
    metrics: ReplicaMetrics
    ready: bool = True

    @property
    def instance(self) -> str:
        """Its scrape target name, as a pod IP and port would be (unique in the fleet)."""
        return f"{self.model}-{self.index}:8000"


@dataclass
class Service:
    model: Model
    members: list[Member]
    arrivals: Arrivals
    next: int = 0  # the first arrival not yet routed
    refused: int = 0  # requests that found no ready replica
    routed: list[int] = field(default_factory=list)  # per member


class Fleet:
    def __init__(
        self, models: list[tuple[Model, EngineParams, Arrivals]], started: float, seed: int, template=None
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.services: list[Service] = []
        for model, params, arrivals in models:
            members = [
                Member(
                    model.model,
                    model.namespace,
                    i,
                    Replica(params),
                    ReplicaMetrics(model.model, started, template),
                )
                for i in range(model.replicas)
            ]
            self.services.append(Service(model, members, arrivals, routed=[0] * len(members)))
        self.now = 0.0

    @property
    def members(self) -> list[Member]:
        return [m for s in self.services for m in s.members]

    def advance(self, t: float) -> None:
        """Route every request that arrived before t and run every replica to t."""
        for service in self.services:
            a = service.arrivals
            while service.next < len(a.time) and a.time[service.next] < t:
                i = service.next
                service.next += 1
                ready = [k for k, m in enumerate(service.members) if m.ready]
                if not ready:
                    service.refused += 1
                    continue
                k = ready[int(self.rng.integers(len(ready)))]
                member = service.members[k]
                member.replica.run_until(float(a.time[i]))
                member.replica.submit(Request(float(a.time[i]), int(a.prompt[i]), int(a.output[i])))
                service.routed[k] += 1
            for member in service.members:
                member.replica.run_until(t)
                member.metrics.update(member.replica)
        self.now = t
