"""Golden tests: `vllm-log-exporter --once` on each committed log against tests/exporter/golden/
<log name>.prom (sorted, wall-clock timestamps as <set>/0); VLLM_LOG_EXPORTER_UPDATE_GOLDEN=1
rewrites them. The explicit counts below keep a regenerated file from blessing a wrong count."""

from __future__ import annotations

import os

import pytest
from vllm_log_exporter.patterns import EVENTS

from .helpers import GOLDEN, LOGS, canonical, run_once, samples

LOG_FILES = sorted(p.name for p in LOGS.glob("*.log"))

# What each log must produce: the rules of counting, case by case.
EXPECTED_EVENTS = {
    # Real: startup, traffic with 400/404s and /health probes, a stats line, SIGTERM. 0.32's
    # "output_handler failed" + EngineDeadError after the shutdown began is no engine death; the
    # logo's version, the arguments and the engine's `Initializing` are one startup.
    "vllm-0.32.0-cpu-normal.log": dict(startup_begin=1, startup_complete=1, shutdown=1),
    # Real: kill -9 of EngineCore: the API server's WARNING, output_handler ERROR and
    # EngineDeadError are one death; /health 503 probes are not request errors.
    "vllm-0.32.0-cpu-engine-killed.log": dict(startup_begin=1, startup_complete=1, engine_dead=1, shutdown=1),
    # Real: --max-model-len 16M on a 1 GiB CPU KV cache. EngineCore's error, the raw
    # `Process EngineCore:` copy, the worker dying and the API server's RuntimeError are
    # one startup failure, never an engine death.
    "vllm-0.32.0-cpu-startup-failed.log": dict(startup_begin=1, startup_failed=1),
    # Real: the same kill -9 with `--logging-config.formatter json`: one JSON object per
    # record, the traceback inside exc_info; raw stderr lines stay plain text.
    "vllm-0.32.0-cpu-json-engine-killed.log": dict(
        startup_begin=1, startup_complete=1, engine_dead=1, shutdown=1
    ),
    # Real: RLIMIT_AS on the model worker, then a burst: DefaultCPUAllocator fails in the
    # worker (2 copies), EngineCore and the API server repeat it; 32 requests get 500.
    "vllm-0.32.0-cpu-runtime-oom.log": dict(
        startup_begin=1, startup_complete=1, oom=1, engine_dead=1, request_error=32, shutdown=1
    ),
    # Real: a start, two requests, SIGTERM to the API server only (as docker stop does).
    "vllm-0.32.0-cpu-start-stop.log": dict(startup_begin=1, startup_complete=1, shutdown=1),
    # Real: three starts that cannot fit --max-model-len 2048 in 24 blocks of 32 tokens,
    # then a good start and SIGTERM, all in one log: four startups, three failures.
    "vllm-0.32.0-cpu-restart-loop.log": dict(
        startup_begin=4, startup_failed=3, startup_complete=1, shutdown=1
    ),
    "constructed-v0.4-async-engine-dead.log": dict(
        startup_begin=1, startup_complete=1, engine_dead=1, request_error=2, preemption=51
    ),
    "constructed-v0.6-mq-engine-dead.log": dict(
        startup_begin=1, startup_complete=1, engine_dead=1, request_error=1, shutdown=1
    ),
    "constructed-v0.8-startup-kv-cache-too-small.log": dict(startup_begin=1, startup_failed=1),
    "constructed-v0.11-ansi-prefix-runtime-oom.log": dict(
        startup_begin=1, startup_complete=1, oom=1, engine_dead=1, request_error=1, shutdown=1
    ),
    "constructed-v0.32-json-logging.log": dict(
        startup_begin=2, startup_complete=1, request_error=1, preemption=4, shutdown=1, startup_failed=1
    ),
    "constructed-v0.4-start-stop.log": dict(startup_begin=1, startup_complete=1, shutdown=1),
    "constructed-v0.8-restart-loop.log": dict(
        startup_begin=3, startup_failed=2, startup_complete=1, shutdown=1
    ),
    "constructed-v0.20-upgrade-to-v0.26.log": dict(startup_begin=2, startup_complete=2, shutdown=2),
    # 0.34 with fault tolerance: a held fault is no death; each refused request counts, its 503 not
    # also as a request error; EPLB's thread going on counts nothing. The second fault, unrecovered,
    # is the death (its cause the illegal memory access); the server stops.
    "constructed-v0.34-fault-tolerance.log": dict(
        startup_begin=1,
        startup_complete=1,
        engine_faulted=2,
        request_refused=5,
        engine_dead=1,
        request_error=1,
        shutdown=1,
    ),
    # 0.34: a gRPC server ready and drained on SIGTERM (the stuck worker is part of that stop);
    # a weight-cache daemon's exit is not the server's; a worker that does not exit after a failed
    # wake-up is the engine's death. No start prints `Starting to load model`.
    "constructed-v0.34-stops.log": dict(
        startup_begin=2, startup_complete=2, shutdown=2, engine_dead=1, request_error=1
    ),
}
EXPECTED_REASONS = {
    "vllm-0.32.0-cpu-startup-failed.log": {"kv_cache_too_small": 1},
    "vllm-0.32.0-cpu-restart-loop.log": {"kv_cache_too_small": 3},
    "constructed-v0.8-startup-kv-cache-too-small.log": {"kv_cache_too_small": 1},
    "constructed-v0.32-json-logging.log": {"no_cache_memory": 1},
    "constructed-v0.8-restart-loop.log": {"kv_cache_too_small": 2},
}

# The cause of each death: the runtime OOMs are OOMs, the V0.4 death follows an illegal memory
# access; kill -9 and the V0.6 death show none.
EXPECTED_DEATHS = {
    "vllm-0.32.0-cpu-engine-killed.log": {"other": 1},
    "vllm-0.32.0-cpu-json-engine-killed.log": {"other": 1},
    "vllm-0.32.0-cpu-runtime-oom.log": {"out_of_memory": 1},
    "constructed-v0.4-async-engine-dead.log": {"gpu_fault": 1},  # an illegal memory access
    "constructed-v0.6-mq-engine-dead.log": {"other": 1},
    "constructed-v0.11-ansi-prefix-runtime-oom.log": {"out_of_memory": 1},
    "constructed-v0.34-fault-tolerance.log": {"gpu_fault": 1},
    "constructed-v0.34-stops.log": {"other": 1},
}


def test_every_log_fixture_has_expectations() -> None:
    assert sorted(EXPECTED_EVENTS) == LOG_FILES


@pytest.mark.parametrize("name", LOG_FILES)
def test_golden_exposition(name: str) -> None:
    observed = canonical(run_once(LOGS / name))
    golden = GOLDEN / (name.removesuffix(".log") + ".prom")
    if os.environ.get("VLLM_LOG_EXPORTER_UPDATE_GOLDEN"):
        golden.write_text(observed, encoding="utf-8")
    assert golden.read_text(encoding="utf-8") == observed


@pytest.mark.parametrize("name", LOG_FILES)
def test_event_counts(name: str) -> None:
    observed = samples(run_once(LOGS / name))
    expected = {event: EXPECTED_EVENTS[name].get(event, 0) for event in EVENTS}
    assert {e: observed[f'vllm_log_events_total{{event="{e}"}}'] for e in EVENTS} == expected
    failures = {k: v for k, v in observed.items() if k.startswith("vllm_log_startup_failures_total") and v}
    reasons = EXPECTED_REASONS.get(name, {})
    assert failures == {f'vllm_log_startup_failures_total{{reason="{r}"}}': n for r, n in reasons.items()}
    deaths = {k: v for k, v in observed.items() if k.startswith("vllm_log_engine_deaths_total") and v}
    causes = EXPECTED_DEATHS.get(name, {})
    assert deaths == {f'vllm_log_engine_deaths_total{{reason="{r}"}}': n for r, n in causes.items()}
    assert observed["vllm_log_lines_total"] == (LOGS / name).read_bytes().count(b"\n")
    assert observed["vllm_log_undecodable_lines_total"] == 0


def test_stats_gauges_from_the_real_normal_run() -> None:
    observed = samples(run_once(LOGS / "vllm-0.32.0-cpu-normal.log"))
    # The last stats line of the capture: the idle interval after the load.
    assert observed['vllm_log_requests_running{engine="0"}'] == 0
    assert observed['vllm_log_requests_waiting{engine="0"}'] == 0
    assert observed['vllm_log_kv_cache_usage_ratio{engine="0"}'] == 0
    assert observed['vllm_log_prompt_throughput_tokens_per_second{engine="0"}'] == 5.5
    assert observed['vllm_log_generation_throughput_tokens_per_second{engine="0"}'] == 1258.9
    assert observed['vllm_log_stats_last_timestamp_seconds{engine="0"}'] > 0


def test_stats_gauges_under_load_from_the_ansi_fixture() -> None:
    observed = samples(run_once(LOGS / "constructed-v0.11-ansi-prefix-runtime-oom.log"))
    assert observed['vllm_log_requests_running{engine="0"}'] == 31
    assert observed['vllm_log_requests_waiting{engine="0"}'] == 7
    assert observed['vllm_log_kv_cache_usage_ratio{engine="0"}'] == 0.973


def test_logs_are_one_stream_in_order() -> None:
    """--once FILE FILE reads the files as one log: the second server run starts afresh."""
    observed = samples(
        run_once(LOGS / "vllm-0.32.0-cpu-engine-killed.log", LOGS / "vllm-0.32.0-cpu-runtime-oom.log")
    )
    assert observed['vllm_log_events_total{event="engine_dead"}'] == 2
    assert observed['vllm_log_events_total{event="oom"}'] == 1
    assert observed['vllm_log_events_total{event="startup_complete"}'] == 2
    assert observed['vllm_log_events_total{event="shutdown"}'] == 2
