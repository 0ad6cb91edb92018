"""The benchmark's mtail program is generated from patterns.yaml: it must be current and
compile with the real mtail, or the benchmark compares against a different workload."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "log_exporter"


def make_mtail():
    spec = importlib.util.spec_from_file_location("make_mtail", BENCH / "make_mtail.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_mtail_program_is_current():
    assert (BENCH / "vllm.mtail").read_text() == make_mtail().render()


@pytest.mark.prometheus
def test_mtail_compiles_the_program(tmp_path):
    mtail = shutil.which("mtail")
    assert mtail, "mtail is not installed; `make system-deps` installs it"
    progs = tmp_path / "progs"
    progs.mkdir()
    shutil.copy(BENCH / "vllm.mtail", progs / "vllm.mtail")
    result = subprocess.run(
        [mtail, "--compile_only", "--progs", str(progs), "--logtostderr"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
