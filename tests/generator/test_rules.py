"""Alert and recording rules, checked by the real promtool: every alert has a generated case where it
fires (full labels and annotations), one where it stays silent, and a check of its `for` boundary,
generated with the rules from the same config for both engine families."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from vllm_obs.catalog import Catalog
from vllm_obs.releases import parse_release

from tests.support.bundles import (
    ANOTHER_RELEASE,
    BURN_FAST_TIERS_MINUTES,
    BURN_TEST_FILES,
    dashboard_exprs,
    distinct_catalog_sources,
    generate,
    recorded_names,
    rule_exprs,
    rule_test_files,
    selected_names,
)
from tests.support.monitoring import binary
from tests.support.rule_slices import RuleFiles, promtool_each_file_on_its_slice
from tests.support.tiers import tiered

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).parent.parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "metrics"
CATALOG = Catalog.load()
CARD_ALERTS = (
    "VllmHighTimeToFirstToken",
    "VllmHighTimePerOutputToken",
    "VllmQueueDepthHigh",
    "VllmKVCachePressure",
)

# One release per naming era of each engine family.
ERAS = [
    ("0.6.0", "v0"),  # V0 with the throughput gauges and swapped requests
    ("0.8.3", "v0"),  # V0 with the legacy series hidden
    ("0.10.2", "v0"),  # last V0
    ("0.7.1", "v1"),  # first V1: no preemptions, no latency breakdown
    ("0.8.2", "v1"),  # V1 without the engine label
    ("0.9.1", "v1"),  # gpu_cache_usage_perc and time_per_output_token with engine label
    ("0.11.0", "v1"),  # gpu_* hidden, both ITL names
    ("0.13.0", "v1"),  # finished_reason="error"
]
ERAS_IN_MAKE_TEST = ERAS[:1]  # the oldest


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([binary("promtool"), *args], cwd=cwd, capture_output=True, text=True)


def check_and_test(
    bundle: Path, *, whole: bool = False, skip: tuple[str, ...] = (), longest: float | None = None
) -> None:
    """promtool checks every rule file and the configuration and runs every generated test on its rule
    slice, or with whole=True on the files as a user has them (all but the burn scenarios). `skip`
    names test files the sliced run leaves out, `longest` the minute after which it drops cases."""
    rules = sorted(str(p.relative_to(bundle)) for p in (bundle / "alerts").glob("*.rules.yml"))
    checked = promtool("check", "rules", *rules, cwd=bundle)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = promtool("check", "config", "prometheus/prometheus.yml", cwd=bundle)
    assert config.returncode == 0, config.stdout + config.stderr
    tests = sorted(str(p.relative_to(bundle)) for p in (bundle / "tests" / "rules").glob("*.test.yml"))
    assert tests
    if whole:
        tests = rule_test_files(bundle, burn_rates=False)
        tested = promtool("test", "rules", *tests, cwd=bundle)
        assert tested.returncode == 0, tested.stdout[-4000:] + tested.stderr
    else:
        failures = promtool_each_file_on_its_slice(bundle, skip=skip, longest=longest)
        assert not failures, "\n".join(failures)


@pytest.mark.matrix
def test_the_committed_bundle_passes_promtool_as_a_user_runs_it():
    """Every file as a user runs it, but the burn scenarios (two minutes of promtool on their
    own), which the sliced run below takes, as it does for every other bundle."""
    check_and_test(REPO, whole=True)


def test_the_committed_bundle_passes_promtool_on_slices():
    check_and_test(REPO)


def test_a_slice_still_catches_a_broken_burn_rule(tmp_path):
    """The fastest burn tier's factor moved past its boundary cases fails the sliced run too."""
    bundle = tmp_path / "bundle"
    shutil.copytree(REPO / "alerts", bundle / "alerts")
    shutil.copytree(REPO / "tests" / "rules", bundle / "tests" / "rules")
    path = bundle / "alerts" / "vllm-alerts.rules.yml"
    text = path.read_text()
    assert text.count("> (14.4 * ") >= 2
    path.write_text(text.replace("> (14.4 * ", "> (20 * "))
    # The burn scenarios' own file (the other files read no burn alert), but for the cases of the
    # 1d and 3d tiers: the factor changed is the 1h/5m tier's.
    failures = promtool_each_file_on_its_slice(
        bundle, only=("slo-burn.test.yml",), longest=BURN_FAST_TIERS_MINUTES
    )
    assert [f.split(":\n", 1)[0] for f in failures] == [
        f"slo-burn.test.yml ({alert})"
        for alert in (
            "VllmAvailabilityBudgetBurn",
            "VllmTimeToFirstTokenBudgetBurn",
            "VllmTimePerOutputTokenBudgetBurn",
        )
    ]
    assert all("just above the 1h/5m tier's 14.4x" in f for f in failures)


def test_a_slice_holds_the_recordings_its_alert_reads():
    """Time to first token counts availability's failures as misses: its slice evaluates
    availability's recordings, and no other alert (no burn tier reads another's state)."""
    rules = RuleFiles(REPO)
    ttft = rules.slice({"VllmTimeToFirstTokenBudgetBurn"})
    assert ttft is not None and ttft.alerts == {"VllmTimeToFirstTokenBudgetBurn"}
    assert {"vllm-obs.slo-availability", "vllm-obs.slo-ttft", "vllm-obs.slo-history"} <= ttft.groups


# The era whose engine counts no failed request, with the canary off: nothing counts one.
NO_FAILURE_COUNT = ("0.7.1", "v1")
CANARY_OFF = {"prometheus": {"probes": []}}


# `make test` runs the oldest era's generated tests; the full matrix runs every era's.
@pytest.mark.parametrize("release, engine", tiered(ERAS, ERAS_IN_MAKE_TEST, unpack=True), ids=str)
def test_every_engine_family_and_naming_era(release, engine, tmp_path):
    # The era that counts no failure runs with the canary off: its bundle's own tests pass
    # without an availability alert (the test below), one bundle for the two.
    config = CANARY_OFF if (release, engine) == NO_FAILURE_COUNT else None
    check_and_test(
        generate(tmp_path / "bundle", "--vllm-version", release, "--engine", engine, config=config),
        **ANOTHER_RELEASE,
    )


def test_a_source_that_counts_no_failure_has_no_availability_page_without_a_canary(tmp_path, capsys):
    """vLLM 0.7.1's V1 engine counts no failed request, and with the canary off nothing does:
    an availability alert would read no miss whatever happened, and fail its own cases. It is
    left out and the generator says so; with the canary on it is there."""
    release, engine = NO_FAILURE_COUNT
    off = generate(tmp_path / "off", "--vllm-version", release, "--engine", engine, config=CANARY_OFF)
    assert "skipped VllmAvailabilityBudgetBurn" in capsys.readouterr().err
    assert "VllmAvailabilityBudgetBurn" not in (off / "alerts" / "vllm-alerts.rules.yml").read_text()
    on = generate(tmp_path / "on", "--vllm-version", release, "--engine", engine)
    assert "skipped VllmAvailabilityBudgetBurn" not in capsys.readouterr().err
    assert "alert: VllmAvailabilityBudgetBurn" in (on / "alerts" / "vllm-alerts.rules.yml").read_text()


EXPOSITIONS = [
    "reference/vllm-0.34.0-v1.prom",
    "vllm-0.32.0-cpu-traffic.prom",
    "reference/vllm-0.9.0-v0.prom",
    "reference/vllm-0.20.0-v1.prom",
]
EXPOSITIONS_IN_MAKE_TEST = EXPOSITIONS[:1]  # the newest release


@pytest.mark.parametrize("fixture", tiered(EXPOSITIONS, EXPOSITIONS_IN_MAKE_TEST))
def test_bundles_from_expositions(fixture, tmp_path):
    check_and_test(
        generate(tmp_path / "bundle", "--metrics-file", str(FIXTURES / fixture)), **ANOTHER_RELEASE
    )


CUSTOM = {
    "prometheus": {"vllm_job": "inference", "extra_selector": 'namespace="llm"'},
    "alerts": {
        "ttft_p95_warning_seconds": 0.5,
        "ttft_for": "7m",
        "itl_p95_warning_seconds": 0.1,
        "queue_waiting_threshold": 3,
        "kv_usage_threshold": 0.8,
        "kv_usage_for": "4m",
        "kv_predict_floor": 0.6,
        "preemptions_per_request": 0.2,
        "error_ratio_warning": 0.01,
        "stall_window": "10m",
        "min_requests": 50,
    },
    "slo": {
        "ttft_threshold_seconds": 1.0,
        "ttft_objective": 0.995,
        "itl_threshold_seconds": 0.1,
        "itl_objective": 0.95,
    },
}


SHARE_OFF = {"paging": {"capacity_fraction": 0}}


def test_a_capacity_fraction_of_0_turns_the_share_off_and_keeps_the_mixin(tmp_path):
    """0 is documented as off: the clause stays (never true), so the mixin's knob keeps its meaning."""
    bundle = generate(tmp_path / "bundle", config=SHARE_OFF)
    assert (
        "job_model:vllm_replicas_ready:count < 0 * job_model:vllm_replicas_expected:count"
        in (bundle / "alerts" / "vllm-alerts.rules.yml").read_text()
    )
    assert "capacityFraction: 0," in (bundle / "mixin" / "config.libsonnet").read_text()
    check_and_test(bundle, **ANOTHER_RELEASE)


@pytest.mark.matrix
def test_a_user_who_changes_thresholds_gets_tests_that_pin_the_new_ones(tmp_path):
    bundle = generate(tmp_path / "bundle", config=CUSTOM)
    check_and_test(bundle)
    text = (bundle / "alerts" / "vllm-alerts.rules.yml").read_text()
    assert "p95_5m > 0.5" in text and "vllm_requests_waiting:sum > 3" in text
    assert 'job="inference", namespace="llm"' in (bundle / "alerts" / "vllm-recording.rules.yml").read_text()


@pytest.mark.parametrize(
    "before, after",
    [
        ("p95_5m > 2.5\n", "p95_5m > 5\n"),  # TTFT warning threshold moved up a bucket
        ("vllm_requests_waiting:sum > 20", "vllm_requests_waiting:sum > 21"),  # queue threshold
        (
            '(vllm:kv_cache_usage_perc{job="vllm"}) > 0.9',
            '(vllm:kv_cache_usage_perc{job="vllm"}) >= 0.9',
        ),  # silent sits on it
        # The KV pressure `for` boundary (the end of its expression, then its `for`).
        ("rate5m > 0\n      )\n    for: 5m\n", "rate5m > 0\n      )\n    for: 6m\n"),
        # A first start must not warn: drop that branch of VllmTargetDown's planned starts.
        ('event="startup_complete"}) == 0\n', 'event="startup_complete"}) == -1\n'),
        # A start after an engine death is not planned: drop the death's part of the rule.
        ('event=~"engine_dead|oom|startup_failed"}) < on', 'event=~"oom|startup_failed"}) < on'),
        # Nor one after a failed start: drop the failed start's part.
        ('event=~"engine_dead|oom|startup_failed"}) < on', 'event=~"engine_dead|oom"}) < on'),
        ("> 600\n", "> 660\n"),  # VllmStartupSlow's expected start-up time
        (") >= 3\n", ") >= 4\n"),  # VllmRestartLoop's number of starts
        ('version!~"0\\\\.34(\\\\..*)?"', 'version!~"0\\\\.3.*"'),  # VllmVersionDrift's release
    ],
)
def test_the_generated_tests_fail_when_a_rule_drifts(before, after, tmp_path):
    """Tests that cannot fail prove nothing: edit a rule behind the tests' back."""
    bundle = generate(tmp_path / "bundle")
    path = bundle / "alerts" / "vllm-alerts.rules.yml"
    text = path.read_text()
    assert before in text
    path.write_text(text.replace(before, after, 1))
    # None of these rules is an SLO's: the burn scenarios cannot notice them.
    failures = promtool_each_file_on_its_slice(bundle, skip=BURN_TEST_FILES, first_failure=True)
    assert failures, f"promtool still passes after {before!r} -> {after!r}"


def test_every_alert_fires_stays_silent_and_has_its_for_boundary_checked():
    rules = yaml.safe_load((REPO / "alerts" / "vllm-alerts.rules.yml").read_text())
    alerts = {}
    for group in rules["groups"]:
        for rule in group["rules"]:
            alerts.setdefault(rule["alert"], []).append(rule)
    checks: dict[str, list[tuple[str, list]]] = {}
    for path in (REPO / "tests" / "rules").glob("*.test.yml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for check in test["alert_rule_test"]:
                checks.setdefault(check["alertname"], []).append((test["name"], check))
    for name, variants in alerts.items():
        assert name in checks, f"{name} has no promtool test"
        fired = [c for _, c in checks[name] if c["exp_alerts"]]
        silent = [c for _, c in checks[name] if not c["exp_alerts"]]
        if name == "WatchdogVllmObs":  # the dead man's switch must never be silent
            assert fired and not silent
            continue
        assert fired and silent, name
        for severity in {r["labels"]["severity"] for r in variants}:
            assert any(a["exp_labels"]["severity"] == severity for c in fired for a in c["exp_alerts"]), (
                f"{name} {severity} never fires in a test"
            )
        for alert in fired[0]["exp_alerts"]:
            # links.* unset by default: no link a responder could not open.
            assert set(alert["exp_annotations"]) == {"summary", "description"}
        durations = {r.get("for") for r in variants} - {None}
        if durations:
            # The boundary: a test that expects nothing one minute before it expects the alert.
            pairs = {}
            for test_name, check in checks[name]:
                pairs.setdefault(test_name, []).append(check)
            assert any(
                any(
                    not c["exp_alerts"] and _minutes(c) + 1 == _minutes(d) and d["exp_alerts"]
                    for c in cs
                    for d in cs
                )
                for cs in pairs.values()
            ), f"{name}: no for-boundary check"


def _minutes(check: dict) -> int:
    return int(re.fullmatch(r"(\d+)m", check["eval_time"]).group(1))


@pytest.mark.parametrize("release, engine", distinct_catalog_sources(CATALOG))
def test_the_four_signals_of_the_card_are_alerted_under_the_release_s_own_names(release, engine, tmp_path):
    """Each release and engine whose families differ from every earlier one's."""
    version = parse_release(release)
    bundle = generate(tmp_path / engine, "--vllm-version", release, "--engine", engine)
    alerts = (bundle / "alerts" / "vllm-alerts.rules.yml").read_text()
    for name in CARD_ALERTS:
        assert f"alert: {name}" in alerts, (release, engine, name)
    recording = (bundle / "alerts" / "vllm-recording.rules.yml").read_text()
    exposed = CATALOG.families(version, engine)
    kv = (
        "vllm:kv_cache_usage_perc"
        if "vllm:kv_cache_usage_perc" in exposed
        else "vllm:gpu_cache_usage_perc"
    )
    itl = (
        "vllm:inter_token_latency_seconds"
        if "vllm:inter_token_latency_seconds" in exposed
        else "vllm:time_per_output_token_seconds"
    )
    assert f"max by (job, instance, model_name) ({kv}{{" in recording
    assert f"rate({itl}_bucket{{" in recording
    assert "rate(vllm:time_to_first_token_seconds_bucket{" in recording
    assert "(vllm:num_requests_waiting{" in recording


def _queue_checks(bundle: Path) -> tuple[str, list[dict]]:
    rules = yaml.safe_load((bundle / "alerts" / "vllm-alerts.rules.yml").read_text())
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "VllmQueueDepthHigh"]
    tests = yaml.safe_load((bundle / "tests" / "rules" / "saturation.test.yml").read_text())["tests"]
    fire = next(t for t in tests if t["name"].startswith("VllmQueueDepthHigh fires"))
    return rule["for"], fire["alert_rule_test"]


@pytest.mark.parametrize("setting, expected", [(None, "5m"), ("2m", "2m")])
def test_the_queue_alert_outlasts_a_normal_peak_and_its_tests_follow(setting, expected, tmp_path):
    """A normal peak's queue drains within minutes: the default `for` is 5m (docs/alerts.md), and a
    shorter setting is pinned by its own cases too."""
    config = {"alerts": {"queue_for": setting}} if setting else None
    bundle = generate(tmp_path / "bundle", config=config)
    for_, checks = _queue_checks(bundle)
    assert for_ == expected
    minute = int(expected[:-1])
    assert [(c["eval_time"], bool(c["exp_alerts"])) for c in checks] == [
        (f"{minute - 1}m", False),
        (f"{minute}m", True),
    ]
    # queue_for changes only VllmQueueDepthHigh: its own file (the committed bundle runs them all).
    failures = promtool_each_file_on_its_slice(bundle, only=("saturation.test.yml",))
    assert not failures, "\n".join(failures)


def test_with_max_num_seqs_the_queue_counts_against_the_slots(tmp_path):
    """20 waiting is a long queue before 8 slots and a short one before 256: with
    alerts.max_num_seqs set, the bound is alerts.queue_waiting_per_slot per slot, and the
    generated tests pin that bound on both sides."""
    config = {"alerts": {"max_num_seqs": 64, "queue_waiting_per_slot": 0.25}}
    bundle = generate(tmp_path / "bundle", config=config)
    rules = yaml.safe_load((bundle / "alerts" / "vllm-alerts.rules.yml").read_text())
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "VllmQueueDepthHigh"]
    assert rule["expr"] == "job_instance_model:vllm_requests_waiting:sum > 16"
    assert "(threshold 16: 0.25 per slot of --max-num-seqs 64," in rule["annotations"]["description"]
    tests = yaml.safe_load((bundle / "tests" / "rules" / "saturation.test.yml").read_text())["tests"]
    names = [t["name"] for t in tests if t["name"].startswith("VllmQueueDepthHigh")]
    assert names == [
        "VllmQueueDepthHigh fires after 5m with 17 waiting",
        "VllmQueueDepthHigh stays silent at exactly 16 waiting",
        "VllmQueueDepthHigh stays silent through a peak that drains within 5m",
    ]
    failures = promtool_each_file_on_its_slice(bundle, only=("saturation.test.yml",))
    assert not failures, "\n".join(failures)


def test_the_canary_probe_s_requests_are_not_served_traffic(tmp_path):
    """Counting the probe's answered requests as traffic fails the generated tests."""
    bundle = generate(tmp_path / "bundle")
    path = bundle / "alerts" / "vllm-recording.rules.yml"
    text = path.read_text()
    subtraction = "- on (instance, model_name) group_left ()\n        instance_model:vllm_probe_requests_answered:rate5m"
    assert subtraction in text
    path.write_text(
        text.replace(
            subtraction,
            "- on (instance, model_name) group_left ()\n        (instance_model:vllm_probe_requests_answered:rate5m * 0)",
        )
    )
    # The case lives with the latency alerts it keeps quiet.
    failures = "\n".join(promtool_each_file_on_its_slice(bundle, only=("latency.test.yml",)))
    assert "stays silent when the only traffic is the canary probe" in failures


@pytest.mark.parametrize("release, engine", [("0.33.0", "v1"), ("0.10.2", "v0"), ("0.8.2", "v1")])
def test_every_recorded_histogram_statistic_has_a_reader(release, engine, tmp_path):
    """A per-replica quantile or mean reads every engine's raw series on every evaluation: the
    bulk of a fleet's rule work. The bundle records one only if an alert, another rule or a
    panel reads it."""
    bundle = generate(tmp_path / "bundle", "--vllm-version", release, "--engine", engine)
    statistics = {name for name in recorded_names(bundle) if re.search(r":(p\d\d|mean)_\w+$", name)}
    assert (
        "job_instance_model:vllm_time_to_first_token_seconds:p95_5m" in statistics and len(statistics) >= 15
    )
    exprs = [*rule_exprs(bundle).values(), *dashboard_exprs(bundle).values()]
    read = set().union(*(selected_names(expr) for expr in exprs))
    assert sorted(statistics - read) == []
