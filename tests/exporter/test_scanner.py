"""The fast path must count exactly what looking at every line would count."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm_log_exporter.lines import clean_line
from vllm_log_exporter.patterns import STATS_ANCHOR, load_patterns
from vllm_log_exporter.pipeline import Pipeline
from vllm_log_exporter.records import parse_line
from vllm_log_exporter.scanner import SUB_BLOCK_BYTES, Scanner

from .helpers import LOGS, FakeClock, feed_text, make_pipeline

ALL_LOGS = sorted(LOGS.glob("*.log"))
ACCESS_OK = b'INFO:     127.0.0.1:51234 - "POST /v1/completions HTTP/1.1" 200 OK\n'


def naive(data: bytes) -> Pipeline:
    """Every line through the rules, no scanner: the reference the fast path must equal."""
    pipeline = make_pipeline()
    machine, counts = pipeline.machine, pipeline.counts
    for raw in data.split(b"\n")[:-1]:
        counts.lines += 1
        record = parse_line(clean_line(raw))
        when = machine.observe_time(record.log_time)
        for message in record.messages:
            hit = pipeline.patterns.match(message)
            if hit:
                machine.handle(hit[0], hit[1], when)
    machine.settle()
    return pipeline


def summary(pipeline: Pipeline) -> tuple:
    c = pipeline.counts
    stats = {engine: {k: v for k, v in g.items() if k != "timestamp"} for engine, g in c.stats.items()}
    # The lifecycle too, but not the total's value: it ends at the last timestamped line the
    # rules saw, and the naive reading sees every line.
    durations = {phase: sum(h["buckets"]) for phase, h in c.startup_durations.items()}
    last = {k: v for k, v in c.last_startup_durations.items() if k != "total"}
    lifecycle = (c.server_state, c.vllm_version, durations, last)
    return c.events, c.startup_failures, stats, lifecycle, c.lines


@pytest.mark.parametrize("log", ALL_LOGS, ids=lambda p: p.name)
def test_fast_path_equals_every_line(log) -> None:
    data = log.read_bytes()
    fast = make_pipeline()
    feed_text(fast, data)
    assert summary(fast) == summary(naive(data))


def spread(data: bytes, every: int, seed: int = 13) -> bytes:
    """The log's lines in their order, with successful access lines dropped in between at
    random, about `every` of them per log line: each line then stands alone among access
    lines instead of beside its neighbours."""
    rng = random.Random(seed)
    out = []
    for line in data.split(b"\n")[:-1]:
        out.append(ACCESS_OK * rng.randint(0, 2 * every))
        out.append(line + b"\n")
    return b"".join(out)


@pytest.mark.parametrize("log", ALL_LOGS, ids=lambda p: p.name)
def test_spreading_the_lines_among_access_lines_changes_no_count(log) -> None:
    """Access lines that answered 200 count nothing; a failure or lifecycle line alone in a
    sub-block of access lines must be found as surely as one inside its traceback."""
    data = log.read_bytes()
    spread_out = spread(data, every=60)
    assert len(spread_out) > 10 * SUB_BLOCK_BYTES
    fast = make_pipeline()
    feed_text(fast, spread_out)
    *counted, lines = summary(fast)
    reference = summary(naive(data))
    assert counted == list(reference[:-1])
    assert lines == spread_out.count(b"\n")


PATTERNS = load_patterns()
ANCHORS = tuple(a.encode() for a in PATTERNS.anchors if a != STATS_ANCHOR) + (b"Preemptions: ",)
REAL_LINES = sorted({line + b"\n" for p in ALL_LOGS for line in p.read_bytes().split(b"\n") if line})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(st.sampled_from(REAL_LINES), st.just(ACCESS_OK), st.just(ACCESS_OK * 40)),
        max_size=300,
    )
)
def test_candidates_are_exactly_the_lines_holding_an_anchor(lines: list[bytes]) -> None:
    """For real vLLM lines (no access or stats line holds a failure anchor), the fast path
    yields exactly the lines that hold an anchor, in order, repeated lines included,
    wherever they stand; besides those only the last stats line(s) of the block."""
    region = b"".join(lines)
    expected = [line.rstrip(b"\n") for line in b"".join(lines).split(b"\n")[:-1] if _holds_anchor(line)]
    found = list(Scanner(PATTERNS).candidates(region))
    assert [c for c in found if _holds_anchor(c)] == expected
    assert all(STATS_ANCHOR.encode() in c for c in found if not _holds_anchor(c))


def _holds_anchor(line: bytes) -> bool:
    return any(anchor in line for anchor in ANCHORS)


@pytest.mark.parametrize("chunk", [1, 7, 333, 4096, SUB_BLOCK_BYTES + 3, 1 << 20])
def test_counts_do_not_depend_on_how_reads_cut_the_log(chunk: int) -> None:
    data = b"".join(p.read_bytes() for p in ALL_LOGS)
    whole, pieces = make_pipeline(), make_pipeline()
    feed_text(whole, data)
    feed_text(pieces, data, chunk=chunk)
    assert summary(pieces) == summary(whole) == summary(naive(data))


def test_steady_traffic_blocks_only_yield_5xx_preemption_and_last_stats_lines() -> None:
    access = b'INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    error = b'INFO:     127.0.0.1:2 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error\n'
    stats = (
        b"(APIServer pid=1) INFO 11-29 09:54:04 [loggers.py:335] "
        b"Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        b"Avg generation throughput: 2.0 tokens/s, Running: %d reqs, Waiting: 0 reqs%s, "
        b"CPU KV cache usage: 0.2%%\n"
    )
    region = (
        access * 2000
        + error
        + stats % (1, b"")
        + stats % (2, b", Preemptions: 3")
        + access * 3000
        + stats % (3, b"")
        + access * 10
    )
    scanner = Scanner(make_pipeline().patterns)
    assert list(scanner.candidates(region)) == [
        error.rstrip(b"\n"),
        (stats % (2, b", Preemptions: 3")).rstrip(b"\n"),
        (stats % (3, b"")).rstrip(b"\n"),
    ]


def test_several_engines_keep_one_gauge_each() -> None:
    def stats(engine: int, running: int) -> str:
        return (
            "(APIServer pid=1) INFO 11-29 09:54:04 [loggers.py:335] "
            f"Engine {engine:03d}: Avg prompt throughput: 1.0 tokens/s, "
            f"Avg generation throughput: 2.0 tokens/s, Running: {running} reqs, Waiting: 0 reqs, "
            "GPU KV cache usage: 1.0%\n"
        )

    pipeline = make_pipeline(FakeClock())
    feed_text(pipeline, stats(0, 5) + stats(1, 6) + stats(0, 7) + stats(2, 8) + stats(1, 9))
    assert {e: g["running"] for e, g in pipeline.counts.stats.items()} == {"0": 7, "1": 9, "2": 8}


def test_a_failure_line_hidden_among_access_lines_is_found() -> None:
    access = 'INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    for position in (0, 500, 999, 1000):
        pipeline = make_pipeline()
        lines = [access] * 1000
        lines.insert(position, oom)
        feed_text(pipeline, "".join(lines))
        assert pipeline.counts.events["oom"] == 1, position
        assert pipeline.counts.lines == 1001
