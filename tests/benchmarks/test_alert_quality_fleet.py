"""The simulated fleet routes every request to a ready replica of its model, spread evenly, and
refuses requests when none is ready."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.alert_quality.background import Background
from benchmarks.alert_quality.fleet import QUIET, Fleet
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


def test_an_embedding_model_generates_nothing_and_finishes_every_request_stop():
    arrivals = steady(rate=4, duration=300)
    pooled = Arrivals(arrivals.time, arrivals.prompt, np.zeros_like(arrivals.output))
    model = Model("embed", "llm-embed", 2, "conv", 2.0, task="embed")
    f = Fleet([(model, params(), pooled)], started=0.0, seed=3, template=TEMPLATE)
    f.advance(300)
    for member in f.members:
        seen = member.replica.seen
        assert seen.finished > 100 and seen.stopped == seen.finished
        assert seen.generation_tokens == 0 and not seen.inter_token_latency
        assert len(seen.time_to_first_token) >= seen.finished  # the embedding comes with the prompt
        text = member.metrics.render()
        assert f'finished_reason="stop",model_name="embed"}} {float(seen.finished)!r}' in text
        assert 'vllm:inter_token_latency_seconds_count{engine="0",model_name="embed"} 0.0' in text
        assert 'vllm:generation_tokens_total{engine="0",model_name="embed"} 0.0' in text


def test_the_background_fails_and_abandons_its_share_of_requests_and_a_quiet_fleet_none():
    arrivals = steady(rate=20, duration=600)
    noisy = Background(error_share=0.02, abort_share=0.05, abort_after=0.05, rhythm=0.0)
    model = Model("chat", "llm-chat", 4, "conv", 5.0)
    runs = {}
    for name, background in (("noisy", noisy), ("quiet", QUIET)):
        f = Fleet(
            [(model, params(), arrivals)], started=0.0, seed=3, template=TEMPLATE, background=background
        )
        f.advance(600)
        runs[name] = f
    total = len(arrivals.time)
    errored = sum(m.replica.seen.errored for m in runs["noisy"].members)
    aborted = sum(m.replica.seen.aborted for m in runs["noisy"].members)
    assert errored == pytest.approx(0.02 * total, rel=0.25)
    # Abandoned after 50 ms on average: most before they finish (the rest finish first).
    assert 0.02 * total < aborted < 0.06 * total
    assert all(m.replica.seen.errored == m.replica.seen.aborted == 0 for m in runs["quiet"].members)
    # The routing is the same with or without the background's draws.
    assert runs["noisy"].services[0].routed == runs["quiet"].services[0].routed
    text = runs["noisy"].members[0].metrics.render()
    seen = runs["noisy"].members[0].replica.seen
    assert f'finished_reason="abort",model_name="chat"}} {float(seen.aborted)!r}' in text


def test_a_client_gives_up_on_a_request_queued_past_its_timeout():
    arrivals = steady(rate=40, duration=600)  # far beyond one replica's capacity
    model = Model("chat", "llm-chat", 1, "conv", 40.0)
    waits = Background(error_share=0.0, abort_share=0.0, rhythm=0.0, client_timeout=60.0)
    f = Fleet([(model, params(), arrivals)], started=0.0, seed=3, template=TEMPLATE, background=waits)
    for t in range(30, 601, 30):
        f.advance(t)
        replica = f.members[0].replica
        assert all(t - r.arrival <= 60 + 1 for r in replica.waiting)
    recent = int(((arrivals.time > 600 - 61) & (arrivals.time < 600)).sum())
    assert replica.seen.aborted > 1000 and 0 < replica.num_waiting <= recent
