"""The live drills: every failure mode the alerts are written for, on real vLLM servers. One
module-scoped run executes the scenarios (run.py); each test judges one, so a failure hides no other.
The report goes to a temporary folder, or to VLLM_OBS_DRILL_REPORT (`make drill`: docs/drills)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .catalog import SCENARIOS
from .report import write_report
from .run import Drill

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus, pytest.mark.drill]


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory):
    run = Drill(tmp_path_factory.mktemp("drill"))
    try:
        run.run()
        for scenario in SCENARIOS:
            for part in run.results[scenario.key].parts:
                for latency in part.latencies:
                    print(
                        f"drill {scenario.number} {scenario.key}: {latency.alert} ({latency.severity}) "
                        f"-> {latency.receiver} {latency.seconds:.1f} s after the trigger"
                    )
        print(f"drill time: {run.finished - run.started:.0f} s")
        yield run
    finally:
        run.close()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.key for s in SCENARIOS])
def test_scenario(drill: Drill, scenario):
    result = drill.results[scenario.key]
    assert result.parts, f"{scenario.heading} did not run: {'; '.join(drill.phase_errors) or 'not reached'}"
    assert not result.failures, f"{scenario.heading}:\n" + "\n".join(result.failures)


def test_doctor_finds_the_drill_stack_healthy(drill: Drill):
    assert drill.doctor is not None, "the doctor did not run: " + "; ".join(drill.phase_errors)
    assert drill.doctor.code == 0, drill.doctor.output


def test_report_names_every_scenario_and_draws_each(drill: Drill, tmp_path: Path):
    out = Path(os.environ.get("VLLM_OBS_DRILL_REPORT") or tmp_path / "drills")
    report = write_report(drill, out).read_text("utf-8")
    for scenario in SCENARIOS:
        assert f"## {scenario.heading}" in report
        picture = out / scenario.picture
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", picture
        assert picture.stat().st_size > 10_000, f"{picture} is nearly empty"
    assert "vllm-obs doctor" in report
