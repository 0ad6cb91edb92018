"""Each kind of incident does to the simulated fleet what it does to real servers: what the log
exporter says, whether Prometheus can scrape the server, whether its Service routes to it, what
its engine does, and that it is back when the incident ends."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.alert_quality.fleet import Fleet
from benchmarks.alert_quality.incidents import schedule, spiked, targets
from benchmarks.alert_quality.lifecycle import GRACE, LOG, STARTUP, backoff
from benchmarks.alert_quality.scenario import parse_scenario
from benchmarks.alert_quality.traces import Arrivals
from tests.benchmarks.test_alert_quality_fleet import TEMPLATE, steady
from tests.benchmarks.test_alert_quality_replica import params

EPOCH = 1_700_000_000.0
AT, DURATION = 300, 600  # the incident: 5 to 15 minutes into a 25-minute run


def scenario(kind: str, replicas: int = 4, target: dict | None = None, **extra):
    incident = {
        "id": "x",
        "kind": kind,
        "at": f"{AT}s",
        "target": target or {"model": "chat", "replicas": 1},
        "expect": "page",
        **extra,
    }
    incident.setdefault("duration", f"{DURATION}s")
    return parse_scenario(
        {
            "name": "t",
            "duration": "25m",
            "fleet": [
                {
                    "model": "chat",
                    "namespace": "llm-chat",
                    "replicas": replicas,
                    "trace": "conv",
                    "per_replica_rate": 1,
                }
            ],
            "incidents": [incident],
        },
        "test",
    )


def run(
    kind: str, rate: float = 4.0, every: float = 1.0, watch=None, arrivals=None, **kw
) -> tuple[Fleet, list]:
    """The scenario's fleet advanced second by second to its end (`rate` requests a second
    over its four replicas, or `arrivals`); `watch(fleet, t)` sampled every `every` seconds."""
    sc = scenario(kind, **kw)
    model = sc.fleet[0]
    traffic = arrivals or steady(rate, sc.duration)
    f = Fleet([(model, params(), traffic)], started=EPOCH, seed=5, template=TEMPLATE)
    schedule(f, sc)
    seen, t = [], 0.0
    while t < sc.duration:
        t += every
        f.advance(t)
        if watch:
            seen.append((t, watch(f, t)))
    return f, seen


def state(member) -> tuple:
    s = member.server
    return (s.log.state, s.answering, s.serving)


def test_a_logged_engine_death_loses_what_was_in_flight_and_restarts_to_be_ready_at_the_end():
    f, seen = run(
        "engine_death", watch=lambda f, t: (state(f.members[0]), f.members[0].replica.seen.finished)
    )
    hit = f.members[0]
    at = dict(seen)
    assert at[AT][0] == ("ready", True, True)  # the step the death falls in takes effect after it
    assert at[AT + 1][0] == ("dead", False, False)
    assert at[AT + DURATION - STARTUP + 1][0] == ("starting", False, False)
    assert at[AT + DURATION - 2 * STARTUP / 3 + 1][0] == ("loading", False, False)
    assert at[AT + DURATION + 1][0] == ("ready", True, True)
    log = hit.server.log
    assert (log.counts["engine_dead"], log.counts["shutdown"], log.counts["startup_begin"]) == (1, 1, 2)
    assert log.last["engine_dead"] == AT and log.since == AT + DURATION
    assert log.deaths["other"] == 1
    # A new process: its counters began at zero when it was ready, and it serves again.
    assert at[AT + DURATION + 1][1] < 5 < at[AT][1] and at[1500][1] > 100
    assert hit.lost >= 1  # requests in flight at the death
    # The other replicas carried the model meanwhile.
    assert all(state(m) == ("ready", True, True) for m in f.members[1:])
    assert f.services[0].refused == 0


def test_a_silent_death_leaves_the_log_saying_ready_while_nothing_answers():
    f, seen = run("silent_death", watch=lambda f, t: state(f.members[0]))
    at = dict(seen)
    assert at[AT + 1] == ("ready", False, False)
    assert at[AT + DURATION - STARTUP + 1] == ("starting", False, False)
    assert at[AT + DURATION + 1] == ("ready", True, True)
    log = f.members[0].server.log
    # No line for the death, nor a shutdown: the start that follows is not a planned one.
    assert log.counts["engine_dead"] == log.counts["shutdown"] == 0
    assert log.counts["startup_begin"] == 2


def test_a_hung_engine_answers_and_is_routed_to_while_no_token_comes_out():
    def tokens(f, t):
        r = f.members[0].replica
        return (r.seen.generation_tokens, r.num_waiting + r.num_running, state(f.members[0]))

    _, seen = run("hung_engine", watch=tokens)
    at = dict(seen)
    assert at[AT + DURATION - 1][0] == at[AT + 1][0]  # not one token while hung
    assert at[AT + DURATION - 1][1] > 100  # a minute's requests and more pile up
    assert at[AT + DURATION - 1][2] == ("ready", True, True)
    assert at[1500][0] > at[AT + DURATION][0] and at[1500][1] < 20  # it resumes and drains


def test_a_crash_loop_dies_as_often_as_asked_with_the_orchestrators_back_off_between():
    starts = []

    def watch(f, t):
        log = f.members[0].server.log
        if not starts or starts[-1] != log.last["startup_begin"]:
            starts.append(log.last["startup_begin"])
        return log.counts["engine_dead"]

    f, seen = run("crash_restart", restarts=3, watch=watch)
    log = f.members[0].server.log
    assert log.counts["engine_dead"] == 3 and log.counts["startup_complete"] == 4
    deaths = [t for (t, n), (_, before) in zip(seen[1:], seen, strict=False) if n > before]
    assert deaths[0] == AT + 1
    restarts = starts[1:]
    # kubelet's crash-loop back-off: 10 s, doubling.
    assert [round(s - (d - 1)) for s, d in zip(restarts, deaths, strict=True)] == [10, 20, 40]
    assert state(f.members[0]) == ("ready", True, True)


def test_a_failed_start_follows_a_planned_stop_and_fails_until_the_end():
    f, seen = run("failed_start", watch=lambda f, t: state(f.members[0]))
    at = dict(seen)
    assert at[AT + 1] == ("stopping", True, False)
    assert at[AT + GRACE + 1] == ("stopped", False, False)
    assert ("failed_start", False, False) in [s for t, s in seen if AT < t < AT + DURATION - STARTUP]
    assert at[AT + DURATION + 1] == ("ready", True, True)
    log = f.members[0].server.log
    assert (
        log.counts["startup_failed"] >= 2
        and log.start_failures["engine_init_failed"] == log.counts["startup_failed"]
    )
    assert log.counts["engine_dead"] == 0 and log.counts["shutdown"] == 1


def test_a_slow_replica_takes_factor_times_as_long_per_step_while_it_lasts():
    def ttft(f, t):
        return list(f.members[0].replica.seen.time_to_first_token)

    _, seen = run("slow_replica", factor=3.0, rate=2.0, watch=ttft, every=AT)
    at = dict(seen)
    before = np.median(at[AT])
    during = np.median(at[2 * AT][len(at[AT]) :])
    assert during == pytest.approx(3 * before, rel=0.35)


def test_kv_exhaustion_preempts_only_while_the_cache_is_small():
    def preemptions(f, t):
        return f.members[0].replica.seen.preemptions, f.members[0].replica.kv_blocks

    # Long requests (about 50 blocks of 16 tokens each), a second apart on each replica: a few
    # at a time fit the whole cache (512 blocks), not 15% of it.
    rng = np.random.default_rng(4)
    times = np.arange(0.0, 1500.0, 0.25)
    long = Arrivals(times, rng.integers(600, 800, len(times)), rng.integers(100, 200, len(times)))
    _, seen = run("kv_exhaustion", fraction=0.15, arrivals=long, watch=preemptions, every=AT)
    at = dict(seen)
    assert at[AT] == (0, 512)
    assert at[2 * AT][0] > 0 and at[2 * AT][1] == 77
    assert at[4 * AT][1] == 512
    assert at[5 * AT][0] == at[4 * AT][0]  # the whole cache again: no more preemptions


ERRORS = 'vllm:request_success_total{engine="0",finished_reason="error",model_name="chat"}'
REFUSED = 'vllm:admission_rejections_total{model_name="chat",reason="max_num_queued_reqs"}'


@pytest.mark.parametrize(
    ("kind", "counted", "series"),
    [("error_burst", "errored", ERRORS), ("admission_rejections", "refused", REFUSED)],
)
def test_a_share_of_the_requests_fails_or_is_refused_while_it_lasts(kind, counted, series):
    def count(f, t):
        return sum(getattr(m.replica.seen, counted) for m in f.members)

    f, seen = run(kind, share=0.3, target={"model": "chat"}, rate=8.0, every=AT, watch=count)
    at = dict(seen)
    routed = 8.0 * DURATION
    assert at[AT] == 0
    assert at[AT + DURATION] == pytest.approx(0.3 * routed, rel=0.15)
    assert at[1500] == at[AT + DURATION]
    # The engine counts them in the series vLLM counts them in.
    for m in f.members:
        assert f"{series} {float(getattr(m.replica.seen, counted))!r}" in m.metrics.render()


def test_a_rolling_restart_takes_one_replica_out_after_the_other_and_never_the_whole_model():
    per = 100

    def out(f, t):
        return sum(not m.ready for m in f.members), state(f.members[0])

    f, seen = run("rolling_restart", per_replica=f"{per}s", target={"model": "chat"}, watch=out)
    first = {t: s for t, (_, s) in seen}
    assert first[AT + 1] == ("stopping", True, False)  # still answering while it drains
    assert first[AT + GRACE + 1] == ("starting", False, False)
    assert first[AT + GRACE + STARTUP + 1] == ("ready", True, True)
    most = max(n for _, (n, _) in seen)
    assert most == -(-(GRACE + STARTUP) // per)  # the overlap of one replica's time out with the next
    assert f.services[0].refused == 0 and most < len(f.members)
    for m in f.members:
        log = m.server.log
        assert state(m) == ("ready", True, True)
        assert log.last["shutdown"] == AT + m.index * per
        # A planned restart: the shutdown is in the log before the start, no death.
        assert log.counts["engine_dead"] == 0 and log.last["startup_begin"] == AT + m.index * per + GRACE


def test_the_back_off_doubles_from_10_s_to_at_most_five_minutes():
    assert [backoff(k) for k in range(7)] == [10, 20, 40, 80, 160, 300, 300]


def test_targets_are_the_first_replicas_or_a_share_of_them():
    f = Fleet(
        [(scenario("quiet").fleet[0], params(), steady(1, 10))], started=EPOCH, seed=1, template=TEMPLATE
    )
    sc = scenario("engine_death", target={"model": "chat", "fraction": 0.75})
    assert [m.index for m in targets(f, sc.incidents[0])] == [0, 1, 2]
    sc = scenario("engine_death", target={"model": "chat", "fraction": 0.1})
    assert [m.index for m in targets(f, sc.incidents[0])] == [0]


def test_a_spike_lays_the_extra_requests_over_the_base_from_its_start():
    base = steady(2, 600, seed=1)
    extra = steady(4, 120, seed=2)
    both = spiked(base, extra, at=300)
    assert len(both.time) == len(base.time) + len(extra.time)
    assert np.all(np.diff(both.time) >= 0)
    inside = (both.time >= 300) & (both.time < 420)
    assert inside.sum() == ((base.time >= 300) & (base.time < 420)).sum() + len(extra.time)
    assert sorted(both.prompt.tolist()) == sorted(base.prompt.tolist() + extra.prompt.tolist())


def test_the_log_view_serves_the_contracts_families_with_unix_stamps():
    f, _ = run("engine_death", every=300)
    text = f.members[0].server.log.exposition().decode()
    families = {fam.name: fam for fam in text_string_to_metric_families(text)}
    for name in ("vllm_log_events", "vllm_log_last_event_timestamp_seconds", "vllm_log_server_state"):
        assert families[name].documentation == LOG[name].help
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for fam in families.values() for s in fam.samples
    }
    assert samples[("vllm_log_events_total", (("event", "engine_dead"),))] == 1
    assert samples[("vllm_log_last_event_timestamp_seconds", (("event", "engine_dead"),))] == EPOCH + AT
    assert samples[("vllm_log_last_event_timestamp_seconds", (("event", "oom"),))] == 0  # never seen
    assert samples[("vllm_log_server_state", (("state", "ready"),))] == 1
    assert sum(v for (n, _), v in samples.items() if n == "vllm_log_server_state") == 1
    assert samples[("vllm_log_server_state_since_timestamp_seconds", ())] == EPOCH + AT + DURATION


@pytest.mark.parametrize("lost", [4, 5, 6])
def test_capacity_lost_near_the_floor_takes_exactly_that_many_of_ten_out_until_the_end(lost):
    def ready(f, t):
        return sum(m.ready for m in f.members)

    f, seen = run(
        "engine_death", replicas=10, target={"model": "chat", "replicas": lost}, watch=ready, every=60
    )
    at = dict(seen)
    assert at[AT] == 10 and at[AT + 60] == at[AT + DURATION - 60] == 10 - lost
    assert at[AT + DURATION + 60] == 10 and f.services[0].refused == 0


def test_an_outage_longer_than_two_hours_keeps_its_replicas_out_the_whole_time():
    sc = parse_scenario(
        {
            "name": "long",
            "duration": "3h",
            "fleet": [
                {
                    "model": "chat",
                    "namespace": "llm-chat",
                    "replicas": 4,
                    "trace": "conv",
                    "per_replica_rate": 1,
                }
            ],
            "incidents": [
                {
                    "id": "long",
                    "kind": "engine_death",
                    "at": "10m",
                    "duration": "150m",
                    "target": {"model": "chat", "replicas": 3},
                    "expect": "page",
                }
            ],
        },
        "test",
    )
    f = Fleet([(sc.fleet[0], params(), steady(2.0, sc.duration))], started=EPOCH, seed=5, template=TEMPLATE)
    schedule(f, sc)
    out = []
    for t in range(60, int(sc.duration) + 1, 60):
        f.advance(t)
        out.append((t, sum(m.ready for m in f.members), f.members[0].server.log.state))
    during = [(n, s) for t, n, s in out if 600 < t <= 600 + 150 * 60 - STARTUP]
    assert during and all(n == 1 for n, _ in during) and {s for _, s in during} == {"dead"}
    assert out[-1][1:] == (4, "ready")
    assert f.members[0].server.log.counts["startup_begin"] == 2  # one start after the death, none between


def test_a_backlog_outlasts_the_outage_on_the_survivors_while_the_restarted_replicas_run_empty():
    def waiting(f, t):
        return [m.replica.num_waiting for m in f.members]

    # 20 requests a second over ten replicas: two survivors take ten each, beyond their capacity.
    f, seen = run(
        "backlog", rate=20, replicas=10, target={"model": "chat", "replicas": 8}, watch=waiting, every=60
    )
    at = dict(seen)
    survivors, restarted = slice(8, 10), slice(0, 8)
    assert max(at[AT]) < 10  # healthy before
    assert min(at[AT + DURATION][survivors]) > 1000
    # Ten minutes after the replicas are back, the survivors still hold most of their queue; the
    # new requests spread over all ten, so the restarted ones' queues stay short.
    assert min(at[AT + DURATION + 600][survivors]) > 500 and max(at[AT + DURATION + 600][restarted]) < 10
    hit = f.members[:8]
    assert all(m.server.log.counts["engine_dead"] == 1 for m in hit)
    # What was in flight on the dead replicas was re-sent, not lost to its users.
    assert sum(m.resent for m in hit) == sum(m.lost for m in hit) > 0


def test_a_model_upgrade_restarts_each_replica_by_plan_into_the_new_model_on_the_same_host():
    per = 100

    def names(f, t):
        return [m.model for m in f.members], [m.ready for m in f.members]

    f, seen = run("model_upgrade", per_replica=f"{per}s", to="chat-v2", target={"model": "chat"}, watch=names)
    at = dict(seen)
    assert at[AT][0] == ["chat"] * 4
    first_back = AT + GRACE + STARTUP + 1
    assert at[first_back][0][0] == "chat-v2" and at[first_back][1][0]
    assert at[first_back][0][3] == "chat"  # the last one's turn has not come
    assert at[1500][0] == ["chat-v2"] * 4 and all(at[1500][1])
    assert f.services[0].refused == 0  # a planned restart: one replica out at a time
    for m in f.members:
        assert m.instance == f"chat-{m.index}:8000"  # the same host
        assert m.server.log.counts["engine_dead"] == 0 and m.server.log.counts["shutdown"] == 1
        text = m.metrics.render()
        assert 'model_name="chat-v2"' in text and 'model_name="chat"' not in text
