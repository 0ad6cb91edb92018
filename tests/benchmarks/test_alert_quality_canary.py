"""The simulated canary answers as the real probe would (success when healthy, refusal while nothing
listens, timeout on a hung engine, 5xx in an error burst), writes the real probe's series, and its
/ready takes a hung replica out of the Service but leaves an overloaded one in."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.alert_quality.canary import INTERVAL, JITTER, NOT_READY_AFTER, TIMEOUT_S, Canary
from benchmarks.alert_quality.fleet import Fleet
from benchmarks.alert_quality.incidents import schedule, spiked
from benchmarks.alert_quality.scenario import Model
from benchmarks.alert_quality.traces import Arrivals
from tests.benchmarks.test_alert_quality_fleet import TEMPLATE, steady
from tests.benchmarks.test_alert_quality_incidents import AT, DURATION, EPOCH, scenario
from tests.benchmarks.test_alert_quality_replica import params


def probed(kind: str, **kw) -> tuple[Fleet, Canary, list]:
    """The scenario run second by second with the canary; per second, what the canary has
    recorded for the first replica: (requests, failures by reason, success, health_up)."""
    sc = scenario(kind, **kw)
    f = Fleet([(sc.fleet[0], params(), steady(4.0, sc.duration))], started=EPOCH, seed=5, template=TEMPLATE)
    schedule(f, sc)
    canary = Canary(f, EPOCH, seed=2)
    seen, t = [], 0.0
    while t < sc.duration:
        t += 1
        f.advance(t)
        canary.advance(t)
        s = canary.metrics.targets[f.members[0].instance]
        seen.append((t, (s.by_model.requests, dict(s.by_model.failures), s.by_model.success, s.health_up)))
    return f, canary, seen


def between(seen: list, start: float, end: float) -> tuple[int, dict]:
    """Probes of the first replica recorded in [start, end): how many, and failures by reason."""
    at = dict(seen)
    requests = at[end][0] - at[start][0]
    failures = {r: at[end][1][r] - at[start][1][r] for r in at[end][1]}
    return requests, failures


def test_a_healthy_replica_is_probed_every_interval_and_answers_as_a_user_would():
    f, canary, seen = probed("quiet")
    requests, failures = between(seen, 60, 1500)
    assert requests == pytest.approx(1440 / INTERVAL, rel=0.1)
    assert sum(failures.values()) == 0
    s = canary.metrics.targets[f.members[0].instance].by_model
    assert s.success == 1 and s.duration_count == s.requests
    assert s.duration_sum / s.duration_count < 0.5  # a prompt of 2 tokens on a calm replica
    # The probe's requests are engine requests: the replica finished them with the users'.
    engine = f.members[0].replica.seen
    probes = [
        g
        for p, g in zip(engine.request_prompt_tokens, engine.request_generation_tokens, strict=True)
        if p == 2
    ]
    assert probes == [1] * s.requests  # one token each: the probe asks for max_tokens 1


def test_nothing_listens_on_a_dead_replica_and_it_answers_again_once_restarted():
    _, _, seen = probed("engine_death")
    down_requests, down = between(seen, AT + 20, AT + DURATION - 1)
    assert down_requests >= 30 and down["refused"] == down_requests
    at = dict(seen)
    assert at[AT + 100][3] == 0  # /health does not answer either
    after_requests, after = between(seen, AT + DURATION + 20, 1500)
    assert after_requests >= 30 and sum(after.values()) == 0
    assert at[1500][2] == 1 and at[1500][3] == 1


def test_a_hung_engine_times_out_every_probe_while_health_answers_200():
    _, _, seen = probed("hung_engine")
    requests, failures = between(seen, AT + 20, AT + DURATION - 1)
    assert requests >= 30 and failures["timeout"] == requests
    at = dict(seen)
    assert at[AT + DURATION - 1][3] == 1 and at[AT + DURATION - 1][2] == 0


def test_an_error_burst_fails_the_probe_as_often_as_the_users_requests():
    _, _, seen = probed("error_burst", share=0.5, target={"model": "chat"}, duration="1200s")
    requests, failures = between(seen, AT, AT + 1199)
    assert failures["http_5xx"] == pytest.approx(requests / 2, abs=4 * (requests / 4) ** 0.5)
    assert failures["timeout"] == failures["refused"] == 0


def test_the_canarys_series_are_the_real_probes_with_the_replica_as_target():
    f, canary, _ = probed("quiet")
    families = {fam.name: fam for fam in text_string_to_metric_families(canary.exposition().decode())}
    assert {
        "vllm_probe_success",
        "vllm_probe_requests",
        "vllm_probe_failures",
        "vllm_probe_health_up",
    } <= set(families)
    targets = {s.labels["target"] for s in families["vllm_probe_success"].samples}
    assert targets == {m.instance for m in f.members}
    models = {s.labels["model_name"] for s in families["vllm_probe_success"].samples}
    assert models == {"chat"}


# -- readiness: the canary's /ready gates the Service, as kubelet does with the real probe ------

SPIKE_FROM = AT - 200  # the spike is on before the hang and outlasts it


def spike_with_a_hang(extra_rate: float) -> tuple[Fleet, list]:
    """Four replicas at 4 requests a second, `extra_rate` more from SPIKE_FROM to the incident's end,
    and the first replica's engine hung from AT to AT + DURATION. Per second, per replica: (ready,
    failed probes in a row, requests routed to it so far)."""
    sc = scenario("hung_engine")
    base = steady(4.0, sc.duration)
    arrivals = spiked(base, steady(extra_rate, AT + DURATION - SPIKE_FROM, seed=2), at=SPIKE_FROM)
    f = Fleet([(sc.fleet[0], params(), arrivals)], started=EPOCH, seed=5, template=TEMPLATE)
    schedule(f, sc)
    canary = Canary(f, EPOCH, seed=2)
    service, seen, t = f.services[0], [], 0.0
    while t < sc.duration:
        t += 1
        f.advance(t)
        canary.advance(t)
        seen.append(
            (
                t,
                [
                    (m.ready, canary.metrics.targets[m.instance].failures_in_row, service.routed[k])
                    for k, m in enumerate(service.members)
                ],
            )
        )
    return f, seen


def test_a_spike_leaves_every_replica_in_service_and_a_hung_one_leaves_within_the_bound():
    f, seen = spike_with_a_hang(extra_rate=18.0)
    during = [(t, row) for t, row in seen if SPIKE_FROM <= t < AT + DURATION]
    # The overloaded replicas: canaries time out many times in a row (the canary alone would take
    # them out), yet the engine's counters move and they stay ready and keep getting requests.
    for k in (1, 2, 3):
        assert all(row[k][0] for _, row in during), k
        assert max(row[k][1] for _, row in during) >= 2 * NOT_READY_AFTER, k
        assert during[-1][1][k][2] - during[0][1][k][2] > 1000, k
    # The hung one: out within the probe's bound (its /metrics answers at once here; 1 s is the
    # step of this run), and no request routed to it while it is out; back once it steps again.
    hung = [(t, row[0]) for t, row in seen if AT <= t < AT + DURATION]
    out_at = next((t for t, (ready, _, _) in hung if not ready), None)
    assert out_at is not None, "the hung replica stayed in service"
    assert out_at - AT <= (NOT_READY_AFTER + 1) * INTERVAL * (1 + JITTER) + TIMEOUT_S + 1, out_at
    gone = [(t, r) for t, r in hung if t >= out_at]
    assert all(not ready for _, (ready, _, _) in gone), "the hung replica came back while hung"
    assert gone[-1][1][2] == gone[0][1][2]  # nothing routed to it
    back_by = AT + DURATION + 2 * INTERVAL * (1 + JITTER) + TIMEOUT_S  # the next probe or the one after
    after = [row[0][0] for t, row in seen if t >= back_by]
    assert after and all(after)


def test_an_embedding_model_answers_the_canary_with_an_embedding_and_stays_routable():
    # As `vllm-probe --mode embed` probes it: a pooling model answers completions 404.
    arrivals = steady(4.0, 600)
    pooled = Arrivals(arrivals.time, arrivals.prompt, np.zeros_like(arrivals.output))
    model = Model("embed", "llm-embed", 2, "conv", 2.0, task="embed")
    f = Fleet([(model, params(), pooled)], started=EPOCH, seed=3, template=TEMPLATE)
    canary = Canary(f, EPOCH, seed=2)
    for t in range(1, 601):
        f.advance(float(t))
        canary.advance(float(t))
    for member in f.members:
        s = canary.metrics.targets[member.instance].by_model
        assert s.requests >= 30 and sum(s.failures.values()) == 0 and s.success == 1
        assert member.ready and member.replica.seen.generation_tokens == 0
    assert all(service.refused == 0 for service in f.services)
