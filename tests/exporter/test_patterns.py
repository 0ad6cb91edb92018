"""patterns.yaml: every entry is reachable, its anchor is sound, and bad files fail at load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from vllm_log_exporter.lines import clean_line
from vllm_log_exporter.patterns import (
    DEATH_REASONS,
    EVENTS,
    KINDS,
    REASONS,
    PatternError,
    default_patterns_text,
    load_patterns,
)
from vllm_log_exporter.records import parse_line

from .helpers import LOGS, feed_text, make_pipeline

PATTERNS = load_patterns()
NAMES = [p.name for p in PATTERNS]


@pytest.mark.parametrize("name", NAMES)
def test_sample_is_classified_by_its_own_pattern(name: str) -> None:
    """First match wins, so an entry shadowed by an earlier one would be dead code."""
    pattern = next(p for p in PATTERNS if p.name == name)
    hit = PATTERNS.match_line(clean_line(pattern.sample.encode()))
    if pattern.kind == "ignore":
        assert hit is None
    else:
        assert hit is not None and hit[0].name == name


def _literal_runs(regex: str) -> list[str]:
    """Runs of literal characters every match of regex contains (groups inlined)."""
    try:
        from re import _constants as c
        from re import _parser as sre_parse  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_constants as c  # type: ignore[no-redef]
        import sre_parse  # type: ignore[no-redef]

    runs: list[str] = []

    def walk(items, current: list[str]) -> list[str]:
        for op, arg in items:
            if op is c.LITERAL:
                current.append(chr(arg))
            elif op is c.SUBPATTERN and not any(o is c.BRANCH for o, _ in arg[-1]):
                current = walk(arg[-1], current)  # a plain group: part of the same run
            else:
                runs.append("".join(current))
                current = []
                if op is c.SUBPATTERN:
                    walk(arg[-1], [])
                elif op is c.BRANCH:
                    for branch in arg[1]:
                        runs.append("".join(walk(branch, [])))
        return current

    runs.append("".join(walk(sre_parse.parse(regex), [])))
    return runs


@pytest.mark.parametrize("name", NAMES)
def test_anchor_is_literal_text_of_the_regex(name: str) -> None:
    pattern = next(p for p in PATTERNS if p.name == name)
    assert any(pattern.anchor in run for run in _literal_runs(pattern.regex.pattern))


def test_anchors_never_occur_in_access_or_stats_lines() -> None:
    """The fast path never searches access or stats lines for these anchors: on real lines
    that loses nothing."""
    common = []
    for log in LOGS.glob("vllm-0.32.0-*.log"):
        for raw in log.read_bytes().split(b"\n"):
            line = clean_line(raw)
            if ' HTTP/1.1" ' in line or "Avg prompt throughput: " in line:
                common.append(line)
    assert len(common) > 100
    for anchor in PATTERNS.anchors:
        if anchor in ('" 5', "Avg prompt throughput: "):
            continue  # the two anchors meant for those lines
        offenders = [line for line in common if anchor in line]
        assert offenders == [], anchor


def test_label_sets_are_the_contract() -> None:
    assert EVENTS == (
        "oom",
        "engine_dead",
        "startup_failed",
        "preemption",
        "request_error",
        "startup_complete",
        "shutdown",
        "startup_begin",
        "engine_faulted",
        "request_refused",
    )
    assert set(REASONS) >= {
        "kv_cache_too_small",
        "no_cache_memory",
        "out_of_memory",
        "engine_init_failed",
        "other",
    }
    assert DEATH_REASONS == ("out_of_memory", "gpu_fault", "nccl_timeout", "other")
    assert {p.reason for p in PATTERNS if p.reason and p.kind != "engine_dead"} <= set(REASONS)
    assert {p.reason for p in PATTERNS if p.kind == "engine_dead" and p.reason} <= set(DEATH_REASONS)
    assert {p.kind for p in PATTERNS} <= KINDS


def test_every_pattern_has_versions_and_a_source() -> None:
    for pattern in PATTERNS:
        assert pattern.versions, pattern.name
        assert pattern.source in ("captured", "field", "template"), pattern.name


def test_captured_samples_are_really_in_the_captures() -> None:
    """Numbers (pids, ports, times, sizes) are masked: a re-capture keeps the samples valid."""

    def masked(text: str) -> str:
        return re.sub(r"\d+", "N", text)

    captured = masked(b"".join(p.read_bytes() for p in LOGS.glob("vllm-0.32.0-*.log")).decode())
    for pattern in PATTERNS:
        if pattern.source == "captured":
            assert masked(pattern.sample) in captured, pattern.name


def test_field_samples_are_lines_of_the_field_corpus() -> None:
    """A `field` sample is a whole line a user posted, kept with its source URL."""
    lines = {line for p in (LOGS / "field").glob("*.log") for line in p.read_text("utf-8").splitlines()}
    field = [p for p in PATTERNS if p.source == "field"]
    assert field
    for pattern in field:
        assert pattern.sample in lines, pattern.name


def test_traceback_frames_never_match() -> None:
    """Indented lines (frames, quoted source) are skipped: code is not an event."""
    line = (
        "(EngineCore pid=1) ERROR 11-29 09:56:15 [core.py:1510]     "
        'raise RuntimeError("CUDA out of memory. '
        'Tried to allocate 1 GiB")'
    )
    assert PATTERNS.match_line(line) is None
    assert PATTERNS.match_line('    raise AsyncEngineDeadError("Background loop is stopped.")') is None


def test_request_controlled_text_never_counts() -> None:
    """A client choosing the path, or a prompt echoed by request logging, is not an event."""
    pipeline = make_pipeline()
    feed_text(
        pipeline,
        'INFO:     10.0.0.9:4000 - "GET /torch.OutOfMemoryError HTTP/1.1" 404 Not Found\n'
        'INFO:     10.0.0.9:4001 - "GET /EngineDeadError:%20x HTTP/1.1" 404 Not Found\n'
        "INFO 05-26 22:21:00 async_llm_engine.py:529] Received request cmpl-1: prompt: 'EngineCore "
        "encountered a fatal error. torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 1 GiB', "
        "params: SamplingParams(n=1)\n",
    )
    assert pipeline.counts.events == dict.fromkeys(EVENTS, 0)


def test_packaged_patterns_file_is_the_default() -> None:
    text = default_patterns_text()
    assert "patterns:" in text
    assert len(PATTERNS) == text.count("\n  - name: ")


def _write(tmp_path: Path, entry: str) -> Path:
    path = tmp_path / "patterns.yaml"
    path.write_text("patterns:\n" + entry, encoding="utf-8")
    return path


GOOD = """\
  - name: custom_oom
    kind: oom
    reason: out_of_memory
    anchor: "out of memory"
    regex: 'NPU out of memory'
    sample: "ERROR 01-01 00:00:00 [x.py:1] NPU out of memory"
"""


def test_a_custom_patterns_file_is_used(tmp_path: Path) -> None:
    patterns = load_patterns(_write(tmp_path, GOOD))
    assert [p.name for p in patterns] == ["custom_oom"]
    assert patterns.match_line("ERROR 01-01 00:00:00 [x.py:1] NPU out of memory") is not None


@pytest.mark.parametrize(
    ("replace", "by", "message"),
    [
        ("kind: oom", "kind: explosion", "unknown kind 'explosion'"),
        ("reason: out_of_memory", "reason: bad_luck", "unknown reason 'bad_luck'"),
        ("regex: 'NPU out of memory'", "regex: 'NPU (out'", "invalid regex"),
        (
            "regex: 'NPU out of memory'",
            "regex: 'GPU out of memory'",
            "does not match its own sample",
        ),
        ('anchor: "out of memory"', 'anchor: "exploded"', "does not contain the anchor"),
        ("    sample:", "    colour: red\n    sample:", "unknown field(s): colour"),
        ("name: custom_oom", "name: ''", "non-empty string 'name'"),
        ("reason: out_of_memory", "reason: out_of_memory\n    phase: weights", "'phase' is needed by"),
        (
            "regex: 'NPU out of memory'",
            "regex: 'NPU (?P<version>out) of memory'",
            "only engine_begin and startup_begin lines may have a 'version' group",
        ),
    ],
)
def test_invalid_patterns_fail_at_load(tmp_path: Path, replace: str, by: str, message: str) -> None:
    assert replace in GOOD
    with pytest.raises(PatternError, match=re.escape(message)):
        load_patterns(_write(tmp_path, GOOD.replace(replace, by)))


def test_duplicate_names_and_startup_failures_without_reason_fail(tmp_path: Path) -> None:
    with pytest.raises(PatternError, match="defined twice"):
        load_patterns(_write(tmp_path, GOOD + GOOD))
    no_reason = GOOD.replace("kind: oom", "kind: startup_failed").replace("    reason: out_of_memory\n", "")
    with pytest.raises(PatternError, match="without a 'reason'"):
        load_patterns(_write(tmp_path, no_reason))


DURATION = """\
  - name: custom_weights
    kind: startup_duration
    phase: weights
    anchor: "weights in"
    regex: 'weights in (?P<seconds>[\\d.]+)s'
    sample: "INFO 01-01 00:00:00 [x.py:1] weights in 3.5s"
"""


def test_startup_duration_entries_need_a_known_phase_and_seconds(tmp_path: Path) -> None:
    patterns = load_patterns(_write(tmp_path, DURATION))
    assert [(p.kind, p.phase) for p in patterns] == [("startup_duration", "weights")]
    with pytest.raises(PatternError, match="unknown phase 'warmup'; known: weights, model_load, engine_init"):
        load_patterns(_write(tmp_path, DURATION.replace("phase: weights", "phase: warmup")))
    with pytest.raises(PatternError, match="'phase' is needed by startup_duration entries"):
        load_patterns(_write(tmp_path, DURATION.replace("    phase: weights\n", "")))
    with pytest.raises(PatternError, match="lacks named group"):
        load_patterns(_write(tmp_path, DURATION.replace("?P<seconds>", "")))


def test_the_logo_line_is_text_but_traceback_frames_are_not() -> None:
    """The logo's version line starts with one space; frames with two, source with four."""
    logo = (
        "(APIServer pid=1) INFO 11-29 09:53:37 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0"
    )
    hit = PATTERNS.match_line(logo)
    assert hit is not None and hit[0].name == "logo_version" and hit[1].group("version") == "0.32.0"
    frame = '(APIServer pid=1) ERROR 11-29 09:53:37 [x.py:1]   File "x.py", line 1, in f'
    source = '(APIServer pid=1) ERROR 11-29 09:53:37 [x.py:1]     logger.info("Starting to load model %s", m)'
    assert PATTERNS.match_line(frame) is None and PATTERNS.match_line(source) is None
    assert PATTERNS.match_line("\tStarting to load model m") is None


def test_unreadable_or_malformed_files_fail(tmp_path: Path) -> None:
    with pytest.raises(PatternError, match="cannot read patterns file"):
        load_patterns(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("patterns: [\n", encoding="utf-8")
    with pytest.raises(PatternError, match="not valid YAML"):
        load_patterns(bad)
    bad.write_text("- just a list\n", encoding="utf-8")
    with pytest.raises(PatternError, match="'patterns' list"):
        load_patterns(bad)


def test_messages_are_matched_after_the_header() -> None:
    """Anchored regexes see the message, whatever prefix docker or journald add."""
    for line in (
        "INFO:     Application startup complete.",
        "(APIServer pid=1) INFO:     Application startup complete.",
        "2026-11-29T08:44:57.123456789Z INFO:     Application startup complete.",
    ):
        record = parse_line(line)
        assert record.messages == ["Application startup complete."], line
        hit = PATTERNS.match_line(line)
        assert hit is not None and hit[0].name == "application_startup_complete"


FRAME = """\
  - name: custom_frame
    kind: frame
    context: serving
    anchor: ", in step_loop"
    regex: '^\\s*File "[^"]+", line \\d+, in step_loop\\s*$'
    sample: '  File "/x/engine.py", line 3, in step_loop'
"""


def test_frame_entries_need_a_known_context_and_a_whole_line_regex(tmp_path: Path) -> None:
    patterns = load_patterns(_write(tmp_path, FRAME))
    assert [(p.kind, p.context) for p in patterns] == [("frame", "serving")]
    with pytest.raises(PatternError, match="unknown context 'idle'; known: serving, starting"):
        load_patterns(_write(tmp_path, FRAME.replace("context: serving", "context: idle")))
    with pytest.raises(PatternError, match="'context' is needed by frame entries"):
        load_patterns(_write(tmp_path, FRAME.replace("    context: serving\n", "")))
    with pytest.raises(PatternError, match=re.escape("must match the whole line (^...$)")):
        load_patterns(_write(tmp_path, FRAME.replace("\\s*$'", "'")))
    with pytest.raises(PatternError, match="'context' is needed by frame entries and only by them"):
        load_patterns(_write(tmp_path, GOOD.replace("kind: oom", "kind: oom\n    context: serving")))


def test_frames_match_only_whole_frame_lines_and_only_frame_entries_see_indented_text() -> None:
    frame = '(EngineCore pid=1) ERROR 11-29 09:56:15 [core.py:1]   File "/x/vllm/v1/engine/core.py", line 9, in run_busy_loop'
    hit = PATTERNS.match_line(frame)
    assert hit is not None and (hit[0].kind, hit[0].context) == ("frame", "serving")
    # The same words quoted inside other code, or an indented failure line, count nothing.
    quoted = "(EngineCore pid=1) ERROR 11-29 09:56:15 [core.py:1]     raise X('File \"a\", line 1, in run_busy_loop')"
    indented = "(EngineCore pid=1) ERROR 11-29 09:56:15 [core.py:1]     EngineCore encountered a fatal error."
    assert PATTERNS.match_line(quoted) is None and PATTERNS.match_line(indented) is None
