"""The paging rules stay readable at 3 a.m. and stateless: no rule reads its own output or
`ALERTS`, every paging expression fits in eight lines, at most ten recording rules per SLO, and
every paging runbook opens with the queries that reproduce it and the first five minutes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.support.bundles import generate

REPO = Path(__file__).resolve().parents[2]
MAX_PAGING_LINES = 8
MAX_RECORDINGS_PER_SLO = 10
# Every knob that adds structure to the paging rules: classes of models, desired replicas, pods.
EVERYTHING = {
    "prometheus": {"pod_labels": True, "multi_cluster": True},
    "slo": {
        "models": [
            {"model_name": "llama-70b.*", "ttft_threshold_seconds": 10, "ttft_objective": 0.95},
            {"namespace": "embeddings", "slis": ["availability"], "availability_objective": 0.99},
        ]
    },
    "paging": {"expected_replicas": {"llama-3-8b": 4}},
}


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("paging") / "bundle", config=EVERYTHING)


def _groups(bundle: Path, name: str) -> list[dict]:
    return yaml.safe_load((bundle / "alerts" / name).read_text())["groups"]


@pytest.fixture(params=["committed", "configured"])
def bundle(request: pytest.FixtureRequest) -> Path:
    return REPO if request.param == "committed" else request.getfixturevalue("configured")


def test_no_rule_reads_its_own_output_or_alerts(bundle: Path) -> None:
    for file in ("vllm-recording.rules.yml", "vllm-alerts.rules.yml"):
        for group in _groups(bundle, file):
            for rule in group["rules"]:
                expr = rule["expr"]
                assert "ALERTS" not in expr, (rule.get("alert") or rule["record"], expr)
                if "record" in rule:
                    assert not re.search(rf"(?<![\w:]){re.escape(rule['record'])}(?![\w:])", expr), rule[
                        "record"
                    ]


def test_every_paging_expression_fits_in_eight_lines(bundle: Path) -> None:
    paging = [
        r
        for g in _groups(bundle, "vllm-alerts.rules.yml")
        for r in g["rules"]
        if r["labels"]["severity"] == "critical"
    ]
    assert paging
    for rule in paging:
        lines = rule["expr"].strip().splitlines()
        assert len(lines) <= MAX_PAGING_LINES, (rule["alert"], rule["labels"], len(lines))


def test_at_most_ten_recording_rules_per_slo(bundle: Path) -> None:
    slo_groups = [
        g for g in _groups(bundle, "vllm-recording.rules.yml") if g["name"].startswith("vllm-obs.slo-")
    ]
    per_slo = {g["name"]: len(g["rules"]) for g in slo_groups if g["name"] != "vllm-obs.slo-history"}
    assert set(per_slo) == {"vllm-obs.slo-availability", "vllm-obs.slo-ttft", "vllm-obs.slo-itl"}
    assert max(per_slo.values()) <= MAX_RECORDINGS_PER_SLO, per_slo


def test_every_paging_runbook_opens_with_the_first_five_minutes_and_why(bundle: Path) -> None:
    text = (bundle / "alerts" / "runbooks.md").read_text()
    paging = {
        r["alert"]
        for g in _groups(bundle, "vllm-alerts.rules.yml")
        for r in g["rules"]
        if r["labels"]["severity"] == "critical"
    }
    for name in paging:
        section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0].strip()
        assert section.startswith("**The first five minutes.**"), name
        assert "**Why did this fire.**" in section.split("**Meaning.**")[0], name


def test_a_model_class_pages_on_its_own_budget_and_threshold(configured: Path) -> None:
    """slo.models: the 70B class's TTFT tiers compare with 14.4 x 5% and read its 10 s bucket; the
    default class with 14.4 x 1%, for the other models only; the embeddings class has no TTFT."""
    rules = [r for g in _groups(configured, "vllm-alerts.rules.yml") for r in g["rules"]]
    fast = [
        r["expr"].splitlines()[0]
        for r in rules
        if r["alert"] == "VllmTimeToFirstTokenBudgetBurn" and r["labels"]["long"] == "1h"
    ]
    assert fast == [
        'job_model:vllm_time_to_first_token_seconds:slo_miss_ratio_1h{model_name=~"llama-70b.*"} > (14.4 * 0.05)',
        'job_model:vllm_time_to_first_token_seconds:slo_miss_ratio_1h{model_name!~"llama-70b.*", namespace!~"embeddings"} > (14.4 * 0.01)',
    ]
    availability = [
        r["expr"].splitlines()[0]
        for r in rules
        if r["alert"] == "VllmAvailabilityBudgetBurn" and r["labels"]["long"] == "1h"
    ]
    assert len(availability) == 3 and "(14.4 * 0.01)" in availability[1]
    recorded = {
        r["record"]: r["expr"] for g in _groups(configured, "vllm-recording.rules.yml") for r in g["rules"]
    }
    bad = recorded["job_model:vllm_time_to_first_token_seconds:slo_bad_rate5m"]
    assert 'le=~"10|10\\\\.0"' in bad and 'le="2.5"' in bad and "embeddings" in bad
