"""Following files through the hazards of real log handling, one named test each. The tests write
real files and drive FileSource.poll() / Tailer.poll() directly: no sleeps, no threads."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from vllm_log_exporter.tailer import FileSource, Resume, StreamSource, Tailer

from .helpers import FakeClock, make_pipeline

OOM = (
    "(Worker pid=9) ERROR 11-29 10:01:58 [x.py:1] "
    "RuntimeError: DefaultCPUAllocator: can't allocate memory: 1\n"
)
START = (
    "(APIServer pid=1) INFO 11-29 10:00:00 [api_utils.py:286] non-default args: {}\n"
    "INFO:     Application startup complete.\n"
)
DEATH = "(APIServer pid=1) ERROR 11-29 10:05:00 [async_llm.py:906] AsyncLLM output_handler failed.\n"


def follow(path: Path, **kwargs) -> tuple[FileSource, Tailer, list[str]]:
    pipeline = make_pipeline(FakeClock())
    warnings: list[str] = []
    source = FileSource(path, pipeline, warn=warnings.append, **kwargs)
    return source, Tailer(pipeline, [source]), warnings


def append(path: Path, text: str | bytes) -> None:
    with open(path, "ab") as out:
        out.write(text.encode() if isinstance(text, str) else text)


def test_rotation_by_rename_and_create(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(START)
    source, tailer, _ = follow(log)
    tailer.poll()
    append(log, "written before the rename, unread\n" + OOM.replace("10:01:58", "10:01:00"))
    log.rename(tmp_path / "vllm.log.1")
    append(
        tmp_path / "vllm.log.1",
        "(APIServer pid=1) INFO 11-29 10:01:01 [x.py:1] late write to the old file\n",
    )
    log.write_text(DEATH)
    tailer.poll()
    counts = tailer.pipeline.counts
    assert counts.rotations == 1
    assert counts.events["oom"] == 1 and counts.events["engine_dead"] == 1
    assert counts.lines == 2 + 3 + 1  # nothing lost from the old file, the new one read whole
    append(log, "more\n")
    tailer.poll()
    assert counts.lines == 7 and counts.rotations == 1


def test_rotation_by_copytruncate(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(START + "x" * 500 + "\n")
    source, tailer, _ = follow(log)
    tailer.poll()
    (tmp_path / "vllm.log.1").write_bytes(log.read_bytes())  # the copy...
    with open(log, "r+b") as f:  # ...then truncate in place
        f.truncate(0)
    append(log, DEATH)
    tailer.poll()
    counts = tailer.pipeline.counts
    assert counts.truncations == 1 and counts.rotations == 0
    assert counts.events["engine_dead"] == 1
    assert counts.lines == 4
    assert source.offset == len(DEATH)


def test_truncation_flushes_the_partial_line(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(
        START + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB"
    )  # no newline
    source, tailer, _ = follow(log)
    tailer.poll()
    assert tailer.pipeline.counts.events["oom"] == 0
    log.write_text("")
    tailer.poll()
    assert tailer.pipeline.counts.events["oom"] == 1
    assert tailer.pipeline.counts.truncations == 1


def test_deletion_and_recreation(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(START)
    source, tailer, warnings = follow(log)
    tailer.poll()
    append(log, OOM)
    log.unlink()
    tailer.poll()  # drains what was written before the unlink
    counts = tailer.pipeline.counts
    assert counts.events["oom"] == 1 and counts.lines == 3
    assert counts.files == {"reading": 0, "missing": 1, "unreadable": 0}
    tailer.poll()
    assert counts.read_errors["not_found"] == 1  # once per episode, not per poll
    assert len(warnings) == 1
    log.write_text(DEATH)
    tailer.poll()
    assert counts.events["engine_dead"] == 1
    assert counts.rotations == 1
    assert counts.files == {"reading": 1, "missing": 0, "unreadable": 0}


def test_file_that_does_not_exist_yet(tmp_path: Path) -> None:
    log = tmp_path / "later" / "vllm.log"
    source, tailer, warnings = follow(log, start_at_end=True)
    for _ in range(3):
        assert tailer.poll() == 0
    counts = tailer.pipeline.counts
    assert counts.read_errors == {"permission_denied": 0, "not_found": 1, "io_error": 0}
    assert counts.files["missing"] == 1
    assert warnings == [f"{log} does not exist (yet); will retry"]
    log.parent.mkdir()
    log.write_text(START)  # a file that appears later is new: read from its start
    tailer.poll()
    assert counts.events["startup_complete"] == 1
    assert counts.files["reading"] == 1
    assert counts.rotations == 0


def test_start_at_end_skips_what_an_existing_file_holds(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(START + DEATH)
    source, tailer, _ = follow(log, start_at_end=True)
    tailer.poll()
    assert tailer.pipeline.counts.lines == 0
    append(log, OOM)
    tailer.poll()
    assert tailer.pipeline.counts.events == {
        **tailer.pipeline.counts.events,
        "oom": 1,
        "engine_dead": 0,
    }


def test_partial_lines_written_in_pieces(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    source, tailer, _ = follow(log)
    counts = tailer.pipeline.counts
    text = START + OOM
    for piece in (text[:10], text[10:60], text[60:-5], text[-5:-1]):
        append(log, piece)
        tailer.poll()
    assert counts.lines == 2 and counts.events["oom"] == 0
    assert source.committed()["offset"] == len(START)  # the partial line is not committed
    append(log, "\n")
    tailer.poll()
    assert counts.lines == 3 and counts.events["oom"] == 1
    assert counts.bytes == len(text)


def test_crlf_lines(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_bytes(b"INFO:     Application startup complete.\r\n" + OOM.replace("\n", "\r\n").encode())
    source, tailer, _ = follow(log)
    tailer.poll()
    counts = tailer.pipeline.counts
    assert counts.events["startup_complete"] == 1 and counts.events["oom"] == 1
    assert counts.lines == 2


def test_invalid_utf8_is_counted_not_fatal(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_bytes(
        b"\xff\xfe\xfd garbage\n"
        + b"torch.OutOfMemoryError: CUDA out of memory. Tried \xc3(\n"
        + DEATH.encode()
    )
    source, tailer, _ = follow(log)
    tailer.poll()
    counts = tailer.pipeline.counts
    assert counts.undecodable_lines == 2
    assert counts.lines == 3
    assert counts.events["oom"] == 1  # the rest of a damaged line still counts
    assert counts.events["engine_dead"] == 1


def test_nul_bytes(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    # A crash can leave a run of NULs (preallocated, never written blocks) in a log.
    log.write_bytes(
        b"\x00" * 4096
        + b"\n"
        + b"INFO:\x00     Application startup complete.\n"
        + b"\x00" * 100
        + OOM.encode()
    )
    source, tailer, _ = follow(log)
    tailer.poll()
    counts = tailer.pipeline.counts
    assert counts.lines == 3
    assert counts.events["startup_complete"] == 1 and counts.events["oom"] == 1
    assert counts.undecodable_lines == 0


def test_huge_line_without_newline_keeps_memory_bounded(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(START)
    pipeline = make_pipeline(FakeClock(), max_line_bytes=1 << 16)
    source = FileSource(log, pipeline, read_size=1 << 16, warn=lambda m: None)
    source.poll()
    block = b"y" * (1 << 20)
    for _ in range(300):  # 300 MiB, read as it grows
        append(log, block)
        source.poll()
        assert source.assembler.pending_bytes <= 1 << 16
    append(log, b"\n" + OOM.encode())
    source.poll()
    counts = pipeline.counts
    assert counts.oversized_lines == 1
    assert counts.lines == 2 + 1 + 1
    assert counts.events["oom"] == 1
    assert counts.bytes == len(START) + 300 * len(block) + 1 + len(OOM)
    source.close()
    log.unlink()  # pytest keeps old tmp dirs: do not leave 300 MiB behind


def test_permission_denied_is_reported_and_retried(tmp_path: Path) -> None:
    """The tailer's bookkeeping, stepped by hand; test_cli has the real file-mode denial."""
    log = tmp_path / "vllm.log"
    log.write_text(START)
    denied = {"on": True}

    def opener(path: Path) -> int:
        if denied["on"]:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return os.open(path, os.O_RDONLY)

    pipeline = make_pipeline(FakeClock())
    warnings: list[str] = []
    source = FileSource(log, pipeline, opener=opener, warn=warnings.append)
    tailer = Tailer(pipeline, [source])
    for _ in range(5):
        tailer.poll()
    counts = pipeline.counts
    assert counts.read_errors == {"permission_denied": 1, "not_found": 0, "io_error": 0}
    assert counts.files == {"reading": 0, "missing": 0, "unreadable": 1}
    assert warnings == [f"permission denied reading {log}; will retry"]
    denied["on"] = False
    tailer.poll()
    assert counts.events["startup_complete"] == 1
    assert counts.files["reading"] == 1
    assert warnings[-1] == f"reading {log} again"


def test_a_directory_at_the_path_is_reported_and_retried(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.mkdir()
    source, tailer, warnings = follow(log)
    tailer.poll()
    tailer.poll()
    assert tailer.pipeline.counts.read_errors == {
        "permission_denied": 0,
        "not_found": 0,
        "io_error": 1,
    }
    assert warnings == [f"{log} is not a regular file; will retry"]
    log.rmdir()
    log.write_text(START)
    tailer.poll()
    assert tailer.pipeline.counts.events["startup_complete"] == 1


def test_a_fifo_at_the_path_does_not_hang_and_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    os.mkfifo(log)
    source, tailer, warnings = follow(log)
    assert tailer.poll() == 0
    assert tailer.pipeline.counts.read_errors["io_error"] == 1
    assert warnings == [f"{log} is not a regular file; will retry"]


def test_lag_is_bytes_written_but_not_read(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("a" * 99 + "\n")
    source, tailer, _ = follow(log)
    tailer.poll()
    assert tailer.pipeline.counts.unread_bytes == 0
    append(log, "b" * 299 + "\n")
    tailer.update_gauges()
    assert tailer.pipeline.counts.unread_bytes == 300
    source.poll(budget=100)
    tailer.update_gauges()
    assert tailer.pipeline.counts.unread_bytes == 200


def test_resume_point_continues_exactly_and_detects_truncation_while_down(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(START + OOM + "partial")
    source, tailer, _ = follow(log)
    tailer.poll()
    point = source.committed()
    assert point["offset"] == len(START) + len(OOM)
    append(log, " line\n" + DEATH)
    resumed, tailer2, _ = follow(log, resume=Resume.from_json(point))
    tailer2.poll()
    counts = tailer2.pipeline.counts
    assert counts.lines == 2 and counts.events["engine_dead"] == 1 and counts.events["oom"] == 0
    log.write_text("")  # truncated while nobody watched
    again, tailer3, _ = follow(log, resume=Resume.from_json(resumed.committed()))
    append(log, OOM)
    tailer3.poll()
    assert tailer3.pipeline.counts.truncations == 1 and tailer3.pipeline.counts.events["oom"] == 1


def test_rotation_while_down_finishes_the_old_file_first(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(START)
    source, tailer, _ = follow(log)
    tailer.poll()
    point = source.committed()
    append(log, OOM)  # written after the last save, before the rotation
    log.rename(tmp_path / "vllm.log.1")
    log.write_text(DEATH)
    resumed, tailer2, _ = follow(log, resume=Resume.from_json(point))
    tailer2.poll()
    counts = tailer2.pipeline.counts
    assert counts.events["oom"] == 1 and counts.events["engine_dead"] == 1
    assert counts.rotations == 1 and counts.lines == 2


def test_stdin_stream_with_passthrough(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    out_path = tmp_path / "console"
    with open(out_path, "wb") as console:
        pipeline = make_pipeline(FakeClock())
        stream = StreamSource(read_fd, pipeline, passthrough_fd=console.fileno())
        os.write(write_fd, (START + OOM[:20]).encode())
        stream.poll()
        assert pipeline.counts.events["startup_complete"] == 1
        os.write(write_fd, OOM[20:].encode())
        os.close(write_fd)
        stream.poll()
        assert stream.closed
    assert pipeline.counts.events["oom"] == 1
    assert out_path.read_text() == START + OOM
    os.close(read_fd)


def test_passthrough_to_a_closed_console_keeps_exporting() -> None:
    read_fd, write_fd = os.pipe()
    console_read, console_write = os.pipe()
    os.close(console_read)  # nobody reads the console any more: EPIPE
    pipeline = make_pipeline(FakeClock())
    stream = StreamSource(read_fd, pipeline, passthrough_fd=console_write)
    os.write(write_fd, OOM.encode())
    stream.poll()
    assert stream.passthrough_fd is None
    assert pipeline.counts.events["oom"] == 1
    for fd in (read_fd, write_fd, console_write):
        os.close(fd)


@pytest.mark.parametrize("stderr_files", [0, 1, 2])
def test_several_files_feed_one_set_of_incidents(tmp_path: Path, stderr_files: int) -> None:
    """stdout (the logger) and stderr (raw tracebacks) of one server in separate files:
    the incident they both report counts once."""
    pipeline = make_pipeline(FakeClock())
    stdout = tmp_path / "stdout.log"
    stdout.write_text(START + DEATH)
    paths = [stdout]
    for i in range(stderr_files):
        path = tmp_path / f"stderr{i}.log"
        path.write_text(
            "Process EngineCore:\nTraceback (most recent call last):\n"
            '  File "x.py", line 1, in run\n'
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
        )
        paths.append(path)
    tailer = Tailer(pipeline, [FileSource(p, pipeline, warn=lambda m: None) for p in paths])
    tailer.poll()
    assert pipeline.counts.events["engine_dead"] == 1
    assert pipeline.counts.files["reading"] == 1 + stderr_files
