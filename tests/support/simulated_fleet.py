"""The fleet benchmark's simulator of vLLM engines, run as the benchmark runs it, for tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.fleet.prometheus import free_port

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def simulated_fleet(tmp_path: Path, engines: int = 12) -> Iterator[tuple[int, Path, Path, int]]:
    """(port, file_sd targets file, manifest, pid) of `engines` simulated engines, serving once yielded."""
    port, targets, manifest = free_port(), tmp_path / "targets.json", tmp_path / "fleet.json"
    command = ["-m", "benchmarks.fleet.simulator", "--engines", str(engines), "--port", str(port)]
    command += ["--targets", str(targets), "--manifest", str(manifest)]
    simulator = subprocess.Popen(
        [sys.executable, *command], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert f"serving {engines} engines".encode() in simulator.stdout.readline()
        yield port, targets, manifest, simulator.pid
    finally:
        simulator.terminate()
        simulator.wait(timeout=10)
        simulator.stdout.close()
