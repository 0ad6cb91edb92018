"""Fuzzing: arbitrary bytes never crash the exporter and never create new series."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from vllm_log_exporter.counts import FILE_STATES, READ_ERROR_REASONS
from vllm_log_exporter.lifecycle_labels import BUCKETS, DURATION_PHASES, STATES, valid_version
from vllm_log_exporter.metrics import build_registry
from vllm_log_exporter.patterns import DEATH_REASONS, EVENTS, REASONS, load_patterns

from .helpers import LOGS, FakeClock, make_pipeline, samples

pytestmark = pytest.mark.slow

PATTERNS = load_patterns()
REAL_LINES = sorted(
    {line for p in LOGS.glob("*.log") for line in p.read_bytes().split(b"\n") if line}
    | {p.sample.encode() for p in PATTERNS}
)
ENGINES = {str(n) for n in range(256)} | {"all"}
LE = {repr(b) for b in BUCKETS} | {"+Inf"}
# Allowed values of each label, by metric family (the `state` label of the file gauge and of
# the server state are different sets).
ALLOWED_LABELS = {
    "vllm_log_events_total": {"event": set(EVENTS)},
    "vllm_log_last_event_timestamp_seconds": {"event": set(EVENTS)},
    "vllm_log_startup_failures_total": {"reason": set(REASONS)},
    "vllm_log_engine_deaths_total": {"reason": set(DEATH_REASONS)},
    "vllm_log_read_errors_total": {"reason": set(READ_ERROR_REASONS)},
    "vllm_log_files": {"state": set(FILE_STATES)},
    "vllm_log_server_state": {"state": set(STATES)},
    "vllm_log_startup_duration_seconds_bucket": {"phase": set(DURATION_PHASES), "le": LE},
    "vllm_log_startup_duration_seconds_count": {"phase": set(DURATION_PHASES)},
    "vllm_log_startup_duration_seconds_sum": {"phase": set(DURATION_PHASES)},
    "vllm_log_last_startup_duration_seconds": {"phase": set(DURATION_PHASES)},
    "vllm_log_exporter_build_info": {"version": {"0.1.0"}},
    "vllm_log_vllm_version_info": {"version": None},  # checked by valid_version
    **{
        f"vllm_log_{name}": {"engine": ENGINES}
        for name in (
            "requests_running",
            "requests_waiting",
            "kv_cache_usage_ratio",
            "prompt_throughput_tokens_per_second",
            "generation_throughput_tokens_per_second",
            "stats_last_timestamp_seconds",
        )
    },
}


def check_labels(series: str) -> None:
    name, _, rest = series.partition("{")
    if not rest:
        return
    allowed = ALLOWED_LABELS[name]
    labels = dict(part.split("=", 1) for part in rest[:-1].split(","))
    assert set(labels) == set(allowed), series
    for label, quoted in labels.items():
        value = quoted.strip('"')
        assert valid_version(value) if allowed[label] is None else value in allowed[label], series


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def series_of(pipeline) -> dict[str, float]:
    return samples(generate_latest(build_registry(pipeline.counts, pipeline.lock)).decode())


def run(data: bytes, cuts: list[int], max_line: int = 1024):
    pipeline = make_pipeline(FakeClock(), max_line_bytes=max_line)
    source = pipeline.new_source()
    start = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts) + [len(data)]:
        pipeline.feed(source, data[start:cut])
        start = max(start, cut)
    pipeline.flush(source)
    pipeline.tick()
    pipeline.finish()
    return pipeline


def expected_lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


@FUZZ
@given(st.binary(max_size=4096), st.lists(st.integers(min_value=0), max_size=8))
def test_random_bytes_never_crash_and_never_add_series(data: bytes, cuts: list[int]) -> None:
    pipeline = run(data, cuts)
    fresh = make_pipeline(FakeClock())
    assert set(series_of(pipeline)) == set(series_of(fresh))
    assert pipeline.counts.lines == expected_lines(data)
    assert pipeline.counts.bytes == len(data)


garbage = st.binary(min_size=1, max_size=300)
fragment = st.builds(
    lambda line, a, b: line[min(a, b) : max(a, b)] if a != b else line,
    st.sampled_from(REAL_LINES),
    st.integers(0, 400),
    st.integers(0, 400),
)
noise = st.sampled_from(
    [
        b"\r",
        b"\x00",
        b"\x1b[1;36m",
        b"\xff",
        b"\xc3",
        b"\n",
        b"{",
        b'"',
        b" 5",
        b"Engine 4096: Avg prompt throughput: 1.0 tokens/s, "
        b"Avg generation throughput: 1.0 tokens/s, "
        b"Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%",
    ]
)
piece = st.one_of(st.sampled_from(REAL_LINES), fragment, garbage, noise)
separator = st.sampled_from([b"\n", b"\n", b"\r\n", b""])


@FUZZ
@given(
    st.lists(st.tuples(piece, separator), max_size=60),
    st.lists(st.integers(min_value=0), max_size=8),
    st.sampled_from([1024, 4096, 1 << 20]),
)
def test_real_lines_mixed_with_garbage_keep_labels_in_the_fixed_sets(pieces, cuts, max_line) -> None:
    data = b"".join(p + s for p, s in pieces)
    pipeline = run(data, cuts, max_line)
    exported = series_of(pipeline)
    for series, value in exported.items():
        assert value >= 0, series
        check_labels(series)
    # One state at a time, and at most one version: replaced, never accumulated.
    assert sum(v for k, v in exported.items() if k.startswith("vllm_log_server_state{")) == 1
    assert sum(1 for k in exported if k.startswith("vllm_log_vllm_version_info")) <= 1
    counts = pipeline.counts
    assert counts.lines == expected_lines(data)
    assert counts.oversized_lines <= counts.lines
    assert counts.undecodable_lines <= counts.lines
    assert sum(counts.startup_failures.values()) == counts.events["startup_failed"]
    assert sum(counts.engine_deaths.values()) == counts.events["engine_dead"]
