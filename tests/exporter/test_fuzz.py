"""Fuzzing: arbitrary bytes never crash the exporter and never create new series."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from vllm_log_exporter.counts import FILE_STATES, READ_ERROR_REASONS
from vllm_log_exporter.metrics import build_registry
from vllm_log_exporter.patterns import EVENTS, REASONS, load_patterns

from .helpers import LOGS, FakeClock, make_pipeline, samples

PATTERNS = load_patterns()
REAL_LINES = sorted(
    {line for p in LOGS.glob("*.log") for line in p.read_bytes().split(b"\n") if line}
    | {p.sample.encode() for p in PATTERNS}
)
ENGINES = {str(n) for n in range(256)} | {"all"}
ALLOWED_LABELS = {
    "event": set(EVENTS),
    "reason": set(REASONS) | set(READ_ERROR_REASONS),
    "state": set(FILE_STATES),
    "engine": ENGINES,
    "version": {"0.1.0"},
}
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
    for series, value in series_of(pipeline).items():
        assert value >= 0, series
        if "{" in series:
            labels = dict(part.split("=", 1) for part in series[series.index("{") + 1 : -1].split(","))
            for name, quoted in labels.items():
                assert quoted.strip('"') in ALLOWED_LABELS[name], series
    counts = pipeline.counts
    assert counts.lines == expected_lines(data)
    assert counts.oversized_lines <= counts.lines
    assert counts.undecodable_lines <= counts.lines
    assert sum(counts.startup_failures.values()) == counts.events["startup_failed"]
