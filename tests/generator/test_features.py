"""Engine features: their alerts exist exactly when the source exposes the feature, and their
generated promtool cases fire, stay silent and pin the thresholds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.generator.test_bad_input import run_failing
from tests.generator.test_rules import check_and_test
from tests.support.bundles import ANOTHER_RELEASE, BURN_TEST_FILES, generate
from tests.support.rule_slices import promtool_each_file_on_its_slice
from tests.support.tiers import tiered

pytestmark = pytest.mark.prometheus

METRICS = Path(__file__).parent.parent / "fixtures" / "metrics"
FEATURE_ALERTS = {
    "VllmSpecDecodeAcceptanceLow",
    "VllmKVTransferFailures",
    "VllmEngineImbalance",
    "VllmRequestsRejected",
}


def alert_names(bundle: Path) -> set[str]:
    groups = yaml.safe_load((bundle / "alerts" / "vllm-alerts.rules.yml").read_text())["groups"]
    return {r["alert"] for g in groups for r in g["rules"]}


def test_the_real_spec_decode_capture_gets_the_acceptance_alert(tmp_path):
    """n-gram drafts of the random tiny model are never accepted: the alert's textbook case."""
    bundle = generate(tmp_path / "b", "--metrics-file", str(METRICS / "vllm-0.32.0-cpu-spec-decode.prom"))
    assert "VllmSpecDecodeAcceptanceLow" in alert_names(bundle)
    recording = (bundle / "alerts" / "vllm-recording.rules.yml").read_text()
    assert "job_instance_model:vllm_spec_decode_accepted_length:mean_5m" in recording
    plain = generate(tmp_path / "p", "--metrics-file", str(METRICS / "vllm-0.32.0-cpu-traffic.prom"))
    assert "VllmSpecDecodeAcceptanceLow" not in alert_names(plain)


@pytest.mark.matrix
def test_the_real_data_parallel_capture_names_the_engine(tmp_path):
    bundle = generate(tmp_path / "b", "--metrics-file", str(METRICS / "vllm-0.32.0-cpu-data-parallel.prom"))
    rules = yaml.safe_load((bundle / "alerts" / "vllm-alerts.rules.yml").read_text())
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert "engine {{ $labels.engine }}" in by_name["VllmKVCachePressure"]["annotations"]["description"]
    assert "VllmEngineImbalance" in by_name
    check_and_test(bundle, **ANOTHER_RELEASE)


# Their generated suites run in the full matrix; `make test` loads them (test_variants.py) and
# runs the feature cases' drift tests below.
FEATURE_BUNDLES = [
    ("--vllm-version", "0.33.0", "--feature", "spec_decode", "--feature", "nixl", "--feature", "kv_offload"),
    ("--vllm-version", "0.33.0", "--feature", "lora"),
    ("--vllm-version", "0.8.3", "--engine", "v0", "--feature", "spec_decode"),  # V0's gauge
    ("--vllm-version", "0.26.0", "--feature", "kv_offload"),  # allocation failures from 0.26
]


@pytest.mark.parametrize(
    "args",
    tiered(FEATURE_BUNDLES, ()),
    ids=lambda a: " ".join(a),
)
def test_feature_bundles_pass_their_promtool_tests(args, tmp_path):
    bundle = generate(tmp_path / "b", *args)
    names = alert_names(bundle)
    if "spec_decode" in args:
        assert "VllmSpecDecodeAcceptanceLow" in names
    if "nixl" in args or "kv_offload" in args:
        assert "VllmKVTransferFailures" in names
    check_and_test(bundle, **ANOTHER_RELEASE)


def test_features_off_leave_no_feature_alert_but_admission_and_engines(tmp_path):
    """0.33 with default flags: admission control and the engine label exist, the rest does not."""
    names = alert_names(generate(tmp_path / "b"))
    assert names & FEATURE_ALERTS == {"VllmRequestsRejected", "VllmEngineImbalance"}
    old = alert_names(generate(tmp_path / "old", "--vllm-version", "0.8.2"))
    assert not old & FEATURE_ALERTS  # no admission control, no engine label before 0.8.3


@pytest.mark.parametrize(
    "before, after",
    [("< 0.2\n", "< 0.3\n"), ("engine_spread > 0.5\n", "engine_spread > 0.7\n")],
)
def test_the_feature_cases_fail_when_a_threshold_drifts(before, after, tmp_path):
    bundle = generate(tmp_path / "b", "--feature", "spec_decode")
    path = bundle / "alerts" / "vllm-alerts.rules.yml"
    text = path.read_text()
    assert before in text
    path.write_text(text.replace(before, after, 1))
    assert promtool_each_file_on_its_slice(bundle, skip=BURN_TEST_FILES, first_failure=True)


def test_feature_flags_are_checked(capsys, tmp_path):
    existing = tmp_path / "existing"
    existing.mkdir()
    line = run_failing(capsys, existing, "--feature", "warp_drive")
    assert "warp_drive" in line and "spec_decode" in line
    saved = METRICS / "vllm-0.32.0-cpu-traffic.prom"
    line = run_failing(capsys, existing, "--metrics-file", str(saved), "--feature", "lora")
    assert "only applies to the embedded catalog" in line
