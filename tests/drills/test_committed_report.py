"""The committed drill report (docs/drills, written by `make drill`) covers every scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from .catalog import SCENARIOS

REPORT = Path(__file__).parents[2] / "docs" / "drills"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.key for s in SCENARIOS])
def test_committed_report_has_the_scenario_and_its_picture(scenario):
    text = (REPORT / "report.md").read_text("utf-8")
    assert f"## {scenario.heading}" in text, f"docs/drills/report.md has no section for {scenario.heading}"
    assert f"]({scenario.picture})" in text, f"the section of {scenario.heading} does not show its picture"
    picture = REPORT / scenario.picture
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{picture} is not a PNG"


def test_committed_report_includes_a_doctor_run():
    text = (REPORT / "report.md").read_text("utf-8")
    assert "## `vllm-obs doctor` on the drill stack" in text
    assert "exited **" in text
