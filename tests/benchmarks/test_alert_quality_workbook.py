"""The `workbook` rule set: the bundle's burn pages as the SRE workbook's four tiers, the capacity
page held 2m, no keep_firing_for, the rest as generated. The rewrite keys on alert names, tier
labels and recorded names; its rules load and fire in promtool as the workbook says."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from vllm_obs.config import BundleConfig, build
from vllm_obs.errors import BundleError

from benchmarks.alert_quality import workbook

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "alerts" / "vllm-alerts.rules.yml"
RECORDING = REPO / "alerts" / "vllm-recording.rules.yml"
DEFAULTS = build(BundleConfig, {}, "", "the defaults")


def committed() -> dict:
    return yaml.safe_load(ALERTS.read_text())


def recorded() -> set[str]:
    return workbook.recorded_names([RECORDING, ALERTS])


def rules_of(data: dict) -> list[dict]:
    return [r for g in data["groups"] for r in g["rules"]]


def test_every_burn_alert_becomes_the_four_plain_tiers_with_the_mixins_holds():
    out = workbook.rewrite(committed(), recorded(), DEFAULTS)
    for name in workbook.BURN_ALERTS.values():
        tiers = {
            (r["labels"]["long"], r["labels"]["short"]): (r["for"], r["labels"]["severity"])
            for r in rules_of(out)
            if r.get("alert") == name
        }
        assert tiers == {
            ("1h", "5m"): ("2m", "critical"),
            ("6h", "30m"): ("15m", "critical"),
            ("1d", "2h"): ("1h", "warning"),
            ("3d", "6h"): ("3h", "warning"),
        }, name
    fast = next(
        r
        for r in rules_of(out)
        if r.get("alert") == "VllmAvailabilityBudgetBurn" and r["labels"]["long"] == "1h"
    )
    # 99.9% availability by default: B = 0.001.
    assert fast["expr"] == (
        "job_model:vllm_request_availability:slo_miss_ratio_1h > (14.4 * 0.001)\n"
        "and on (job, model_name)\n"
        "job_model:vllm_request_availability:slo_miss_ratio_5m > (14.4 * 0.001)"
    )
    slow_ttft = next(
        r
        for r in rules_of(out)
        if r.get("alert") == "VllmTimeToFirstTokenBudgetBurn" and r["labels"]["long"] == "3d"
    )
    assert slow_ttft["expr"].startswith(
        "job_model:vllm_time_to_first_token_seconds:slo_miss_ratio_3d > (1 * 0.01)"
    )


def test_the_capacity_page_holds_2m_nothing_keeps_firing_and_every_other_alert_is_as_generated():
    before, out = committed(), workbook.rewrite(committed(), recorded(), DEFAULTS)
    assert any("keep_firing_for" in r for r in rules_of(before))
    assert not any("keep_firing_for" in r for r in rules_of(out))
    for old, new in zip(rules_of(before), rules_of(out), strict=True):
        if new.get("alert") == "VllmModelCapacityLow":
            assert new["for"] == "2m" and new["expr"] == old["expr"]
        elif new.get("alert") not in workbook.BURN_ALERTS.values():
            old.pop("keep_firing_for", None)
            assert new == old


def test_the_rewrite_keys_on_names_and_tier_labels_not_on_expression_text():
    changed = committed()
    for rule in rules_of(changed):
        if rule.get("alert") in workbook.BURN_ALERTS.values():
            rule["expr"] = "vector(1)"  # a rewrite of the rules on main: the workbook does not care
            rule["for"] = "7m"
    assert workbook.rewrite(changed, recorded(), DEFAULTS) == workbook.rewrite(
        committed(), recorded(), DEFAULTS
    )


def test_the_fleet_labels_and_the_budget_come_from_the_runs_configuration():
    cfg = build(
        BundleConfig,
        {"prometheus": {"multi_cluster": True}, "slo": {"availability_objective": 0.995}},
        "",
        "test",
    )
    out = workbook.rewrite(committed(), recorded(), cfg)
    fast = next(
        r
        for r in rules_of(out)
        if r.get("alert") == "VllmAvailabilityBudgetBurn" and r["labels"]["long"] == "1h"
    )
    assert "> (14.4 * 0.005)" in fast["expr"]
    assert f"and on ({cfg.prometheus.cluster_label}, job, model_name)" in fast["expr"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda rules: rules[0]["labels"].update(long="2h"), "a tier long=2h short=5m"),
        (lambda rules: rules.pop(3), "lacks the workbook tier(s) 3d/6h"),
    ],
)
def test_a_bundle_the_workbook_cannot_read_is_refused_by_name(change, says):
    data = committed()
    group = next(
        g for g in data["groups"] if any(r.get("alert") == "VllmAvailabilityBudgetBurn" for r in g["rules"])
    )
    burn = [r for r in group["rules"] if r.get("alert") == "VllmAvailabilityBudgetBurn"]
    change(burn)
    group["rules"] = [r for r in group["rules"] if r.get("alert") != "VllmAvailabilityBudgetBurn"] + burn
    with pytest.raises(BundleError, match=says.replace("(", r"\(").replace(")", r"\)")):
        workbook.rewrite(data, recorded(), DEFAULTS)


def test_a_tier_whose_recorded_ratio_is_missing_is_refused():
    names = recorded() - {"job_model:vllm_time_to_first_token_seconds:slo_miss_ratio_30m"}
    with pytest.raises(
        BundleError, match="records no job_model:vllm_time_to_first_token_seconds:slo_miss_ratio_30m"
    ):
        workbook.rewrite(committed(), names, DEFAULTS)


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed; run `make system-deps`")
    return path


@pytest.mark.prometheus
def test_the_workbook_bundle_loads_and_its_fast_tier_fires_after_two_minutes(tmp_path):
    """Real promtool: the rewritten file loads beside the recording rules, and the 1h/5m tier
    fires once both windows burn past 14.4x for 2 minutes, the 6h/30m tier not (its long window
    does not burn)."""
    bundle = tmp_path / "bundle"
    (bundle / "alerts").mkdir(parents=True)
    for path in (ALERTS, RECORDING):
        shutil.copy(path, bundle / "alerts" / path.name)
    workbook.apply(bundle, DEFAULTS)
    rules = bundle / "alerts" / ALERTS.name
    checked = subprocess.run(
        [_promtool(), "check", "rules", str(rules), str(bundle / "alerts" / RECORDING.name)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    labels = '{job="vllm", model_name="chat"}'
    ratio = "job_model:vllm_request_availability:slo_miss_ratio_"
    alert = {"alertname": "VllmAvailabilityBudgetBurn", "job": "vllm", "model_name": "chat"}
    fast = {**alert, "long": "1h", "short": "5m", "severity": "critical"}
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    {"series": f"{ratio}1h{labels}", "values": "0.02x40"},
                    {"series": f"{ratio}5m{labels}", "values": "0.02x40"},
                    {"series": f"{ratio}6h{labels}", "values": "0.001x40"},
                    {"series": f"{ratio}30m{labels}", "values": "0.02x40"},
                ],
                "alert_rule_test": [
                    {"eval_time": "1m45s", "alertname": "VllmAvailabilityBudgetBurn", "exp_alerts": []},
                    {
                        "eval_time": "2m15s",
                        "alertname": "VllmAvailabilityBudgetBurn",
                        "exp_alerts": [{"exp_labels": fast, "exp_annotations": _annotations(rules, "1h")}],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "workbook.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _annotations(rules: Path, long: str) -> dict:
    """The tier's annotations with its value filled in as Prometheus renders them."""
    rule = next(
        r
        for r in rules_of(yaml.safe_load(rules.read_text()))
        if r.get("alert") == "VllmAvailabilityBudgetBurn" and r["labels"]["long"] == long
    )
    text = copy.deepcopy(rule["annotations"])
    for key, value in text.items():
        text[key] = (
            value.replace("{{ $labels.model_name }}", "chat")
            .replace("{{ $labels.job }}", "vllm")
            .replace("{{ $value | humanizePercentage }}", "2%")
            .replace("{{ if $labels.instance }}&var-instance={{ $labels.instance | urlquery }}{{ end }}", "")
            .replace(
                "{{ if $labels.model_name }}&var-model_name={{ $labels.model_name | urlquery }}{{ end }}",
                "&var-model_name=chat",
            )
        )
    return text
