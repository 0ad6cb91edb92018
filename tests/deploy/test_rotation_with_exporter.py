"""The real log exporter follows the log the real entrypoint wrapper rotates (replayed 0.32 logs,
many rotations) and counts exactly what one pass over the whole output counts; restarted, it
resumes from its state file across a rotation that happened while it was down."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.exporter.helpers import LOGS, ExporterProcess, run_once, samples, wait_until
from tests.support.vllm_server import free_port

from .stackfiles import REPO

pytestmark = pytest.mark.slow

ENTRYPOINT = REPO / "stack" / "vllm_entrypoint.py"
CAPTURES = [
    LOGS / "vllm-0.32.0-cpu-normal.log",
    LOGS / "vllm-0.32.0-cpu-engine-killed.log",
    LOGS / "vllm-0.32.0-cpu-runtime-oom.log",
]
# Replays each file after `go-<index>` appears in the control folder, 2 KiB every 50 ms.
WRITER = """
import os, sys, time
control, paths = sys.argv[1], sys.argv[2:]
for index, path in enumerate(paths):
    while not os.path.exists(os.path.join(control, f"go-{index}")):
        time.sleep(0.02)
    data = open(path, "rb").read()
    for start in range(0, len(data), 2048):
        sys.stdout.buffer.write(data[start : start + 2048])
        sys.stdout.buffer.flush()
        time.sleep(0.05)
    open(os.path.join(control, f"done-{index}"), "w").close()
"""
COUNTED = ("vllm_log_lines_total", "vllm_log_bytes_total")


def expected_rotations(stream: bytes, max_bytes: int) -> int:
    """The wrapper's rule, stated independently: a file that holds max_bytes or more at the
    end of a line is rotated before the next line (these lines are all shorter than that)."""
    rotations = size = 0
    for line in stream.splitlines(keepends=True):
        if size >= max_bytes:
            rotations, size = rotations + 1, 0
        size += len(line)
    return rotations


def counted(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k.startswith("vllm_log_events_total") or k in COUNTED}


class Wrapper:
    """The entrypoint wrapper running WRITER, its console output collected as it comes
    (a console that is not read would block the wrapper, as a stuck `docker logs` would)."""

    def __init__(self, tmp_path: Path, log: Path, max_bytes: int, backups: int) -> None:
        self.process = _start_wrapper(tmp_path, log, max_bytes, backups)
        self.output = bytearray()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := self.process.stdout.read1(65536):
            self.output += chunk

    def finish(self) -> bytes:
        _, err = self.process.communicate(timeout=60)
        self.reader.join(timeout=10)
        assert self.process.returncode == 0, err
        return bytes(self.output)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _start_wrapper(tmp_path: Path, log: Path, max_bytes: int, backups: int) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            str(ENTRYPOINT),
            f"--log-file={log}",
            f"--max-bytes={max_bytes}",
            f"--backups={backups}",
            "--",
            sys.executable,
            "-c",
            WRITER,
            str(tmp_path),
            *map(str, CAPTURES),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def go(tmp_path: Path, index: int) -> None:
    (tmp_path / f"go-{index}").touch()
    wait_until(lambda: (tmp_path / f"done-{index}").exists(), timeout=120, what=f"phase {index} written")


def test_the_exporter_counts_exactly_across_the_wrappers_rotations(tmp_path: Path) -> None:
    log, max_bytes, backups = tmp_path / "logs" / "vllm.log", 16384, 3
    stream = b"".join(p.read_bytes() for p in CAPTURES)
    rotations = expected_rotations(stream, max_bytes)
    assert rotations >= 5  # the point of the test: many rotations under the reader
    whole = tmp_path / "whole.log"
    whole.write_bytes(stream)
    expected = counted(samples(run_once(whole)))
    assert expected['vllm_log_events_total{event="engine_dead"}'] >= 1
    assert expected['vllm_log_events_total{event="oom"}'] >= 1

    exporter = ExporterProcess(f"--log-file={log}", port=free_port())
    wrapper = None
    try:
        exporter.metrics()  # serving, the file not there yet
        wrapper = Wrapper(tmp_path, log, max_bytes, backups)
        for index in range(len(CAPTURES)):
            go(tmp_path, index)
        assert wrapper.finish() == stream
        final = exporter.wait_for("vllm_log_bytes_total", float(len(stream)), timeout=60)
        assert counted(final) == expected
        assert final["vllm_log_rotations_total"] == rotations
        assert final["vllm_log_truncations_total"] == 0
    finally:
        exporter.close()
        if wrapper is not None:
            wrapper.close()
    files = sorted(p.name for p in log.parent.iterdir())
    assert files == ["vllm.log", "vllm.log.1", "vllm.log.2", "vllm.log.3"]  # bounded: backups + 1


def test_a_restarted_exporter_resumes_across_a_rotation_while_it_was_down(tmp_path: Path) -> None:
    log, max_bytes, backups = tmp_path / "logs" / "vllm.log", 32768, 5
    state = tmp_path / "state.json"
    parts = [p.read_bytes() for p in CAPTURES]
    stream = b"".join(parts)
    # Exactly one rotation happens while the exporter is down (during the second capture).
    assert expected_rotations(parts[0], max_bytes) == 0
    assert expected_rotations(parts[0] + parts[1], max_bytes) == 1
    whole = tmp_path / "whole.log"
    whole.write_bytes(stream)
    expected = counted(samples(run_once(whole)))

    port = free_port()
    first = ExporterProcess(f"--log-file={log}", f"--state-file={state}", port=port)
    wrapper = Wrapper(tmp_path, log, max_bytes, backups)
    try:
        go(tmp_path, 0)
        first.wait_for("vllm_log_bytes_total", float(len(parts[0])), timeout=60)

        def saved_offset() -> int | None:
            try:
                files = json.loads(state.read_text())["files"]
            except (OSError, ValueError, KeyError):
                return None
            return next(iter(files.values()))["offset"] if files else None

        wait_until(lambda: saved_offset() == len(parts[0]), timeout=30, what="the state file to catch up")
        first.kill9()
        go(tmp_path, 1)  # written while no exporter runs: vllm.log becomes vllm.log.1
        assert (log.parent / "vllm.log.1").exists()
        time.sleep(0.2)
        second = ExporterProcess(f"--log-file={log}", f"--state-file={state}", port=port)
        try:
            second.wait_for("vllm_log_bytes_total", float(len(parts[0]) + len(parts[1])), timeout=60)
            go(tmp_path, 2)
            assert wrapper.finish() == stream
            final = second.wait_for("vllm_log_bytes_total", float(len(stream)), timeout=60)
            assert counted(final) == expected
            assert final["vllm_log_rotations_total"] == expected_rotations(stream, max_bytes)
        finally:
            second.close()
    finally:
        first.close()
        wrapper.close()
