"""The alert-quality benchmark's replica model behaves as continuous batching does: exact step
arithmetic for a lone request, chunked prefill, queueing past capacity, preemption only when KV
blocks run short, tokens conserved, Little's law."""

from __future__ import annotations

import random
import statistics

import pytest

from benchmarks.alert_quality.replica import EngineParams, Replica, Request

BASE = dict(
    step_base=0.01,
    per_prefill_token=0.001,
    per_decode_seq=0.002,
    per_context_token=0.0,
    max_num_batched_tokens=512,
    max_num_seqs=8,
    kv_blocks=512,
    block_size=16,
    max_model_len=1024,
)


def params(**changes: float) -> EngineParams:
    return EngineParams(**{**BASE, **changes})


def replay(replica: Replica, arrivals: list[Request], until: float, sample_every: float = 1.0) -> list[int]:
    """Submit each request at its arrival time; the number in the system at every sample."""
    in_system, pending = [], list(arrivals)
    t = 0.0
    while t < until:
        t += sample_every
        while pending and pending[0].arrival <= t:
            request = pending.pop(0)
            replica.run_until(request.arrival)
            replica.submit(request)
        replica.run_until(t)
        in_system.append(replica.num_running + replica.num_waiting)
    return in_system


def poisson(rate: float, until: float, prompt: int, output: int, seed: int = 1) -> list[Request]:
    rng, t, out = random.Random(seed), 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= until:
            return out
        out.append(Request(arrival=t, prompt=rng.randint(prompt // 2, prompt), output=rng.randint(1, output)))


def test_a_lone_request_costs_one_prefill_step_then_one_step_per_token():
    replica = Replica(params(per_context_token=1e-5))
    replica.submit(Request(arrival=0.0, prompt=100, output=5))
    replica.run_until(10)
    s = replica.seen
    prefill = 0.01 + 0.001 * 100
    decodes = [0.01 + 0.002 + 1e-5 * context for context in (100, 101, 102, 103)]
    assert s.time_to_first_token == pytest.approx([prefill])
    assert s.inter_token_latency == pytest.approx(decodes)
    assert s.e2e_request_latency == pytest.approx([prefill + sum(decodes)])
    assert (s.request_queue_time, s.request_prefill_time) == ([0.0], pytest.approx([prefill]))
    assert s.iteration_tokens == [100, 1, 1, 1, 1]
    assert (s.prompt_tokens, s.generation_tokens, s.finished, s.preemptions) == (100, 5, 1, 0)
    assert replica.kv_cache_usage == 0 and replica.num_running == 0


def test_a_prompt_longer_than_the_token_budget_is_prefilled_in_chunks():
    replica = Replica(params())
    replica.submit(Request(arrival=0.0, prompt=1000, output=2))
    replica.run_until(10)
    assert replica.seen.iteration_tokens == [512, 488, 1]
    assert replica.seen.time_to_first_token == pytest.approx([0.01 + 0.512 + 0.01 + 0.488])


def test_a_request_longer_than_max_model_len_is_refused():
    replica = Replica(params())
    assert not replica.submit(Request(arrival=0.0, prompt=1000, output=100))
    assert replica.seen.rejected == 1 and replica.num_waiting == 0


def test_a_cache_smaller_than_one_request_is_refused_as_vllm_refuses_to_start():
    with pytest.raises(ValueError, match="max_model_len"):
        params(kv_blocks=32)  # 512 tokens for max_model_len 1024


def test_below_capacity_the_queue_stays_short_and_above_it_builds():
    # About 2 requests/s fit (~150 prompt tokens at 1 ms, ~100 output tokens in steps of 26 ms
    # shared by 8 sequences): 1/s and 8/s.
    calm = Replica(params())
    calm_in_system = replay(calm, poisson(1, 300, prompt=200, output=200), until=300)
    busy = Replica(params())
    busy_in_system = replay(busy, poisson(8, 300, prompt=200, output=200), until=300)
    assert statistics.quantiles(calm.seen.request_queue_time, n=20)[-1] < 0.5
    assert max(calm_in_system) <= 3 * 8
    # Past capacity the backlog keeps growing, and the first token waits for it.
    assert busy_in_system[-1] > busy_in_system[len(busy_in_system) // 2] > 100
    assert statistics.median(busy.seen.time_to_first_token) > 10 * statistics.median(
        calm.seen.time_to_first_token
    )
    assert busy.num_running == 8


def test_preemption_only_when_kv_blocks_run_short_and_more_the_fewer_there_are():
    def preempted(kv_blocks: int) -> int:
        replica = Replica(params(kv_blocks=kv_blocks))
        replay(replica, poisson(2, 120, prompt=400, output=400, seed=3), until=120)
        return replica.seen.preemptions

    ample = 8 * 1024 // 16  # every sequence at max_model_len fits
    assert preempted(ample) == 0
    # Not strictly monotonic (fewer blocks also admit fewer requests), but far apart.
    assert preempted(96) > 5 * preempted(256) > 0


def test_tokens_are_conserved_through_preemptions():
    replica = Replica(params(kv_blocks=80))
    arrivals = poisson(2, 120, prompt=400, output=300, seed=5)
    replay(replica, arrivals, until=120)
    s = replica.seen
    assert s.preemptions > 0
    everyone = [r for r in arrivals if r.prompt + r.output <= BASE["max_model_len"]]
    assert s.generation_tokens == sum(r.generated for r in everyone)
    for r in replica.done:
        assert r.generated == r.output and r.blocks == 0
    # Recompute counts prompt tokens again: more than every finished prompt once.
    assert s.prompt_tokens > sum(r.prompt for r in replica.done)
    assert sum(s.request_preemptions) <= s.preemptions
    held = sum(r.blocks for r in replica.running)
    assert replica.free_blocks + held == 80


def test_littles_law_holds():
    """Mean requests in the system = throughput x mean time in it (within sampling noise)."""
    replica = Replica(params())
    arrivals = poisson(1, 600, prompt=200, output=200, seed=7)
    in_system = replay(replica, arrivals, until=600, sample_every=0.5)
    done = [r for r in replica.done if 100 <= r.arrival and r.finished_at <= 500]
    throughput = len([r for r in replica.done if 100 <= r.finished_at <= 500]) / 400
    mean_time = statistics.mean(r.finished_at - r.arrival for r in done)
    mean_in_system = statistics.mean(in_system[200:1000])
    assert mean_in_system == pytest.approx(throughput * mean_time, rel=0.15)


def test_a_preempted_request_recomputes_its_prompt_and_tokens_and_waits_for_it():
    """Two long requests outgrow a cache of exactly max_model_len: the later one is preempted,
    recomputes prompt + generated tokens (counted as prompt tokens again), and its next token
    comes a recompute later than a step."""
    replica = Replica(params(kv_blocks=64, max_num_seqs=2))
    first, second = Request(arrival=0.0, prompt=400, output=400), Request(arrival=0.0, prompt=400, output=400)
    third = Request(arrival=1.0, prompt=16, output=5)  # waits for a slot
    for request in (first, second, third):
        replica.run_until(request.arrival)
        replica.submit(request)
    replica.run_until(60)
    s = replica.seen
    assert (first.preemptions, second.preemptions >= 1, s.finished) == (0, True, 3)
    # Each recompute covers the prompt again, and the tokens generated before it.
    assert s.prompt_tokens - 800 - 16 > 400 * second.preemptions
    assert max(s.inter_token_latency) > 0.01 + 0.001 * 400
    # The preempted request goes back to the head of the queue: the third waits behind it.
    assert third.scheduled_at >= first.finished_at


def test_the_queue_is_first_come_first_served_even_when_a_later_request_would_fit():
    replica = Replica(params(kv_blocks=64))
    holder = Request(arrival=0.0, prompt=900, output=50)
    big, small = Request(arrival=0.001, prompt=500, output=5), Request(arrival=0.002, prompt=16, output=5)
    for request in (holder, big, small):
        replica.run_until(request.arrival)
        replica.submit(request)
    replica.run_until(60)
    assert replica.seen.finished == 3
    assert small.scheduled_at >= big.scheduled_at >= holder.first_token_at


# -- the faults incidents inject ----------------------------------------------------------------


def test_a_slowdown_stretches_every_step_by_its_factor():
    def first_token(slowdown: float) -> float:
        replica = Replica(params())
        replica.slowdown = slowdown
        replica.submit(Request(arrival=0.0, prompt=100, output=3))
        replica.run_until(10)
        return replica.seen.time_to_first_token[0]

    assert first_token(3.0) == pytest.approx(3 * first_token(1.0)) == pytest.approx(3 * (0.01 + 0.1))


def test_a_hung_engine_runs_no_step_and_resumes_where_it_stopped():
    replica = Replica(params())
    replica.hung = True
    replica.submit(Request(arrival=0.0, prompt=100, output=3))
    replica.run_until(30)
    assert replica.seen.iteration_tokens == [] and replica.num_waiting == 1 and replica.now == 30
    replica.hung = False
    replica.run_until(60)
    # The first token came a step after the hang ended: the 30 s are the user's wait.
    assert replica.seen.time_to_first_token == pytest.approx([30 + 0.01 + 0.1])
    assert replica.seen.finished == 1


def test_a_shrunk_kv_cache_preempts_the_latest_requests_and_frees_what_it_keeps():
    replica = Replica(params(kv_blocks=512))
    for _ in range(8):
        replica.submit(Request(arrival=0.0, prompt=480, output=500))
    replica.run_until(8)  # every prompt prefilled (a step each), none finished
    held = 512 - replica.free_blocks
    assert replica.num_running == 8 and held >= 8 * 30
    replica.limit_kv(0.25)  # 128 blocks: four requests of ~31 blocks fit
    assert replica.kv_blocks == 128 and 0 <= replica.free_blocks
    assert 128 - replica.free_blocks == sum(r.blocks for r in replica.running)
    assert replica.seen.preemptions >= 4 and replica.num_running <= 4
    assert replica.kv_cache_usage > 0.9
    # Never below one request of max_model_len (64 blocks of 16): vLLM could not serve it.
    replica.limit_kv(0.01)
    assert replica.kv_blocks == 64
    replica.limit_kv(1.0)
    replica.run_until(900)
    assert replica.kv_blocks == 512 and replica.free_blocks == 512 and replica.seen.finished == 8


def test_a_dead_engine_loses_every_request_in_flight():
    replica = Replica(params())
    for _ in range(12):
        replica.submit(Request(arrival=0.0, prompt=200, output=100))
    replica.run_until(0.5)
    finished = replica.seen.finished
    assert replica.die() == 12 - finished == replica.seen.lost
    assert replica.num_running == replica.num_waiting == 0 and replica.free_blocks == 512


class CountingReplica(Replica):
    """A replica that counts the steps it runs one at a time."""

    steps = 0

    def step(self) -> bool:
        self.steps += 1
        return super().step()


def test_decode_runs_observe_exactly_what_single_steps_do():
    """The run of decode steps computed at once is the hot path's shortcut: with it or without,
    the same observations and counters, through queueing, preemptions, a hang and a slowdown."""

    def replay_with(runs: bool) -> CountingReplica:
        replica = CountingReplica(params(per_context_token=1e-6, kv_blocks=200))
        replica.runs = runs
        for request in poisson(6, 300, 400, 200, seed=3):
            replica.run_until(request.arrival)
            replica.hung = 100 < request.arrival < 120
            replica.slowdown = 2.0 if 200 < request.arrival < 230 else 1.0
            replica.submit(request)
        replica.run_until(400)
        return replica

    stepped, ran = replay_with(False), replay_with(True)
    a, b = stepped.seen, ran.seen
    assert a.preemptions > 0 and a.finished > 400  # the workload preempts and finishes requests
    for name in ("time_to_first_token", "inter_token_latency", "e2e_request_latency", "request_queue_time"):
        assert sorted(getattr(a, name)) == sorted(getattr(b, name)), name
    assert sorted(a.iteration_tokens) == sorted(b.iteration_tokens)
    for name in ("prompt_tokens", "generation_tokens", "preemptions", "finished"):
        assert getattr(a, name) == getattr(b, name), name
    assert ran.steps < stepped.steps / 3  # most decode steps came in runs
