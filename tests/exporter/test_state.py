"""The state file: atomic, consistent with the offsets, robust to failing writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_log_exporter import state
from vllm_log_exporter.tailer import FileSource, Tailer

from .helpers import FakeClock, make_pipeline

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
