"""Multi-cluster bundles: the cluster label survives every aggregation, join, inhibition,
notification group and dashboard query, so a replica in one cluster never masks, merges with
or silences its namesake in another (Thanos Ruler or the Mimir ruler evaluate these files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.generator.test_rules import check_and_test
from tests.support.bundles import LINKS, aggregation_clauses, dashboard_panels, generate
from tests.support.monitoring import Alertmanager
from tests.support.rule_slices import failures_without_label

pytestmark = pytest.mark.prometheus

MULTI = {"prometheus": {"multi_cluster": True, "cluster_label": "k8s_cluster"}, "links": LINKS}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("mc") / "bundle", config=MULTI)


@pytest.mark.matrix
def test_rule_files_pass_promtool_check_and_their_two_cluster_tests(bundle):
    check_and_test(bundle)
    # The generated cases place the neighbour in the other cluster under the same instance name.
    inputs = (bundle / "tests" / "rules" / "latency.test.yml").read_text()
    assert 'instance="vllm-0:8000", job="vllm", k8s_cluster="east"' in inputs
    assert 'instance="vllm-0:8000", job="vllm", k8s_cluster="west"' in inputs


def test_every_aggregation_and_join_keeps_the_cluster(bundle):
    for where, labels in aggregation_clauses(bundle):
        assert "k8s_cluster" in labels, (where, labels)


def test_dropping_the_cluster_from_the_aggregations_fails_the_generated_tests(bundle, tmp_path):
    """A replica of the same name in another cluster then merges with the one under test."""
    assert failures_without_label(bundle, "k8s_cluster", tmp_path)


def test_alerts_name_the_cluster(bundle):
    rules = yaml.safe_load((bundle / "alerts" / "vllm-alerts.rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] in ("WatchdogVllmObs", "VllmMetricsAbsent"):
                continue
            assert "$labels.k8s_cluster" in rule["annotations"]["description"], rule["alert"]
            assert "var-cluster={{ $labels.k8s_cluster | urlquery }}" in rule["annotations"]["dashboard_url"]


def test_notifications_group_and_inhibit_per_cluster(bundle):
    config = yaml.safe_load((bundle / "alerts" / "alertmanager.yml").read_text())
    assert config["route"]["group_by"][0] == "k8s_cluster"
    for rule in config["inhibit_rules"]:
        assert "k8s_cluster" in rule["equal"]


def test_dashboards_have_a_cluster_variable_and_every_query_uses_it(bundle, tmp_path):
    for path in sorted((bundle / "dashboards").glob("*.json")):
        names = [v["name"] for v in json.loads(path.read_text())["templating"]["list"]]
        assert names[:2] == ["datasource", "cluster"], path.name
    for title, panel in dashboard_panels(bundle):
        for target in panel["targets"]:
            if "ALERTS" in target["expr"]:
                continue
            assert 'k8s_cluster=~"$cluster"' in target["expr"], (title, panel["title"])
    default = generate(tmp_path / "default")
    for path in sorted((default / "dashboards").glob("*.json")):
        names = [v["name"] for v in json.loads(path.read_text())["templating"]["list"]]
        assert "cluster" not in names, "the cluster variable is shown only when multi-cluster is on"


def alert(case: str, name: str, severity: str, cluster: str, **labels: str) -> dict:
    return {
        "labels": {
            "alertname": name,
            "severity": severity,
            "job": "vllm",
            "k8s_cluster": cluster,
            "case": case,
            **labels,
        }
    }


# Two clusters run replicas with the same instance names.
POSTED = [
    alert("dead-east", "VllmEngineDead", "critical", "east", instance="vllm-0:8000", event="engine_dead"),
    alert("ttft-east", "VllmHighTimeToFirstToken", "warning", "east", instance="vllm-0:8000", model_name="m"),
    alert("ttft-west", "VllmHighTimeToFirstToken", "warning", "west", instance="vllm-0:8000", model_name="m"),
    alert("oom-west", "VllmOutOfMemory", "critical", "west", instance="vllm-1:8000", event="oom"),
    alert("dead-west", "VllmEngineDead", "critical", "west", instance="vllm-1:8000", event="engine_dead"),
    alert("dead-east-1", "VllmEngineDead", "critical", "east", instance="vllm-1:8000", event="engine_dead"),
    alert(
        "tpot-crit-east",
        "VllmHighTimePerOutputToken",
        "critical",
        "east",
        instance="vllm-2:8000",
        model_name="m",
    ),
    alert(
        "tpot-warn-east",
        "VllmHighTimePerOutputToken",
        "warning",
        "east",
        instance="vllm-2:8000",
        model_name="m",
    ),
    alert(
        "tpot-warn-west",
        "VllmHighTimePerOutputToken",
        "warning",
        "west",
        instance="vllm-2:8000",
        model_name="m",
    ),
]
INHIBITED = {"ttft-east", "dead-west", "tpot-warn-east"}


def test_a_replica_in_one_cluster_never_inhibits_its_namesake_in_another(bundle, tmp_path):
    config = tmp_path / "alertmanager.yml"
    config.write_text((bundle / "alerts" / "alertmanager.yml").read_text())
    with Alertmanager(config, tmp_path) as am:
        state, inhibited = am.inhibitions(POSTED, INHIBITED)
    assert set(state) == {a["labels"]["case"] for a in POSTED}
    assert inhibited == INHIBITED
