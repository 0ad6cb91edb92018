"""Pod labels: every alert names its namespace and pod, every fleet-wide rule is per namespace, and
the committed PrometheusRule is exactly the rules tested. The promtool cases put a neighbour with the
same instance and pod in another namespace, so a rule that drops the namespace fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.generator.test_rules import check_and_test
from tests.support.bundles import LINKS, aggregation_clauses, dashboard_panels, generate
from tests.support.rule_slices import failures_without_label

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
PODS = {"prometheus": {"pod_labels": True}}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("pods") / "bundle", config=PODS)


@pytest.fixture(scope="module")
def linked(tmp_path_factory) -> Path:
    """The same with links.* set: its alerts carry dashboard links."""
    return generate(tmp_path_factory.mktemp("pods-linked") / "bundle", config={**PODS, "links": LINKS})


def _groups(rule_files: list[Path]) -> list[dict]:
    return [g for path in rule_files for g in yaml.safe_load(path.read_text())["groups"]]


@pytest.mark.matrix
def test_rule_files_pass_promtool_check_and_their_two_namespace_tests(bundle):
    check_and_test(bundle)
    inputs = (bundle / "tests" / "rules" / "latency.test.yml").read_text()
    replica = 'model_name="llama-3-8b", namespace="team-{}", pod="vllm-0-7d9f8c6b5-abcde"'
    assert replica.format("a") in inputs and replica.format("b") in inputs


def test_the_committed_prometheus_rule_is_the_pod_label_bundle(bundle):
    committed = yaml.safe_load((ROOT / "kubernetes" / "generated" / "prometheusrule.yaml").read_text())
    rule_files = [bundle / "alerts" / "vllm-recording.rules.yml", bundle / "alerts" / "vllm-alerts.rules.yml"]
    assert committed["spec"]["groups"] == _groups(rule_files)
    # ...while the compose files keep their simple labels.
    compose = _groups(sorted((ROOT / "alerts").glob("*.rules.yml")))
    assert compose != committed["spec"]["groups"]
    assert not any("pod" in json.dumps(g) for g in compose if g["name"] == "vllm-obs.recording.requests")


def test_every_aggregation_keeps_the_namespace_and_every_per_server_one_the_pod(bundle):
    clauses = aggregation_clauses(bundle)
    for where, labels in clauses:
        assert "namespace" in labels, (where, labels)
        if "instance" in labels:
            assert "pod" in labels, (where, labels)
    assert len(clauses) > 100


def test_dropping_the_namespace_from_the_aggregations_fails_the_generated_tests(bundle, tmp_path):
    """The neighbour, the same instance and pod in another namespace, then merges with the replica."""
    assert failures_without_label(bundle, "namespace", tmp_path)


def test_per_server_alerts_name_the_pod_and_every_alert_its_namespace(linked):
    rules = yaml.safe_load((linked / "alerts" / "vllm-alerts.rules.yml").read_text())
    named = 0
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] in ("WatchdogVllmObs",) or rule["labels"].get("scope") == "job":
                continue  # about no namespace: the heartbeat, the whole job vanishing
            text = rule["annotations"]["description"]
            assert "$labels.namespace" in text, rule["alert"]
            if "$labels.instance" in text:
                assert "(pod {{ $labels.pod }})" in text, rule["alert"]
                named += 1
            assert "var-namespace={{ $labels.namespace | urlquery }}" in rule["annotations"]["dashboard_url"]
    assert named > 20


def test_notifications_group_by_namespace_and_name_the_pod(bundle, tmp_path):
    config = yaml.safe_load((bundle / "alerts" / "alertmanager.yml").read_text())
    group_by = config["route"]["group_by"]
    # One chat thread per namespace, model and cause; each replica's description names its pod.
    assert group_by == ["namespace", "alertname", "model_name"]
    per_replica = {**PODS, "alertmanager": {"group_by": ["alertname", "instance"]}}
    grouped = generate(tmp_path / "per-replica", config=per_replica) / "alerts" / "alertmanager.yml"
    assert yaml.safe_load(grouped.read_text())["route"]["group_by"] == ["namespace", "alertname", "instance", "pod"]
    for rule in config["inhibit_rules"]:
        if "instance" in rule["equal"]:
            assert {"namespace", "pod"} <= set(rule["equal"]), rule
    committed = yaml.safe_load((ROOT / "kubernetes" / "generated" / "alertmanagerconfig.yaml").read_text())
    assert committed["spec"]["route"]["groupBy"] == group_by


def test_dashboards_have_a_namespace_variable_and_every_vllm_query_uses_it(bundle):
    for path in sorted((bundle / "dashboards").glob("*.json")):
        names = [v["name"] for v in json.loads(path.read_text())["templating"]["list"]]
        assert names[:3] == ["datasource", "namespace", "job"], path.name
    for title, panel in dashboard_panels(bundle):
        for target in panel["targets"]:
            expr = target["expr"]
            if "ALERTS" in expr:
                continue  # the firing-alerts table lists every alert, as with multi-cluster
            if re.search(r'job="(prometheus|alertmanager)"', expr):
                # Prometheus' and Alertmanager's own series live in their own namespace.
                assert "$namespace" not in expr, (title, panel["title"])
            else:
                assert 'namespace=~"$namespace"' in expr, (title, panel["title"])
    committed = yaml.safe_load((ROOT / "kubernetes" / "generated" / "grafana-dashboards.yaml").read_text())
    for name, text in committed["data"].items():
        assert (bundle / "dashboards" / name).read_text() == text, name
