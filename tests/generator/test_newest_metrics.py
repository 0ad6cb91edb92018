"""vLLM's newest series are in the catalog with their release and read by the alerts: a sleeping
engine is neither hung nor stalled, one fault tolerance reports unhealthy is out of capacity, and
deferred requests with none running are a stall. engine_healthy is added to the 0.32.0 capture."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_obs.catalog import Catalog
from vllm_obs.releases import parse_release

from tests.generator.test_rules import check_and_test
from tests.support.bundles import ANOTHER_RELEASE, generate, rule_exprs
from tests.support.rule_slices import promtool_each_file_on_its_slice

METRICS = Path(__file__).parent.parent / "fixtures" / "metrics"
TRAFFIC = METRICS / "vllm-0.32.0-cpu-traffic.prom"
V0 = METRICS / "reference" / "vllm-0.9.0-v0.prom"
CATALOG = Catalog.load()

HEALTHY = (
    "# HELP vllm:engine_healthy Whether the engine reports healthy under fault tolerance.\n"
    "# TYPE vllm:engine_healthy gauge\n"
    'vllm:engine_healthy{engine="0"} 1.0\n'
)


def names(version: str, *features: str) -> set[str]:
    return set(CATALOG.families(parse_release(version), "v1", features=features))


def test_the_connector_families_are_listed_from_the_release_that_brought_them() -> None:
    simple = {
        "vllm:simple_kv_offload_save_outcomes_total",
        "vllm:simple_kv_offload_load_blocks_total",
        "vllm:simple_kv_offload_used_blocks",
        "vllm:simple_kv_offload_pending_store_blocks",
        "vllm:simple_kv_offload_info",
    }
    assert simple <= names("0.31.0", "simple_kv_offload")
    assert not simple & names("0.30.0", "simple_kv_offload")
    assert not simple & names("0.33.0")  # only with the connector
    hisparse_counters = {"vllm:hisparse_cache_hits_total", "vllm:hisparse_host_to_device_bytes_total"}
    assert hisparse_counters <= names("0.30.0", "hisparse")
    assert "vllm:hisparse_host_cache_usage_perc" in names("0.32.0", "hisparse")
    assert "vllm:hisparse_host_cache_usage_perc" not in names("0.31.0", "hisparse")
    for name in (
        "vllm:num_requests_waiting_by_reason",
        "vllm:request_num_preemptions",
        "vllm:engine_sleep_state",
    ):
        assert name in names("0.33.0"), name


def test_a_series_in_no_release_yet_says_where_it_was_read_and_no_catalog_bundle_expects_it() -> None:
    unreleased = {n: m for n, m in CATALOG.metrics.items() if m.unreleased}
    assert "vllm:engine_healthy" in unreleased
    for name, metric in unreleased.items():
        assert not metric.variants and "vllm" in metric.unreleased, name
        for release in CATALOG.releases:
            for engine in release.engines:
                assert name not in CATALOG.families(release.version, engine, include_conditional=True)


@pytest.fixture(scope="module")
def fault_tolerant(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("ft")
    exposition = directory / "fault-tolerant.prom"
    exposition.write_text(TRAFFIC.read_text() + HEALTHY)
    return generate(directory / "bundle", "--metrics-file", str(exposition))


@pytest.mark.prometheus
@pytest.mark.matrix
def test_an_unhealthy_engine_takes_its_replica_out_of_the_model_s_capacity(fault_tolerant) -> None:
    manifest = (fault_tolerant / ".vllm-obs-manifest.json").read_text()
    assert "a release newer than the catalog" in manifest
    (unready,) = [
        e for k, e in rule_exprs(fault_tolerant).items() if k.endswith(":vllm_replica_unready:cause")
    ]
    assert '"cause", "unhealthy"' in unready and "vllm:engine_healthy" in unready
    tests = (fault_tolerant / "tests" / "rules" / "capacity.test.yml").read_text()
    assert "engine reports unhealthy" in tests
    check_and_test(fault_tolerant, **ANOTHER_RELEASE)


def test_a_sleeping_engine_is_neither_hung_nor_stalled_where_the_source_shows_sleep(tmp_path) -> None:
    default = rule_exprs(generate(tmp_path / "default"))
    old = rule_exprs(generate(tmp_path / "v0", "--metrics-file", str(V0)))
    for alert in ("VllmEngineStalled", "VllmEngineHung"):
        (expr,) = [e for k, e in default.items() if k.endswith(f":{alert}")]
        assert 'vllm:engine_sleep_state{job="vllm", sleep_state="awake"}) == 0' in expr, alert
        (before,) = [e for k, e in old.items() if k.endswith(f":{alert}")]
        assert "sleep_state" not in before, alert


@pytest.mark.prometheus
def test_waiting_with_nothing_running_an_empty_cache_and_no_token_is_a_stall(tmp_path) -> None:
    """vllm-metal#479's signature (six requests waiting for capacity, none running, KV cache 0%,
    no token) fires VllmEngineStalled in the default bundle's promtool case; its runbook names
    that issue and vLLM's admission deadlock (#54348)."""
    bundle = generate(tmp_path / "default")
    tests = (bundle / "tests" / "rules" / "availability.test.yml").read_text()
    assert "VllmEngineStalled fires when requests wait for capacity with none running" in tests
    assert list(promtool_each_file_on_its_slice(bundle, only=("availability.test.yml",))) == []
    runbook = (bundle / "alerts" / "runbooks.md").read_text()
    stalled = runbook[runbook.index("## VllmEngineStalled") :]
    assert "vllm-metal#479" in stalled.split("\n## ")[0] and "#54348" in stalled.split("\n## ")[0]
