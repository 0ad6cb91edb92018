"""The --state-file: what a restarted exporter needs to continue exactly where it stopped (file
offsets, counters, the event rules' and the lifecycle's state), taken together under the pipeline
lock and written atomically. What it holds and why: docs/exporters.md.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .counts import Counts
from .pipeline import Pipeline
from .tailer import Resume, Tailer

FORMAT_VERSION = 1


class StateError(ValueError):
    """The state file exists but cannot be used."""


def snapshot(pipeline: Pipeline, tailer: Tailer) -> dict[str, Any]:
    with pipeline.lock:
        counts = pipeline.counts.to_json()
        # A partial last line is re-read after a restart (the offsets exclude it), so its
        # bytes are not part of the saved total either.
        counts["bytes"] -= tailer.pending_bytes()
        return {
            "version": FORMAT_VERSION,
            "files": tailer.resume_points(),
            "counts": counts,
            "events": pipeline.machine.to_json(),
        }


def save(path: Path, data: dict[str, Any]) -> None:
    text = json.dumps(data, sort_keys=True, indent=1) + "\n"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)  # rename(2) is atomic
    finally:
        if temporary.exists():
            temporary.unlink()


def load(path: Path) -> dict[str, Any] | None:
    """The saved state, or None when there is none yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"cannot read state file {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise StateError(f"state file {path} is not valid JSON; move it away to start afresh") from None
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise StateError(f"state file {path} has an unknown format; move it away to start afresh")
    return data


def restore(data: dict[str, Any], pipeline: Pipeline) -> dict[str, Resume]:
    """Put saved counts and event state into pipeline; returns resume points by path."""
    try:
        counts = Counts.from_json(data.get("counts", {}))
        resume = {path: Resume.from_json(point) for path, point in data.get("files", {}).items()}
    except (TypeError, ValueError, KeyError) as exc:
        raise StateError(f"state file has invalid content ({exc}); move it away to start afresh") from None
    with pipeline.lock:
        current = pipeline.counts
        for name in vars(counts):
            setattr(current, name, getattr(counts, name))
        pipeline.machine.restore(data.get("events", {}))
        if "server_state" not in data.get("counts", {}):  # written before the lifecycle metrics
            pipeline.machine.lifecycle.adopt_phase(pipeline.machine.phase)
    return resume


def check_writable(path: Path) -> None:
    """Fail at startup, not at the first save, when the state file cannot be written."""
    probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StateError(f"cannot write state file {path}: {exc.strerror}") from None


class StateKeeper:
    """Saves snapshots while the exporter runs: at most once a second while data flows,
    at once when caught up. A failed write (disk full, volume gone) is reported once on
    stderr and retried; it never stops the exporter."""

    def __init__(
        self,
        path: Path,
        pipeline: Pipeline,
        tailer: Tailer,
        clock: Callable[[], float] = time.monotonic,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.path, self.pipeline, self.tailer, self.clock = path, pipeline, tailer, clock
        self.warn = warn or (lambda m: print(f"vllm-log-exporter: {m}", file=sys.stderr, flush=True))
        self.last_save = float("-inf")
        self.unsaved = False
        self.failing = False

    def after_poll(self, bytes_read: int) -> None:
        self.unsaved = self.unsaved or bytes_read > 0
        if self.unsaved and (bytes_read == 0 or self.clock() - self.last_save >= 1.0):
            self.save()

    def save(self) -> None:
        try:
            save(self.path, snapshot(self.pipeline, self.tailer))
        except OSError as exc:
            if not self.failing:
                self.warn(f"cannot save state to {self.path}: {exc.strerror}; will retry")
            self.failing = True
            return
        if self.failing:
            self.warn(f"saving state to {self.path} again")
        self.failing, self.unsaved, self.last_save = False, False, self.clock()
