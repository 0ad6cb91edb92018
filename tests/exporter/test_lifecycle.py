"""The server's lifecycle from its log: the exact sequence of states for every fixture, the
startup durations, the announced version, and the rules that tell a restart from the
several start markers of one startup."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from vllm_log_exporter.events import Settings
from vllm_log_exporter.lifecycle_labels import BUCKETS, STATES, bucket_index, valid_version
from vllm_log_exporter.metrics import build_registry

from .helpers import LOGS, FakeClock, make_pipeline, samples

LOG_FILES = sorted(p.name for p in LOGS.glob("*.log"))

# Every state the log goes through, in order, reading it line by line.
STATE_SEQUENCES = {
    # Real 0.32 text logs: the logo's `version`, `non-default args` and `Initializing a V1 LLM engine`
    # are one start; `Starting to load model` begins loading. SIGTERM to the whole process group: the
    # EngineDeadError noise after `[shutdown]` keeps it a planned stop.
    "vllm-0.32.0-cpu-normal.log": "unknown starting loading ready stopping stopped",
    # SIGTERM to the API server only (as docker stop does): `[shutdown] API server:
    # shutdown triggered`, EngineDeadError noise, uvicorn's shutdown.
    "vllm-0.32.0-cpu-start-stop.log": "unknown starting loading ready stopping stopped",
    # kill -9 of the engine while serving: dead, and uvicorn's shutdown after it does not
    # make the death a planned stop.
    "vllm-0.32.0-cpu-engine-killed.log": "unknown starting loading ready dead",
    "vllm-0.32.0-cpu-json-engine-killed.log": "unknown starting loading ready dead",
    "vllm-0.32.0-cpu-runtime-oom.log": "unknown starting loading ready dead",
    "vllm-0.32.0-cpu-startup-failed.log": "unknown starting loading failed_start",
    # Three real failed starts, then a good one, stopped with SIGTERM.
    "vllm-0.32.0-cpu-restart-loop.log": "unknown"
    + " starting loading failed_start" * 3
    + " starting loading ready stopping stopped",
    # Older releases' wording, from the reference templates.
    "constructed-v0.4-async-engine-dead.log": "unknown starting loading ready dead",
    "constructed-v0.4-start-stop.log": "unknown starting loading ready stopping stopped",
    "constructed-v0.6-mq-engine-dead.log": "unknown starting loading ready dead",
    "constructed-v0.8-startup-kv-cache-too-small.log": "unknown starting failed_start",
    "constructed-v0.8-restart-loop.log": "unknown"
    + " starting loading failed_start" * 2
    + " starting loading ready stopping stopped",
    "constructed-v0.11-ansi-prefix-runtime-oom.log": "unknown starting loading ready dead",
    "constructed-v0.20-upgrade-to-v0.26.log": "unknown starting loading ready stopping stopped"
    " starting loading ready stopping",
    # JSON: the first server stops (uvicorn's `Shutting down` after `[shutdown]`), the
    # second cannot allocate its KV cache.
    "constructed-v0.32-json-logging.log": "unknown starting ready stopping starting failed_start",
    # 0.34 starts print no `Starting to load model`: `Loading model from scratch...` begins
    # loading. A fault the fault tolerance holds, recovered; another that is not: dead.
    "constructed-v0.34-fault-tolerance.log": "unknown starting loading ready faulted ready faulted dead",
    # The gRPC server's readiness and its drain; then a server whose engine dies.
    "constructed-v0.34-stops.log": "unknown starting loading ready stopping starting loading ready dead",
}

# The figures of the most recent completed startup (log times: 1 s resolution in text
# logs, milliseconds in JSON) and how many startups completed.
DURATIONS = {
    "vllm-0.32.0-cpu-normal.log": ({"weights": 0.02, "engine_init": 2.9, "total": 17.0}, 1),
    "vllm-0.32.0-cpu-engine-killed.log": ({"weights": 0.01, "engine_init": 2.98, "total": 16.0}, 1),
    "vllm-0.32.0-cpu-json-engine-killed.log": ({"weights": 0.0, "engine_init": 1.65, "total": 14.682}, 1),
    "vllm-0.32.0-cpu-runtime-oom.log": ({"weights": 0.0, "engine_init": 1.64, "total": 15.0}, 1),
    "vllm-0.32.0-cpu-startup-failed.log": ({}, 0),
    "vllm-0.32.0-cpu-start-stop.log": ({"weights": 0.02, "engine_init": 0.44, "total": 39.0}, 1),
    # Only the fourth, good start completed.
    "vllm-0.32.0-cpu-restart-loop.log": ({"weights": 0.01, "engine_init": 0.49, "total": 38.0}, 1),
    # 0.4: `Loading model weights took 0.2389 GB` is a size, not a duration: total only,
    # up to the `# GPU blocks` line, the last timestamped line before readiness.
    "constructed-v0.4-start-stop.log": ({"total": 14.0}, 1),
    "constructed-v0.8-restart-loop.log": ({"weights": 4.02, "engine_init": 38.47, "total": 61.0}, 1),
    # Two tensor-parallel workers report their weights: the slower one counts. Then the
    # upgraded server's startup is the most recent.
    "constructed-v0.20-upgrade-to-v0.26.log": ({"weights": 9.87, "engine_init": 21.3, "total": 45.0}, 2),
    # 0.34: the same figures without `Starting to load model`.
    "constructed-v0.34-fault-tolerance.log": ({"weights": 31.27, "engine_init": 52.31, "total": 106.0}, 1),
}


def states_of(data: bytes, clock: FakeClock | None = None, **settings) -> tuple[list[str], object]:
    """The states the pipeline goes through, feeding the log one line at a time."""
    pipeline = make_pipeline(clock or FakeClock(), settings=Settings(**settings))
    source = pipeline.new_source()
    seen = [pipeline.counts.server_state]
    for line in data.split(b"\n")[:-1]:
        pipeline.feed(source, line + b"\n")
        if pipeline.counts.server_state != seen[-1]:
            seen.append(pipeline.counts.server_state)
    pipeline.flush(source)
    pipeline.finish()
    return seen, pipeline


def exposition(pipeline) -> dict[str, float]:
    return samples(generate_latest(build_registry(pipeline.counts, pipeline.lock)).decode())


def test_every_log_fixture_has_a_state_sequence() -> None:
    assert sorted(STATE_SEQUENCES) == LOG_FILES


@pytest.mark.parametrize("name", LOG_FILES)
def test_state_sequence(name: str) -> None:
    seen, pipeline = states_of((LOGS / name).read_bytes())
    assert " ".join(seen) == STATE_SEQUENCES[name]
    exported = exposition(pipeline)
    assert {s: exported[f'vllm_log_server_state{{state="{s}"}}'] for s in STATES} == {
        s: float(s == seen[-1]) for s in STATES
    }


@pytest.mark.parametrize("name", sorted(DURATIONS))
def test_startup_durations(name: str) -> None:
    expected, completed = DURATIONS[name]
    _, pipeline = states_of((LOGS / name).read_bytes(), live=False)
    last = pipeline.counts.last_startup_durations
    assert last == pytest.approx(expected)
    exported = exposition(pipeline)
    for phase in ("weights", "engine_init", "total"):
        count = exported[f'vllm_log_startup_duration_seconds_count{{phase="{phase}"}}']
        assert count == (completed if phase in expected else 0), phase
        if phase in expected:
            bound = BUCKETS[bucket_index(expected[phase])]
            assert exported[f'vllm_log_startup_duration_seconds_bucket{{le="{bound}",phase="{phase}"}}'] >= 1
            assert exported[f'vllm_log_last_startup_duration_seconds{{phase="{phase}"}}'] == pytest.approx(
                expected[phase]
            )
        else:
            assert f'vllm_log_last_startup_duration_seconds{{phase="{phase}"}}' not in exported


def version_series(pipeline) -> dict[str, float]:
    return {k: v for k, v in exposition(pipeline).items() if k.startswith("vllm_log_vllm_version_info")}


def test_the_version_series_is_replaced_on_an_upgrade_and_never_grows() -> None:
    pipeline = make_pipeline(FakeClock())
    assert version_series(pipeline) == {}
    source = pipeline.new_source()
    seen = []
    for line in (LOGS / "constructed-v0.20-upgrade-to-v0.26.log").read_bytes().split(b"\n")[:-1]:
        pipeline.feed(source, line + b"\n")
        series = version_series(pipeline)
        assert len(series) <= 1
        if series and (not seen or seen[-1] != series):
            seen.append(series)
    assert seen == [
        {'vllm_log_vllm_version_info{version="0.20.2"}': 1.0},
        {'vllm_log_vllm_version_info{version="0.26.0"}': 1.0},
    ]
    # A downgrade (here the 0.4 fixture read after it) replaces it again.
    pipeline.feed(source, (LOGS / "constructed-v0.4-start-stop.log").read_bytes())
    assert version_series(pipeline) == {'vllm_log_vllm_version_info{version="0.4.3"}': 1.0}


@pytest.mark.parametrize(
    "text", ["0.4.3", "0.6.6.post1", "0.8.5.post1", "0.11.0rc1", "0.10.1.dev5+gabc1234", "0.32.0+cpu"]
)
def test_release_numbers_are_valid_versions(text: str) -> None:
    assert valid_version(text)


@pytest.mark.parametrize(
    "text", ["", "latest", "v0.4.3", "1", "0.4.3 x", "0.4.3/../x", "1.2." + "3" * 40, "0.4.3" + "a" * 30]
)
def test_other_strings_are_not_versions(text: str) -> None:
    assert not valid_version(text)


@pytest.mark.parametrize(
    "text", ["latest", "../../etc/passwd", "0.4.3/../x", "1.2." + "3" * 40, "0.4.3" + "a" * 30]
)
def test_a_start_marker_with_a_bad_version_keeps_the_last_good_one(text: str) -> None:
    pipeline = make_pipeline(FakeClock())
    source = pipeline.new_source()
    pipeline.feed(source, b"INFO 05-26 22:20:30 api_server.py:177] vLLM API server version 0.6.6\n")
    pipeline.feed(source, f"INFO 05-26 22:30:00 api_server.py:177] vLLM API server version {text}\n".encode())
    assert version_series(pipeline) == {'vllm_log_vllm_version_info{version="0.6.6"}': 1.0}
    assert pipeline.counts.events["startup_begin"] == 2  # still a start marker


def api(ts: str, message: str, level: str = "INFO") -> bytes:
    return f"(APIServer pid=1) {level} 11-29 {ts} [api_utils.py:1] {message}\n".encode()


def engine(ts: str, message: str, level: str = "INFO", proc: str = "EngineCore pid=2") -> bytes:
    return f"({proc}) {level} 11-29 {ts} [core.py:1] {message}\n".encode()


LOGO = api("10:00:00", " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0")
ARGS = api("10:00:00", "non-default args: {'model': 'm'}")
INIT = engine("10:00:05", "Initializing a V1 LLM engine (v0.32.0) with config: model='m'")
LOAD = engine("10:00:10", "Starting to load model m...", proc="Worker pid=3")
READY = b"INFO:     Application startup complete.\n"


def run_lines(*lines: bytes, clock: FakeClock | None = None, live: bool = True):
    pipeline = make_pipeline(clock or FakeClock(), settings=Settings(live=live))
    source = pipeline.new_source()
    for line in lines:
        pipeline.feed(source, line)
    return pipeline


def test_one_startup_counts_once_however_many_markers_it_prints() -> None:
    """The logo, the arguments and one `Initializing` per engine core (data parallel)."""
    pipeline = run_lines(LOGO, ARGS, INIT, INIT.replace(b"pid=2", b"pid=4"), LOAD, INIT, READY)
    assert pipeline.counts.events["startup_begin"] == 1
    assert pipeline.counts.server_state == "ready"


def test_a_server_marker_seen_again_is_a_new_process() -> None:
    """A restart whose failure the log does not show: the arguments again while starting, or
    any server marker once loading began. The engine marker during loading is not one."""
    assert run_lines(ARGS, ARGS).counts.events["startup_begin"] == 2
    assert run_lines(ARGS, LOAD, INIT).counts.events["startup_begin"] == 1
    restarted = run_lines(ARGS, LOAD, LOGO)
    assert restarted.counts.events["startup_begin"] == 2
    assert restarted.counts.server_state == "starting"


def test_any_marker_after_a_startup_ends_is_a_new_startup() -> None:
    failed = engine("10:00:20", "EngineCore failed to start.", "ERROR")
    for ending in (READY, failed, api("10:01:00", "[shutdown] API server: shutdown triggered")):
        pipeline = run_lines(ARGS, ending, INIT.replace(b"10:00:05", b"10:02:00"))
        assert pipeline.counts.events["startup_begin"] == 2, ending
        assert pipeline.counts.server_state == "starting"


def test_lines_of_a_failed_start_do_not_revive_it() -> None:
    """A second tensor-parallel worker reports its weights after the first one failed."""
    pipeline = run_lines(
        ARGS,
        LOAD,
        engine("10:00:20", "EngineCore failed to start.", "ERROR"),
        engine("10:00:21", "Loading weights took 3.00 seconds", proc="Worker_TP1 pid=5"),
        engine("10:00:21", "Starting to load model m...", proc="Worker_TP1 pid=5"),
    )
    assert pipeline.counts.server_state == "failed_start"
    assert pipeline.machine.lifecycle.figures == {}
    assert pipeline.counts.last_startup_durations == {}


def test_a_shutdown_during_the_startup_is_a_planned_stop() -> None:
    pipeline = run_lines(
        ARGS,
        LOAD,
        api("10:00:30", "[shutdown] API server: shutdown triggered"),
        b"INFO:     Finished server process [1]\n",
    )
    assert pipeline.counts.server_state == "stopped"
    assert pipeline.counts.events["shutdown"] == 1


def test_a_dead_or_failed_server_shutting_down_stays_dead_or_failed() -> None:
    death = api("10:05:00", "AsyncLLM output_handler failed.", "ERROR")
    shutdown = b"INFO:     Shutting down\nINFO:     Application shutdown complete.\n"
    assert run_lines(ARGS, READY, death, shutdown).counts.server_state == "dead"
    failure = engine("10:00:20", "EngineCore failed to start.", "ERROR")
    assert run_lines(ARGS, failure, shutdown).counts.server_state == "failed_start"


def test_engine_dead_noise_during_a_planned_stop_stays_a_stop() -> None:
    dead = "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace."
    pipeline = run_lines(
        ARGS,
        READY,
        api("10:30:00", "[shutdown] API server: shutdown triggered"),
        api("10:30:00", "AsyncLLM output_handler failed.", "ERROR"),
        api("10:30:00", dead, "ERROR"),
        b"INFO:     Shutting down\nINFO:     Application shutdown complete.\n",
    )
    assert pipeline.counts.server_state == "stopped"
    assert pipeline.counts.events["engine_dead"] == 0


def test_the_since_timestamp_moves_on_transitions_only() -> None:
    clock = FakeClock(1_900_000_000)
    pipeline = make_pipeline(clock)
    source = pipeline.new_source()
    assert pipeline.counts.server_state_since == 0
    pipeline.feed(source, ARGS)
    assert pipeline.counts.server_state_since == 1_900_000_000
    clock.advance(5)
    pipeline.feed(source, INIT)  # the same startup: no transition
    assert pipeline.counts.server_state_since == 1_900_000_000
    pipeline.feed(source, LOAD)
    assert pipeline.counts.server_state_since == 1_900_000_005
    clock.advance(60)
    pipeline.feed(source, engine("10:01:10", "Loading weights took 1.00 seconds"))  # still loading
    assert pipeline.counts.server_state_since == 1_900_000_005
    clock.advance(1)
    pipeline.feed(source, ARGS.replace(b"10:00:00", b"10:01:20"))  # a new process: a new startup
    assert pipeline.counts.server_state == "starting"
    assert pipeline.counts.server_state_since == 1_900_000_066


def test_total_from_the_wall_clock_when_the_log_gives_one_time_only() -> None:
    """Nothing timestamped between the start marker and uvicorn's untimed readiness line:
    following the log, the wall clock between reading them measures it; --once cannot."""
    clock = FakeClock()
    pipeline = make_pipeline(clock)
    source = pipeline.new_source()
    pipeline.feed(source, ARGS)
    clock.advance(42)
    pipeline.feed(source, READY)
    assert pipeline.counts.last_startup_durations == {"total": 42}
    once = run_lines(ARGS, READY, live=False)
    assert once.counts.last_startup_durations == {}
    assert exposition(once)['vllm_log_startup_duration_seconds_count{phase="total"}'] == 0


def test_weights_prefer_the_weights_line_and_take_the_slowest_worker() -> None:
    def worker(n: int, message: str) -> bytes:
        return engine("10:00:30", message, proc=f"Worker_TP{n} pid={10 + n}")

    both = run_lines(
        ARGS,
        worker(0, "Loading weights took 11.82 seconds"),
        worker(1, "Loading weights took 12.40 seconds"),
        worker(0, "Model loading took 7.6 GiB memory and 13.105720 seconds"),
        engine(
            "10:01:20",
            "init engine (profile, create kv cache, warmup model) took 46.12 s (compilation: 21.05 s)",
        ),
        engine(
            "10:01:20",
            "init engine (profile, create kv cache, warmup model) took 44.00 s",
            proc="EngineCore_DP1 pid=9",
        ),
        api("10:01:21", "Starting vLLM server on http://0.0.0.0:8000"),
        READY,
        live=False,
    )
    assert both.counts.last_startup_durations == {"weights": 12.40, "engine_init": 46.12, "total": 81.0}
    fallback = run_lines(
        ARGS, worker(0, "Model loading took 14.9889 GiB and 5.124630 seconds"), READY, live=False
    )
    assert fallback.counts.last_startup_durations == pytest.approx({"weights": 5.12463, "total": 30.0})


def test_durations_fall_into_their_buckets() -> None:
    assert [bucket_index(s) for s in (0.0, 1.0, 1.01, 17.0, 61.0, 3600.0, 3601.0)] == [0, 0, 1, 4, 7, 13, 14]
    pipeline = run_lines(ARGS, api("10:17:00", "Starting vLLM server on http://h:1"), READY, live=False)
    exported = exposition(pipeline)
    buckets = {
        le: exported[f'vllm_log_startup_duration_seconds_bucket{{le="{le}",phase="total"}}']
        for le in ("900.0", "1800.0", "+Inf")
    }
    assert buckets == {"900.0": 0, "1800.0": 1, "+Inf": 1}  # 17 minutes
    assert exported['vllm_log_startup_duration_seconds_sum{phase="total"}'] == 1020


def test_restart_loop_fixture_counts_every_start_and_no_durations_for_failed_ones() -> None:
    _, pipeline = states_of((LOGS / "vllm-0.32.0-cpu-restart-loop.log").read_bytes(), live=False)
    counts = pipeline.counts
    assert counts.events["startup_begin"] == 4 and counts.events["startup_failed"] == 3
    assert counts.startup_failures["kv_cache_too_small"] == 3
    weights = counts.startup_durations["weights"]
    assert sum(weights["buckets"]) == 1  # only the good start completed
    assert set(counts.last_startup_durations) == {"weights", "engine_init", "total"}


def test_a_log_rotated_or_truncated_mid_startup_gives_the_same_lifecycle(tmp_path: Path) -> None:
    """Rename-and-create and copytruncate in the middle of a startup: the state, the
    durations and the counts equal reading the log in one piece."""
    from vllm_log_exporter.tailer import FileSource, Tailer

    data = (LOGS / "vllm-0.32.0-cpu-restart-loop.log").read_bytes()
    lines = data.split(b"\n")[:-1]
    cut_1 = next(i for i, line in enumerate(lines) if b"Starting to load model" in line) + 1
    cut_2 = len(lines) - 40  # inside the good start's traffic and shutdown
    parts = [b"\n".join(lines[a:b]) + b"\n" for a, b in ((0, cut_1), (cut_1, cut_2), (cut_2, len(lines)))]
    _, whole = states_of(data, live=False)

    for rotation in ("rename", "copytruncate"):
        log = tmp_path / f"{rotation}.log"
        log.write_bytes(parts[0])
        pipeline = make_pipeline(FakeClock(), settings=Settings(live=False))
        tailer = Tailer(pipeline, [FileSource(log, pipeline, warn=lambda m: None)])
        tailer.poll()
        assert pipeline.counts.server_state == "loading"
        for part in parts[1:]:
            if rotation == "rename":
                log.rename(log.with_suffix(".1"))
                log.write_bytes(part)
            else:  # copy, truncate in place (seen by the next poll), then vLLM writes on
                with open(log, "r+b") as f:
                    f.truncate(0)
                tailer.poll()
                with open(log, "ab") as f:
                    f.write(part)
            tailer.poll()
        counts = pipeline.counts
        assert (counts.rotations, counts.truncations) == ((2, 0) if rotation == "rename" else (0, 2))
        assert counts.server_state == whole.counts.server_state == "stopped"
        assert counts.events == whole.counts.events
        assert counts.startup_durations == whole.counts.startup_durations
        assert counts.last_startup_durations == whole.counts.last_startup_durations
        assert counts.vllm_version == "0.32.0"
