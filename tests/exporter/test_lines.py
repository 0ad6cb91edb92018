"""Bounded line assembly, line cleaning and header parsing."""

from __future__ import annotations

import pytest
from vllm_log_exporter.lines import LineAssembler, clean_line, count_undecodable
from vllm_log_exporter.records import is_matchable, log_seconds, parse_line


def assemble(chunks: list[bytes], limit: int = 64) -> tuple[list[bytes], int, LineAssembler]:
    assembler = LineAssembler(limit)
    lines, oversized = [], 0
    for chunk in chunks:
        out = assembler.feed(chunk)
        oversized += out.oversized
        lines += out.region.split(b"\n")[:-1] if out.region else []
    return lines, oversized, assembler


def test_partial_lines_wait_for_their_newline() -> None:
    lines, oversized, assembler = assemble([b"line ", b"1\nline", b" 2", b"\n"])
    assert lines == [b"line 1", b"line 2"]
    assert oversized == 0 and assembler.pending_bytes == 0


def test_every_split_point_gives_the_same_lines() -> None:
    data = b"alpha\nbeta\r\n\ngamma delta\n"
    for cut in range(len(data) + 1):
        lines, _, _ = assemble([data[:cut], data[cut:]])
        assert lines == [b"alpha", b"beta\r", b"", b"gamma delta"], cut


def test_line_at_the_limit_is_kept_and_one_byte_more_is_oversized() -> None:
    exact = b"x" * 64
    lines, oversized, _ = assemble([exact[:30], exact[30:] + b"\n"])
    assert (lines, oversized) == ([exact], 0)
    lines, oversized, _ = assemble([exact[:30], exact[30:] + b"y\nnext\n"])
    assert (lines, oversized) == ([b"next"], 1)


def test_oversized_line_is_skipped_to_its_newline_with_bounded_memory() -> None:
    assembler = LineAssembler(1024)
    out = assembler.feed(b"start\n" + b"z" * 1000)
    assert out.region == b"start\n" and out.oversized == 0
    total = 0
    for _ in range(200):  # 200 KiB more of the same line, in pieces
        out = assembler.feed(b"z" * 1024)
        total += out.oversized
        assert out.region == b"" and assembler.pending_bytes <= 1024
    out = assembler.feed(b"zz\nafter\n")
    assert total + out.oversized == 1
    assert out.region == b"after\n"


def test_a_single_huge_chunk_is_cut_into_bounded_pieces() -> None:
    assembler = LineAssembler(1024)
    out = assembler.feed(b"a\n" + b"q" * 5000 + b"\nb\n")
    assert out.region == b"a\nb\n" and out.oversized == 1


def test_flush_emits_the_unterminated_last_line_once() -> None:
    assembler = LineAssembler(64)
    assert assembler.feed(b"done\npartial").region == b"done\n"
    assert assembler.flush().region == b"partial\n"
    assert assembler.flush().region == b""


def test_flush_drops_an_oversized_tail() -> None:
    assembler = LineAssembler(8)
    assert assembler.feed(b"0123456789").oversized == 1
    assert assembler.flush().region == b""


def test_clean_line_strips_crlf_ansi_nul_and_replaces_bad_utf8() -> None:
    raw = b"\x1b[1;36m(APIServer pid=1)\x1b[0;0m ERROR\x00 08-14 10:12:03 [x.py:1] caf\xe9\r"
    assert clean_line(raw) == "(APIServer pid=1) ERROR 08-14 10:12:03 [x.py:1] caf\ufffd"


def test_undecodable_lines_are_counted_per_line() -> None:
    assert count_undecodable(b"plain ascii\nline\n") == 0
    assert count_undecodable("\u2588 logo line\n".encode()) == 0
    assert count_undecodable(b"ok\nbad \xff\xfe\nalso bad \xc3\nfine \xc3\xa9\n") == 2


def test_undecodable_lines_are_found_wherever_they_stand_in_a_large_region() -> None:
    """The check decodes only the pieces that are not ASCII: bad lines at the start, the end
    and around the piece boundaries are all counted, good non-ASCII lines never."""
    ascii_line = b'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n'
    lines = [ascii_line] * 5000
    for position in (0, 1, 1200, 1201, 2500, 4999):
        lines[position] = b"bad \xc3 line\n"
    for position in (7, 1202, 3000):
        lines[position] = "logo \u2588 line\n".encode()
    region = b"".join(lines)
    assert len(region) > 4 * 64 * 1024
    expected = sum(1 for line in lines if not _decodes(line))
    assert expected == 6
    assert count_undecodable(region) == expected


def _decodes(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize(
    ("line", "when", "message"),
    [
        # 0.4-0.7: no brackets around file:line
        (
            "INFO 05-26 22:20:44 gpu_executor.py:121] # GPU blocks: 1952",
            (5, 26, 22, 20, 44),
            "# GPU blocks: 1952",
        ),
        # 0.8-0.9: brackets
        (
            "ERROR 05-10 15:59:01 [core.py:396] EngineCore failed to start.",
            (5, 10, 15, 59, 1),
            "EngineCore failed to start.",
        ),
        # 0.10-0.29 stdout prefix, 0.32 format prefix
        (
            "(EngineCore_DP0 pid=188) ERROR 08-14 10:12:03 [core.py:710] boom",
            (8, 14, 10, 12, 3),
            "boom",
        ),
        (
            "(Worker_PP0_TP1_EP0 pid=9) WARNING 02-29 00:00:00 [a/b.py:7] leap",
            (2, 29, 0, 0, 0),
            "leap",
        ),
        # docker --timestamps and journald prefixes
        (
            "2026-11-29T08:44:57.1Z (APIServer pid=1) INFO 11-29 08:44:57 [launcher.py:254] x",
            (11, 29, 8, 44, 57),
            "x",
        ),
        (
            "Nov 29 08:44:57 host python3[77]: CRITICAL 01-17 03:22:41 launcher.py:99] dead",
            (1, 17, 3, 22, 41),
            "dead",
        ),
    ],
)
def test_vllm_header_gives_time_and_message(line: str, when: tuple[int, ...], message: str) -> None:
    record = parse_line(line)
    assert record.log_time == log_seconds(*when)
    assert record.messages == [message]


def test_uvicorn_raw_and_prefixed_lines_have_no_time() -> None:
    assert parse_line("ERROR:    Application startup failed. Exiting.").messages == [
        "Application startup failed. Exiting."
    ]
    assert parse_line("(APIServer pid=1) INFO:     Shutting down").messages == ["Shutting down"]
    raw = parse_line("(EngineCore_DP0 pid=188) Process EngineCore_DP0:")
    assert (raw.log_time, raw.messages) == (None, ["Process EngineCore_DP0:"])
    assert parse_line("RuntimeError: Engine core initialization failed.").messages == [
        "RuntimeError: Engine core initialization failed."
    ]


def test_json_record_gives_message_and_every_exc_info_line() -> None:
    line = (
        '{"asctime": "2026-11-29 08:42:29,234", "levelname": "ERROR", '
        '"message": "EngineCore failed to start.", '
        '"exc_info": "Traceback (most recent call last):\\n  File \\"x.py\\", line 1\\n'
        "ValueError: No available "
        'memory for the cache blocks."}'
    )
    record = parse_line(line)
    assert record.log_time == log_seconds(11, 29, 8, 42, 29.234)
    assert record.messages == [
        "EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "x.py", line 1',
        "ValueError: No available memory for the cache blocks.",
    ]
    assert [is_matchable(m) for m in record.messages] == [True, True, False, True]


def test_broken_json_is_treated_as_text() -> None:
    assert parse_line('{"message": "EngineCore failed').messages == ['{"message": "EngineCore failed']
    assert parse_line("[1, 2]").messages == ["[1, 2]"]


def test_log_seconds_orders_a_year_and_rejects_nonsense() -> None:
    assert log_seconds(1, 1, 0, 0, 0) == 0
    assert log_seconds(12, 31, 23, 59, 59) > log_seconds(2, 29, 12, 0, 0) > log_seconds(1, 31, 0, 0, 0)
    assert log_seconds(13, 1, 0, 0, 0) is None
    assert log_seconds(0, 1, 0, 0, 0) is None
