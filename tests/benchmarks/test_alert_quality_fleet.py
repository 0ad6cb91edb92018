"""The simulated fleet routes every request to a ready replica of its model, spread evenly, and
refuses requests when none is ready."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.alert_quality.fleet import Fleet
from benchmarks.alert_quality.scenario import Model
from benchmarks.alert_quality.traces import Arrivals
from benchmarks.fleet.exposition import load_template
from tests.benchmarks.test_alert_quality_replica import params

TEMPLATE = load_template()


def steady(rate: float, duration: float, seed: int = 1) -> Arrivals:
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1 / rate, size=int(rate * duration * 1.2)))
    times = times[times < duration]
    return Arrivals(times, rng.integers(50, 200, len(times)), rng.integers(5, 50, len(times)))


def fleet(replicas: int, arrivals: Arrivals) -> Fleet:
    model = Model("chat", "llm-chat", replicas, "conv", 1.0)
    return Fleet([(model, params(), arrivals)], started=0.0, seed=3, template=TEMPLATE)


def test_every_request_reaches_a_replica_and_the_load_is_even():
    arrivals = steady(rate=4, duration=600)
    f = fleet(4, arrivals)
    for t in range(60, 601, 60):
        f.advance(t)
    service = f.services[0]
    assert sum(service.routed) == len(arrivals.time) and service.refused == 0
    assert max(service.routed) / min(service.routed) < 1.3
    finished = sum(m.replica.seen.finished for m in f.members)
    assert finished >= len(arrivals.time) - 4 * 8  # all but what is still in flight
    assert {m.instance for m in f.members} == {f"chat-{i}:8000" for i in range(4)}


def test_a_replica_out_of_service_gets_nothing_and_none_ready_refuses():
    arrivals = steady(rate=4, duration=300)
    f = fleet(2, arrivals)
    f.advance(100)
    f.members[0].server.serving = False
    before = f.services[0].routed[0]
    f.advance(200)
    assert f.services[0].routed[0] == before and f.services[0].refused == 0
    f.members[1].server.serving = False
    f.advance(300)
    assert f.services[0].refused == pytest.approx(4 * 100, rel=0.25)


def test_the_replicas_expositions_follow_the_replicas():
    f = fleet(2, steady(rate=2, duration=120))
    f.advance(120)
    for member in f.members:
        text = member.metrics.render()
        assert (
            f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="chat"}} {float(member.replica.seen.finished)!r}'
            in text
        )
