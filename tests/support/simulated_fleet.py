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


def fleet_bundle(tmp_path: Path, port: int, interval: str = "15s") -> Path:
    """The bundle for vLLM 0.32.0 (the simulator's release) scraping the fleet at `port` every `interval`."""
    config = tmp_path / "vllm-obs.yml"
    config.write_text(
        "prometheus:\n  vllm_job: vllm\n"
        f"  vllm_targets: ['127.0.0.1:{port}']\n  log_exporters: []\n  alertmanagers: []\n"
        f"  scrape_interval: {interval}\n  scrape_timeout: {interval}\n  evaluation_interval: {interval}\n"
    )
    bundle = tmp_path / "bundle"
    subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "vllm-obs"),
            "generate",
            "--vllm-version",
            "0.32.0",
            "--config",
            str(config),
            "--out",
            str(bundle),
        ],
        check=True,
        capture_output=True,
    )
    return bundle
