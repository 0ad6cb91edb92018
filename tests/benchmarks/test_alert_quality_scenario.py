"""Scenario files of the alert-quality benchmark: the committed ones parse and cover every kind
of incident; a mistake in a file is one sentence naming it, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from vllm_obs.errors import BundleError

from benchmarks.alert_quality.scenario import EXPECT, KINDS, TASKS, load_scenario, parse_scenario
from benchmarks.alert_quality.scoring import Routing, model_finder, score

SCENARIOS = Path(__file__).resolve().parents[2] / "benchmarks" / "alert_quality" / "scenarios"


def test_the_full_schedule_has_every_kind_expectation_and_task_and_50_healthy_replica_days():
    day = load_scenario(SCENARIOS / "day.yaml")
    assert {i.kind for i in day.incidents} == set(KINDS)
    assert {i.expect for i in day.incidents} == set(EXPECT)
    assert {m.task for m in day.fleet} == set(TASKS)
    assert sum(m.replicas for m in day.fleet) == 124 and day.duration == 12 * 3600
    # Healthy time: each replica's time outside the windows of incidents that deserve a notification.
    quiet = score(day, [], Routing(page=frozenset({"critical"})), model_finder(day))
    assert quiet.healthy_replica_seconds / 86_400 >= 50
    assert day.background.error_share > 0 and day.background.abort_share > 0 and day.background.rhythm > 0
    # Incidents that overlap on one model: a death during a burst, a rollout during a spike.
    pairs = {
        (a.id, b.id)
        for a in day.incidents
        for b in day.incidents
        if a is not b and a.target.model == b.target.model and a.at < b.at < a.end
    }
    assert {("burst-assist", "death-in-burst"), ("spike-beyond", "rollout-in-spike")} <= pairs
    # Capacity lost near the floor, and an outage longer than two hours.
    assist = {i.id: i for i in day.incidents if i.target.model == "assist"}
    assert {assist[f"floor-{n}"].target.replicas for n in (4, 5, 6)} == {4, 5, 6}
    assert assist["long-outage"].duration > 2 * 3600
    spike = next(i for i in day.incidents if i.id == "spike-beyond")
    assert (spike.at, spike.end, spike.params, spike.target.model) == (10200, 11700, {"factor": 3.0}, "small")
    assert day.source.endswith("day.yaml")


@pytest.mark.parametrize("name", ["shapes.yaml", "heldout.yaml", "twenty.yaml", "small.yaml", "recheck.yaml"])
def test_every_committed_scenario_parses(name):
    scenario = load_scenario(SCENARIOS / name)
    assert scenario.incidents and scenario.source.endswith(name)


def test_the_smoke_schedule_parses():
    smoke = load_scenario(SCENARIOS / "smoke.yaml")
    assert [i.expect for i in smoke.incidents] == ["page", "none"]


GOOD = {
    "name": "t",
    "duration": "1h",
    "fleet": [{"model": "m", "namespace": "ns", "replicas": 4, "trace": "conv", "per_replica_rate": 1}],
    "incidents": [
        {
            "id": "a",
            "kind": "slow_replica",
            "at": "10m",
            "duration": "5m",
            "factor": 3,
            "target": {"model": "m", "replicas": 1},
            "expect": "ticket",
        },
    ],
}


def mutated(path: str, value) -> dict:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("incidents.0.kind", "meteor", "has the kind 'meteor'; use one of engine_death"),
        ("incidents.0.factor", KeyError, "lacks factor; add it"),
        ("incidents.0.colour", "red", "unknown key(s) colour"),
        ("incidents.0.expect", "maybe", "expects 'maybe'; write page, ticket or none"),
        ("incidents.0.at", "soon", "'soon' is not a duration"),
        ("incidents.0.at", "58m", "ends after the scenario does"),
        ("incidents.0.factor", "fast", "factor must be a float"),
        ("incidents.0.target.model", "other", "targets the model 'other', which is not in the fleet"),
        ("incidents.0.target.replicas", 9, "targets 9 replicas of m, which has 4"),
        ("fleet.0.trace", "chat", "replays the trace 'chat'; use one of conv, code"),
        ("fleet.0.replicas", 0, "needs replicas: a whole number of at least 1"),
        ("fleet", [], "has no fleet"),
        ("duration", KeyError, "lacks duration"),
        ("fleet.0.task", "rerank", "has the task 'rerank'; use generate or embed"),
        ("background", {"error_share": 2}, "error_share must be a number from 0"),
        ("background", {"noise": 1}, "unknown key(s) noise"),
        ("start_hour", 25, "start_hour must be an hour of the day"),
        ("availability_objective", 99.9, "availability_objective must be a share between 0 and 1"),
    ],
)
def test_a_mistake_is_one_sentence_naming_it(path, value, message):
    with pytest.raises(BundleError) as error:
        parse_scenario(mutated(path, value), "t.yaml")
    assert message in str(error.value)
    assert str(error.value).count(". ") == 0 and str(error.value).endswith(".")


def test_overlapping_incidents_on_one_model_are_accepted():
    data = mutated("incidents", [GOOD["incidents"][0], {**GOOD["incidents"][0], "id": "b", "at": "12m"}])
    a, b = parse_scenario(data, "t.yaml").incidents
    assert a.target.model == b.target.model and b.at < a.end


def test_an_unreadable_file_is_a_clear_error(tmp_path):
    with pytest.raises(BundleError, match="cannot read the scenario file"):
        load_scenario(tmp_path / "none.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(BundleError, match="is not valid YAML"):
        load_scenario(broken)
