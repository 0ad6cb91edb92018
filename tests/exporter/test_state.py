"""The state file: atomic, consistent with the offsets, robust to failing writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_log_exporter import state
from vllm_log_exporter.tailer import FileSource, Tailer

from tests.support.vllm_server import free_port

from .helpers import LOGS, FakeClock, exporter, make_pipeline, wait_until

LINE = "(APIServer pid=1) ERROR 11-29 10:05:00 [async_llm.py:906] AsyncLLM output_handler failed.\n"


def setup(tmp_path: Path, text: str):
    log = tmp_path / "vllm.log"
    log.write_text(text)
    pipeline = make_pipeline(FakeClock())
    tailer = Tailer(pipeline, [FileSource(log, pipeline, warn=lambda m: None)])
    return log, pipeline, tailer


def test_snapshot_excludes_the_partial_line(tmp_path: Path) -> None:
    log, pipeline, tailer = setup(tmp_path, LINE + "partial")
    tailer.poll()
    data = state.snapshot(pipeline, tailer)
    assert data["files"][str(log)]["offset"] == len(LINE)
    assert data["counts"]["bytes"] == len(LINE)
    assert pipeline.counts.bytes == len(LINE) + len("partial")  # live value: all bytes read
    assert data["counts"]["events"]["engine_dead"] == 1


def test_save_is_atomic_and_round_trips(tmp_path: Path) -> None:
    log, pipeline, tailer = setup(tmp_path, LINE)
    tailer.poll()
    path = tmp_path / "state.json"
    state.save(path, state.snapshot(pipeline, tailer))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "vllm.log"]
    restored = make_pipeline(FakeClock())
    resume = state.restore(state.load(path), restored)
    assert restored.counts.events == pipeline.counts.events
    assert restored.counts.lines == 1
    assert restored.machine.phase == "dead"
    assert resume[str(log)].offset == len(LINE)


def test_loading_rejects_unknown_formats(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    assert state.load(path) is None
    path.write_text(json.dumps({"version": 99}))
    with pytest.raises(state.StateError, match="unknown format"):
        state.load(path)
    path.write_text(json.dumps({"version": 1, "files": {"x": {"device": "a"}}}))
    with pytest.raises(state.StateError, match="invalid content"):
        state.restore(state.load(path), make_pipeline())


def test_restored_counts_keep_only_known_labels(tmp_path: Path) -> None:
    pipeline = make_pipeline()
    state.restore(
        {
            "version": 1,
            "counts": {
                "events": {"oom": 2, "made_up": 5},
                "startup_failures": {"kv_cache_too_small": 1, "cosmic_rays": 3},
                "stats": {
                    "0": {
                        k: 1
                        for k in (
                            "running",
                            "waiting",
                            "kv_cache_usage_ratio",
                            "prompt_throughput",
                            "generation_throughput",
                            "timestamp",
                        )
                    },
                    "../../etc": {"running": 1},
                    "99999": {"running": 1},
                },
            },
        },
        pipeline,
    )
    assert pipeline.counts.events["oom"] == 2 and "made_up" not in pipeline.counts.events
    assert "cosmic_rays" not in pipeline.counts.startup_failures
    assert list(pipeline.counts.stats) == ["0"]


def test_a_failing_write_is_reported_once_and_retried(tmp_path: Path) -> None:
    log, pipeline, tailer = setup(tmp_path, LINE)
    target = tmp_path / "state-dir" / "state.json"  # the directory does not exist yet
    clock = FakeClock(0)
    warnings: list[str] = []
    keeper = state.StateKeeper(target, pipeline, tailer, clock=clock, warn=warnings.append)
    keeper.after_poll(tailer.poll())
    keeper.after_poll(0)
    keeper.after_poll(0)
    assert len(warnings) == 1 and warnings[0].startswith(f"cannot save state to {target}: ")
    target.parent.mkdir()
    keeper.after_poll(0)
    assert warnings[-1] == f"saving state to {target} again"
    assert json.loads(target.read_text())["counts"]["events"]["engine_dead"] == 1


def test_saves_are_throttled_while_data_flows(tmp_path: Path) -> None:
    log, pipeline, tailer = setup(tmp_path, LINE)
    clock = FakeClock(100)
    saves: list[float] = []
    keeper = state.StateKeeper(tmp_path / "s.json", pipeline, tailer, clock=clock)
    original = keeper.save

    def counting_save() -> None:
        saves.append(clock())
        original()

    keeper.save = counting_save  # type: ignore[method-assign]
    keeper.after_poll(100)  # first read: saved (nothing saved yet)
    clock.advance(0.3)
    keeper.after_poll(100)  # still reading, < 1 s since the last save: wait
    clock.advance(0.8)
    keeper.after_poll(100)  # >= 1 s: save
    keeper.after_poll(0)  # caught up with unsaved progress? no: nothing new since
    keeper.after_poll(0)
    assert saves == [100, 101.1]


# A state file as the exporter wrote it before the lifecycle metrics existed.
STATE_BEFORE_LIFECYCLE = {
    "version": 1,
    "files": {},
    "counts": {
        "events": {
            "oom": 0,
            "engine_dead": 0,
            "startup_failed": 0,
            "preemption": 0,
            "request_error": 3,
            "startup_complete": 1,
            "shutdown": 0,
        },
        "last_event_time": {"startup_complete": 1_800_000_000.0, "request_error": 1_800_000_100.0},
        "startup_failures": {},
        "stats": {},
        "lines": 120,
        "bytes": 9000,
        "undecodable_lines": 0,
        "oversized_lines": 0,
        "rotations": 0,
        "truncations": 0,
        "read_errors": {},
        "last_read_time": 1_800_000_100.0,
    },
    "events": {"phase": "serving", "phase_time": 2_000_000.0, "last_log_time": 2_000_100.0},
}


def test_a_state_file_from_before_the_lifecycle_metrics_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(STATE_BEFORE_LIFECYCLE))
    clock = FakeClock(1_900_000_000)
    pipeline = make_pipeline(clock)
    state.restore(state.load(path), pipeline)
    counts = pipeline.counts
    assert counts.events["request_error"] == 3 and counts.events["startup_begin"] == 0
    assert counts.lines == 120
    # The event rules' phase says the server was serving: that is the state, since now.
    assert counts.server_state == "ready" and counts.server_state_since == 1_900_000_000
    assert counts.vllm_version is None and counts.last_startup_durations == {}
    assert all(sum(h["buckets"]) == 0 for h in counts.startup_durations.values())
    # And it goes on from there: a death while serving.
    source = pipeline.new_source()
    pipeline.feed(source, LINE.encode())
    assert counts.server_state == "dead" and counts.events["engine_dead"] == 1


def test_lifecycle_fields_round_trip_and_bad_values_are_dropped(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    lines = (LOGS / "vllm-0.32.0-cpu-normal.log").read_bytes().split(b"\n")
    loading = next(i for i, line in enumerate(lines) if b"Loading weights took" in line) + 1
    log.write_bytes(b"\n".join(lines[:loading]) + b"\n")
    pipeline = make_pipeline(FakeClock(1_850_000_000))
    tailer = Tailer(pipeline, [FileSource(log, pipeline, warn=lambda m: None)])
    tailer.poll()
    saved = state.snapshot(pipeline, tailer)
    assert saved["counts"]["server_state"] == "loading"
    assert saved["events"]["lifecycle"]["figures"] == {"weights": 0.02}
    restored = make_pipeline(FakeClock())
    state.restore(json.loads(json.dumps(saved)), restored)
    assert restored.counts.server_state == "loading"
    assert restored.counts.server_state_since == 1_850_000_000
    assert restored.counts.vllm_version == "0.32.0"
    assert restored.machine.lifecycle.to_json() == pipeline.machine.lifecycle.to_json()

    saved["counts"].update(
        server_state="exploded",
        vllm_version="../../etc/passwd",
        last_startup_durations={"total": 3.0, "made_up": 1.0},
        startup_durations={
            "total": {"buckets": [1, 2], "sum": 3.0},
            "made_up": {"buckets": [0] * 15, "sum": 0},
        },
    )
    other = make_pipeline(FakeClock())
    state.restore(saved, other)
    assert other.counts.server_state == "unknown"
    assert other.counts.vllm_version is None
    assert other.counts.last_startup_durations == {"total": 3.0}
    assert set(other.counts.startup_durations) == {"weights", "engine_init", "total"}
    assert sum(other.counts.startup_durations["total"]["buckets"]) == 0  # wrong shape: dropped


def test_an_exporter_restarted_mid_startup_keeps_the_state_and_its_since_time(tmp_path: Path) -> None:
    """kill -9 while the server loads its model; the restarted exporter still says loading,
    since the same moment, and completes the startup's figures from what it had read."""
    log, saved = tmp_path / "vllm.log", tmp_path / "state.json"
    lines = (LOGS / "vllm-0.32.0-cpu-normal.log").read_bytes().split(b"\n")
    cut = next(i for i, line in enumerate(lines) if b"Loading weights took" in line) + 1
    log.write_bytes(b"\n".join(lines[:cut]) + b"\n")
    port = free_port()
    loading = 'vllm_log_server_state{state="loading"}'
    with exporter("--log-file", str(log), "--state-file", str(saved), port=port) as first:
        before = first.wait_for(loading, 1)
        since = before["vllm_log_server_state_since_timestamp_seconds"]
        assert since > 0
        wait_until(lambda: _saved_state(saved) == "loading", what="the state file to hold the loading state")
        first.kill9()
    with exporter("--log-file", str(log), "--state-file", str(saved), port=port) as second:
        after = second.wait_for(loading, 1)
        assert after["vllm_log_server_state_since_timestamp_seconds"] == since
        assert after['vllm_log_events_total{event="startup_begin"}'] == 1
        assert after['vllm_log_vllm_version_info{version="0.32.0"}'] == 1
        with open(log, "ab") as out:
            out.write(b"\n".join(lines[cut:]))
        done = second.wait_for('vllm_log_server_state{state="stopped"}', 1)
        assert done['vllm_log_events_total{event="startup_begin"}'] == 1  # not counted again
        # The weights line was read before the restart, the rest after: one startup's figures,
        # the total from the log's own times (09:53:37 to 09:53:54).
        assert done['vllm_log_last_startup_duration_seconds{phase="weights"}'] == 0.02
        assert done['vllm_log_last_startup_duration_seconds{phase="engine_init"}'] == 2.9
        assert done['vllm_log_last_startup_duration_seconds{phase="total"}'] == 17
        assert done['vllm_log_startup_duration_seconds_count{phase="weights"}'] == 1
        assert second.terminate() == 0


def _saved_state(path: Path) -> str | None:
    try:
        return json.loads(path.read_text())["counts"]["server_state"]
    except (OSError, ValueError, KeyError):
        return None
