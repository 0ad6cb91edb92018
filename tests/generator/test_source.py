"""Reading expositions: parsing, engine recognition, histogram bounds, declared series."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_obs.catalog import Catalog
from vllm_obs.signals import resolve
from vllm_obs.source import from_catalog, from_exposition

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"
CATALOG = Catalog.load()
REAL_IDLE = (FIXTURES / "vllm-0.32.0-cpu-idle.prom").read_text()
REAL_TRAFFIC = (FIXTURES / "vllm-0.32.0-cpu-traffic.prom").read_text()


def test_real_server_is_recognised_as_v1_0_32():
    source = from_exposition(REAL_TRAFFIC, "real", CATALOG)
    assert source.engine == "v1"
    assert "0.32.0 to 0.34.0" in source.summary


def test_created_series_and_python_runtime_series_are_not_families():
    source = from_exposition(REAL_TRAFFIC, "real", CATALOG)
    assert not [n for n in source.families if n.endswith("_created")]
    assert not [n for n in source.families if n.startswith("python_")]
    assert "vllm:prompt_tokens_total" in source.families  # counter named with _total


def test_the_api_server_process_series_are_families_the_process_panels_use():
    source = from_exposition(REAL_TRAFFIC, "real", CATALOG)
    process = sorted(n for n in source.families if n.startswith("process_"))
    assert "process_resident_memory_bytes" in process
    assert "process_open_fds" in process
    assert set(process) <= set(CATALOG.metrics), f"process series outside the catalog: {process}"


@pytest.mark.parametrize(
    "fixture, engine, looks_like",
    [
        ("vllm-0.9.0-v0.prom", "v0", "0.8.3 to 0.10.1.1"),
        ("vllm-0.10.0-v1.prom", "v1", "0.9.2 to 0.10.1.1"),
        ("vllm-0.11.0-v1.prom", "v1", "0.11.0"),
        ("vllm-0.13.0-v1.prom", "v1", "0.13.0 to 0.15.0"),
        ("vllm-0.20.0-v1.prom", "v1", "0.20.0 to 0.29.0"),
    ],
)
def test_engine_family_is_recognised_from_the_series_not_a_version(fixture, engine, looks_like):
    source = from_exposition((FIXTURES / "reference" / fixture).read_text(), fixture, CATALOG)
    assert source.engine == engine
    assert f"looks like vLLM {looks_like}" in source.summary


def test_declared_but_empty_families_count_only_when_the_engine_always_fills_them():
    # The idle server declares http_requests_total with no sample yet: it fills on the first request.
    idle = from_exposition(REAL_IDLE, "idle", CATALOG)
    assert "http_requests_total" in idle.families
    # V0 declares speculative-decoding series it only fills when that feature runs.
    v0 = from_exposition((FIXTURES / "reference" / "vllm-0.9.0-v0.prom").read_text(), "v0", CATALOG)
    assert "vllm:spec_decode_num_draft_tokens_total" not in v0.families


def test_custom_histogram_buckets_are_read_from_the_exposition():
    custom = REAL_TRAFFIC.replace(
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="2.5"',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="3.0"',
    )
    source = from_exposition(custom, "custom", CATALOG)
    bounds = source.families["vllm:time_to_first_token_seconds"].buckets
    assert 3.0 in bounds and 2.5 not in bounds


def test_signals_take_the_newest_name_the_source_has():
    v09 = from_catalog(CATALOG, CATALOG.release("0.10.2")[0])
    res = resolve(v09, CATALOG)
    assert res["kv_cache_usage"].name == "vllm:kv_cache_usage_perc"  # both exist; new preferred
    assert res["inter_token_latency"].name == "vllm:inter_token_latency_seconds"
    old = resolve(from_catalog(CATALOG, CATALOG.release("0.9.1")[0]), CATALOG)
    assert old["kv_cache_usage"].name == "vllm:gpu_cache_usage_perc"
    assert old["inter_token_latency"].name == "vllm:time_per_output_token_seconds"
    v0 = resolve(from_catalog(CATALOG, CATALOG.release("0.7.0")[0]), CATALOG)
    # 0.6.4-0.8.2 V0 exposes the queue time under two names; the one that lasted wins.
    assert v0["request_queue_time"].name == "vllm:request_queue_time_seconds"
    assert "preemptions" in v0.signals


def test_v1_0_7_1_lacks_preemptions_and_the_latency_breakdown():
    res = resolve(from_catalog(CATALOG, CATALOG.release("0.7.1")[0], "v1"), CATALOG)
    assert {"preemptions", "e2e_request_latency", "request_queue_time"} <= set(res.missing)
