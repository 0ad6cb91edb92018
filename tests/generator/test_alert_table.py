"""docs/alert-table.md is generated from the alert declarations: a test fails when it is
stale, and every threshold knob of the config is named by the alert it tunes."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from vllm_obs.catalog import Catalog
from vllm_obs.cli import main as vllm_obs
from vllm_obs.config import AlertsSection, GpuSection, SloSection
from vllm_obs.rules.alert_table import alert_table

REPO = Path(__file__).parent.parent.parent
TABLE = REPO / "docs" / "alert-table.md"
# Knobs that tune no single alert: the window every rate uses, and how the GPU layer is wired.
NOT_AN_ALERTS_KNOB = {"alerts.rate_window", "gpu.enabled", "gpu.job", "gpu.join", "gpu.exporters"}


def test_the_committed_alert_table_is_not_stale(capsys):
    assert vllm_obs(["alert-table"]) == 0
    printed = capsys.readouterr().out
    assert printed == TABLE.read_text(), "Run `make generate` and commit docs/alert-table.md."


def test_the_table_lists_every_alert_once_with_its_severities():
    rows = [line for line in alert_table(Catalog.load()).splitlines() if line.startswith("| Vllm")]
    names = [row.split(" | ")[0].removeprefix("| ") for row in rows]
    assert len(names) == len(set(names)) > 25
    assert any(row.startswith("| VllmModelCapacityLow | capacity | critical |") for row in rows)
    assert any(row.startswith("| VllmGpuXidError | gpu | warning |") for row in rows)


def test_every_threshold_knob_is_named_by_the_alert_it_tunes():
    """A knob no declaration names is one the docs never show next to its alert."""
    named = set(re.findall(r"`((?:alerts|slo|gpu)\.\w+)`", TABLE.read_text()))
    knobs = {
        f"{section}.{f.name}"
        for section, cls in (("alerts", AlertsSection), ("slo", SloSection), ("gpu", GpuSection))
        for f in dataclasses.fields(cls)
    }
    assert knobs - named == NOT_AN_ALERTS_KNOB
