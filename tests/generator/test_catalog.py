"""The metric catalog is data; these tests check it against the facts it transcribes and
against real expositions of the vLLM CPU build."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_obs.catalog import Catalog
from vllm_obs.errors import BundleError
from vllm_obs.source import from_exposition

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"
CATALOG = Catalog.load()


def names(release: str, engine: str) -> set[str]:
    return set(CATALOG.families(tuple(int(p) for p in release.split(".")), engine))


def test_covers_every_release_from_0_6_to_0_34_with_both_engines():
    texts = [r.text for r in CATALOG.releases]
    assert texts[0] == "0.6.0" and texts[-1] == "0.34.0"
    assert {"0.9.0.1", "0.10.1.1", "0.15.0", "0.32.0"} <= set(texts)
    assert CATALOG.release("0.8.5")[0].engines == ("v1", "v0")  # V1 default, V0 fallback
    assert CATALOG.release("0.7.1")[0].engines == ("v0", "v1")  # V1 opt-in
    assert CATALOG.release("0.11.0")[0].engines == ("v1",)
    assert CATALOG.release("0.6.6")[0].engines == ("v0",)


@pytest.mark.parametrize(
    "release, engine, present, absent",
    [
        # kv_cache_usage_perc replaced gpu_cache_usage_perc: new in 0.9.2, old hidden in 0.11, gone in 0.12.
        ("0.9.1", "v1", {"vllm:gpu_cache_usage_perc"}, {"vllm:kv_cache_usage_perc"}),
        ("0.9.2", "v1", {"vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"}, set()),
        ("0.11.0", "v1", {"vllm:kv_cache_usage_perc"}, {"vllm:gpu_cache_usage_perc"}),
        ("0.12.0", "v1", {"vllm:kv_cache_usage_perc"}, {"vllm:gpu_cache_usage_perc"}),
        # inter_token_latency replaced time_per_output_token: both from 0.10.2, old hidden 0.12-0.14, gone 0.15.
        ("0.10.1", "v1", {"vllm:time_per_output_token_seconds"}, {"vllm:inter_token_latency_seconds"}),
        ("0.10.2", "v1", {"vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds"}, set()),
        ("0.13.0", "v1", {"vllm:inter_token_latency_seconds"}, {"vllm:time_per_output_token_seconds"}),
        ("0.15.0", "v1", {"vllm:inter_token_latency_seconds"}, {"vllm:time_per_output_token_seconds"}),
        # The V0-only series went in 0.9.1 (hidden from 0.8.3).
        ("0.8.2", "v0", {"vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc"}, set()),
        ("0.8.3", "v0", set(), {"vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc"}),
        ("0.9.1", "v0", {"vllm:gpu_cache_usage_perc"}, {"vllm:num_requests_swapped"}),
        # The V0 throughput gauges went in 0.7.0.
        ("0.6.6", "v0", {"vllm:avg_generation_throughput_toks_per_s"}, set()),
        ("0.7.0", "v0", set(), {"vllm:avg_generation_throughput_toks_per_s"}),
        # Preemptions on V1 from 0.8.0; the prefix-cache counters renamed in 0.9.2.
        ("0.7.3", "v1", {"vllm:gpu_prefix_cache_queries_total"}, {"vllm:num_preemptions_total"}),
        ("0.8.0", "v1", {"vllm:num_preemptions_total"}, set()),
        ("0.12.0", "v1", {"vllm:prefix_cache_hits_total"}, {"vllm:gpu_prefix_cache_hits_total"}),
    ],
)
def test_renames_and_removals(release, engine, present, absent):
    exposed = names(release, engine)
    assert present <= exposed
    assert not absent & exposed


def test_hidden_series_come_back_with_the_escape_hatch():
    hidden = set(CATALOG.families((0, 13, 0), "v1", include_hidden=True))
    assert "vllm:time_per_output_token_seconds" in hidden


def test_counters_always_carry_total_and_preemptions_never_lacked_it():
    for metric in CATALOG.metrics.values():
        if metric.type == "counter":
            assert metric.name.endswith("_total"), metric.name
    # Public alert sets query rate(vllm:num_preemptions[5m]): a series that never existed.
    assert "vllm:num_preemptions" not in CATALOG.metrics


def test_the_engine_label_arrives_in_0_8_3_on_v1_only():
    for release, engine, has in (("0.8.2", "v1", False), ("0.8.3", "v1", True), ("0.10.2", "v0", False)):
        ttft = CATALOG.families(tuple(map(int, release.split("."))), engine)[
            "vllm:time_to_first_token_seconds"
        ]
        assert ("engine" in ttft.labels) is has, (release, engine)


def test_bucket_bounds_grew_in_0_8_4():
    old = CATALOG.families((0, 8, 3), "v1")["vllm:time_to_first_token_seconds"].buckets
    new = CATALOG.families((0, 8, 4), "v1")["vllm:time_to_first_token_seconds"].buckets
    assert old[-1] == 10.0 and new[-1] == 2560.0


def test_error_finish_reason_from_0_13():
    def reasons(release):
        spec = CATALOG.families(release, "v1")["vllm:request_success_total"]
        return set(spec.label_values["finished_reason"])

    assert "error" not in reasons((0, 12, 0))
    assert "error" in reasons((0, 13, 0))
    assert "repetition" in reasons((0, 17, 0))


@pytest.mark.parametrize("release", [r for r in CATALOG.releases])
def test_every_release_has_the_four_signals_of_the_card(release):
    engine = release.engines[0]
    exposed = set(CATALOG.families(release.version, engine))
    assert "vllm:time_to_first_token_seconds" in exposed
    assert exposed & {"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"}
    assert "vllm:num_requests_waiting" in exposed
    assert exposed & {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}


def test_signals_only_name_catalog_series_of_the_right_type():
    for signal in CATALOG.signals.values():
        for name in signal.series:
            assert CATALOG.metrics[name].type == signal.type, (signal.key, name)


def test_patch_release_not_listed_uses_its_minor_sibling():
    release, note = CATALOG.release("0.20.2")
    assert release.text == "0.20.0" and "0.20.2" in note


@pytest.mark.parametrize("text", ["0.5.0", "1.0.0", "0.35.0", "latest", "0.x"])
def test_unknown_release_is_refused(text):
    with pytest.raises(BundleError):
        CATALOG.release(text)


def test_catalog_matches_the_real_0_32_0_server():
    """Every series the real CPU server exposes (idle or after traffic) is in the catalog for
    0.32.0 with the same type, label names and bucket bounds, and nothing more."""
    real = {}
    for capture in ("idle", "traffic"):
        text = (FIXTURES / f"vllm-0.32.0-cpu-{capture}.prom").read_text()
        real.update(from_exposition(text, capture, CATALOG).families)
    expected = CATALOG.families((0, 32, 0), "v1")
    assert set(real) == set(expected)
    for name, family in real.items():
        spec = expected[name]
        assert family.type == spec.type, name
        if "*" in spec.labels:  # cache_config_info: every CacheConfig field, release-specific
            assert spec.labels - {"*"} <= family.labels, name
        else:
            assert family.labels == spec.labels, name
        if spec.buckets is not None:
            assert family.buckets == spec.buckets, name
