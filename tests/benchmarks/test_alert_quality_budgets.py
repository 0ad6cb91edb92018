"""Budgets come from what users lose, not from the rules under test: a page-worthy incident's
budget is the same whatever the bundle's `for`, windows or group wait, and each kind's is the
harm its docstring states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.alert_quality import budgets
from benchmarks.alert_quality.run import main
from benchmarks.alert_quality.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
DAY = REPO / "benchmarks" / "alert_quality" / "scenarios" / "day.yaml"


def recorded_run(folder: Path, config: Path) -> None:
    """A finished run of the day scenario with no notification, scored under `config`."""
    (folder / "bundle").mkdir(parents=True)
    health = {
        "rule_evaluation_failures": 0,
        "rule_group_iterations_missed": 0,
        "rule_group_iterations": 1,
        "simulation_behind_s": 0,
        "simulation_most_behind_s": 0,
        "slowest_tick_wall_s": 0,
    }
    summary = {
        "scenario": {"name": "day", "file": str(DAY), "duration_s": 43200},
        "time_scale": 30,
        "engine": "gpu",
        "config": str(config),
        "before": "0b48dea",
        "seed": 7,
        "separately": False,
        "run": health,
    }
    (folder / "bundle" / "results.json").write_text(json.dumps(summary))
    (folder / "bundle" / "notifications.json").write_text("[]")


def scored_budgets(tmp_path: Path, name: str, knobs: dict) -> dict[str, float]:
    config = tmp_path / f"{name}.yml"
    config.write_text(yaml.safe_dump(knobs))
    folder = tmp_path / name
    recorded_run(folder, config)
    assert main(["--rescore", str(folder)]) == 1  # nothing paged: the bundle fails the day
    results = json.loads((folder / "bundle" / "results.json").read_text())
    return {i["id"]: i["budget_s"] for i in results["incidents"] if i["budget_s"] is not None}


def test_a_budget_does_not_change_when_the_bundles_for_changes(tmp_path):
    production = scored_budgets(tmp_path, "production", {})
    slower = scored_budgets(
        tmp_path,
        "slower",
        {
            "alerts": {"target_down_for": "6m", "hung_for": "8m", "rejections_for": "10m"},
            "paging": {"recovery_for": "30m"},
            "alertmanager": {"group_wait": "2m"},
            "prometheus": {"scrape_interval": "1m", "evaluation_interval": "1m"},
        },
    )
    assert production == slower
    assert production["death-silent"] == production["hung"] == production["long-outage"] == 300
    assert production["errors-30"] == pytest.approx(0.02 * 30 * 86400 * 0.001 / 0.30 + 300, abs=0.1)


def test_each_kind_has_the_budget_of_its_harm():
    day = load_scenario(DAY)
    by_id = {i.id: i for i in day.incidents}
    got = budgets.budgets(day)
    # Every page-worthy incident has one; nothing that must not page does.
    assert set(got) == {i.id for i in day.incidents if i.expect == "page"}
    assert got["errors-5"] == pytest.approx(0.02 * 30 * 86400 * 0.001 / 0.05 + 300)
    # The users' objective is the scenario's: a looser promise leaves more time.
    loose = budgets.budget(by_id["errors-5"], availability_objective=0.99)
    assert loose == pytest.approx(0.02 * 30 * 86400 * 0.01 / 0.05 + 300)
    assert {got[k] for k in ("spike-beyond", "kv-exhausted", "backlog", "embed-lost", "floor-6")} == {300}
