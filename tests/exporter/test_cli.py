"""The command line and the running exporter, as real subprocesses on free ports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_log_exporter.patterns import EVENTS

from tests.support.vllm_server import free_port

from .helpers import HONOUR_FILE_MODES, LOGS, exporter, exporter_command, run_once, samples, wait_until

pytestmark = pytest.mark.slow

START = (
    "(APIServer pid=1) INFO 11-29 10:00:00 [api_utils.py:286] non-default args: {}\n"
    "INFO:     Application startup complete.\n"
)
DEATH = "(APIServer pid=1) ERROR 11-29 10:05:00 [async_llm.py:906] AsyncLLM output_handler failed.\n"
OOM = (
    "(Worker pid=9) ERROR 11-29 10:01:58 [x.py:1] "
    "RuntimeError: DefaultCPUAllocator: can't allocate memory: 1\n"
)


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(text)


def event(name: str) -> str:
    return f'vllm_log_events_total{{event="{name}"}}'


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "nothing to read: give --log-file PATH, --stdin, or --once FILE"),
        (
            ["--log-file", "x.log", "--passthrough"],
            "--passthrough copies standard input, so it needs --stdin",
        ),
        (
            ["--once", "{log}", "--log-file", "x.log"],
            "--once reads files and exits, so it cannot be combined with --log-file",
        ),
        (["--once", "{log}", "--state-file", "s.json"], "cannot be combined with --state-file"),
        (["--once", "/nonexistent/vllm.log"], "--once: no such file: /nonexistent/vllm.log"),
        (["--log-file", "x.log", "--listen", "9400"], "--listen expects HOST:PORT"),
        (["--log-file", "x.log", "--listen", "127.0.0.1:99999"], "--listen expects HOST:PORT"),
        (["--log-file", "x.log", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (
            ["--log-file", "x.log", "--max-line-bytes", "10"],
            "--max-line-bytes must be at least 1024",
        ),
        (
            ["--once", "{log}", "--patterns", "/nonexistent.yaml"],
            "cannot read patterns file /nonexistent.yaml",
        ),
    ],
)
def test_usage_errors_are_one_sentence_and_exit_2(args: list[str], message: str) -> None:
    log = str(LOGS / "vllm-0.32.0-cpu-normal.log")
    result = subprocess.run(
        exporter_command(*(a.replace("{log}", log) for a in args)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vllm-log-exporter: error: "), result.stderr
    assert message in lines[0]


def start_with_state(tmp_path: Path, state: Path) -> subprocess.CompletedProcess:
    """Start the exporter with a state file it must refuse at startup."""
    command = exporter_command(
        "--log-file",
        str(tmp_path / "x.log"),
        "--state-file",
        str(state),
        "--listen",
        f"127.0.0.1:{free_port()}",
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_a_corrupt_state_file_is_a_clear_error(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text("{not json")
    result = start_with_state(tmp_path, state)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"vllm-log-exporter: error: state file {state} is not valid JSON; move it away to start afresh"
    )


def test_port_in_use_exits_1(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            exporter_command("--log-file", str(tmp_path / "x.log"), "--listen", f"127.0.0.1:{port}"),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_once_on_an_empty_file_exports_every_series_at_zero(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    observed = samples(run_once(empty))
    assert {e: observed[event(e)] for e in EVENTS} == dict.fromkeys(EVENTS, 0)
    assert all(observed[f'vllm_log_last_event_timestamp_seconds{{event="{e}"}}'] == 0 for e in EVENTS)
    assert observed["vllm_log_lines_total"] == 0
    assert not any(k.startswith("vllm_log_requests_running") for k in observed)  # no stats line seen
    assert observed['vllm_log_exporter_build_info{version="0.1.0"}'] == 1


def test_serving_a_file_that_appears_later(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    with exporter("--log-file", str(log), port=free_port()) as running:
        metrics = running.wait_for('vllm_log_read_errors_total{reason="not_found"}', 1)
        assert metrics['vllm_log_files{state="missing"}'] == 1
        assert metrics[event("engine_dead")] == 0
        log.write_text(START)
        running.wait_for(event("startup_complete"), 1)
        append(log, DEATH)
        metrics = running.wait_for(event("engine_dead"), 1)
        assert metrics['vllm_log_files{state="reading"}'] == 1
        assert metrics["vllm_log_lines_total"] == 3
        assert metrics['vllm_log_last_event_timestamp_seconds{event="engine_dead"}'] > 0
        assert running.terminate() == 0


def test_permission_denied_by_file_mode_is_reported_and_retried(tmp_path: Path) -> None:
    """A real EACCES (as root, the exporter runs without the capabilities that bypass modes)."""
    log = tmp_path / "vllm.log"
    log.write_text(START)
    log.chmod(0)
    with exporter("--log-file", str(log), port=free_port(), prefix=HONOUR_FILE_MODES) as running:
        metrics = running.wait_for('vllm_log_read_errors_total{reason="permission_denied"}', 1)
        assert metrics['vllm_log_files{state="unreadable"}'] == 1
        assert metrics[event("startup_complete")] == 0
        log.chmod(0o644)  # fixed by the operator: the exporter retries and reads it
        metrics = running.wait_for(event("startup_complete"), 1)
        assert metrics['vllm_log_files{state="reading"}'] == 1
        assert running.terminate() == 0


def _save_points(state: Path) -> int | None:
    try:
        data = json.loads(state.read_text())
    except (OSError, ValueError):
        return None
    files = data.get("files", {})
    return next(iter(files.values()))["offset"] if files else None


def test_kill_9_and_restart_with_state_file(tmp_path: Path) -> None:
    """No incident lost, none counted twice: whatever the exporter had read when it was
    killed, the restarted one ends with the counts of reading the whole log once."""
    log, state = tmp_path / "vllm.log", tmp_path / "state.json"
    port = free_port()
    log.write_text(START + OOM)
    with exporter("--log-file", str(log), "--state-file", str(state), port=port) as first:
        first.wait_for(event("oom"), 1)
        wait_until(lambda: _save_points(state) == log.stat().st_size, what="the state file to catch up")
        # The rest of the same incident arrives, then the exporter is killed mid-incident.
        append(log, OOM.replace("10:01:58", "10:02:05") + "partial line without its end")
        wait_until(lambda: first.metrics()["vllm_log_lines_total"] == 4, what="the repeat to be read")
        first.kill9()
    append(log, " ... and its end\n" + OOM.replace("10:01:58", "10:02:10") + DEATH)
    with exporter("--log-file", str(log), "--state-file", str(state), port=port) as second:
        metrics = second.wait_for(event("engine_dead"), 1)
        assert metrics[event("oom")] == 1  # restored, and the repeats are the same incident
        assert metrics[event("startup_complete")] == 1
        assert metrics["vllm_log_lines_total"] == log.read_bytes().count(b"\n")
        assert metrics["vllm_log_bytes_total"] == log.stat().st_size
        assert second.terminate() == 0
    assert _save_points(state) == log.stat().st_size
    once = samples(run_once(log))
    assert {e: metrics[event(e)] for e in EVENTS} == {e: once[event(e)] for e in EVENTS}


def test_kill_9_at_any_point_of_a_growing_log_matches_reading_it_once(tmp_path: Path) -> None:
    """A writer keeps appending incidents; the exporter is killed twice on the way."""
    log, state = tmp_path / "vllm.log", tmp_path / "state.json"
    port = free_port()
    chunks = []
    for minute in range(12):
        ts = f"10:{minute + 10:02d}"
        chunks.append(
            START.replace("10:00:00", f"{ts}:00")
            + 'INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OK\n' * 200
            + OOM.replace("10:01:58", f"{ts}:30") * 3
            + 'INFO:     127.0.0.1:2 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error\n'
            + DEATH.replace("10:05:00", f"{ts}:31")
        )
    log.write_text("")
    written = 0
    for kill_after in (4, 8, 12):
        with exporter("--log-file", str(log), "--state-file", str(state), port=port) as running:
            while written < kill_after:
                append(log, chunks[written])
                written += 1
                running.wait_for("vllm_log_bytes_total", log.stat().st_size)
            if kill_after < 12:
                running.kill9()
            else:
                final = running.wait_for("vllm_log_bytes_total", log.stat().st_size)
                assert running.terminate() == 0
    once = samples(run_once(log))
    assert {e: final[event(e)] for e in EVENTS} == {e: once[event(e)] for e in EVENTS}
    assert (
        final[event("oom")] == 12
        and final[event("engine_dead")] == 12
        and final[event("request_error")] == 12
    )
    assert final["vllm_log_lines_total"] == once["vllm_log_lines_total"] == 12 * 207
    # The lifecycle too: twelve startups, each ending in a death, whatever the kills cut.
    assert final[event("startup_begin")] == once[event("startup_begin")] == 12
    states = {k: v for k, v in final.items() if k.startswith("vllm_log_server_state{")}
    assert states == {k: v for k, v in once.items() if k.startswith("vllm_log_server_state{")}
    assert states['vllm_log_server_state{state="dead"}'] == 1


def test_stdin_with_passthrough_copies_the_console_and_exits_after_linger() -> None:
    port = free_port()
    with exporter(
        "--stdin",
        "--passthrough",
        "--linger",
        "0.5",
        port=port,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as running:
        process = running.process
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write((START + OOM).encode())
        process.stdin.flush()
        metrics = running.wait_for(event("oom"), 1)
        assert metrics[event("startup_complete")] == 1
        process.stdin.write(DEATH.encode())
        process.stdin.close()
        assert process.wait(timeout=30) == 0
        assert process.stdout.read().decode() == START + OOM + DEATH


def test_sigterm_saves_state_and_exits_0(tmp_path: Path) -> None:
    log, state = tmp_path / "vllm.log", tmp_path / "state.json"
    log.write_text(START + DEATH)
    with exporter("--log-file", str(log), "--state-file", str(state), port=free_port()) as running:
        running.wait_for(event("engine_dead"), 1)
        assert running.terminate() == 0
    data = json.loads(state.read_text())
    assert data["version"] == 1
    assert data["counts"]["events"]["engine_dead"] == 1
    assert data["events"]["phase"] == "dead"
    point = data["files"][str(log)]
    assert point["offset"] == log.stat().st_size
    assert (point["device"], point["inode"]) == (os.stat(log).st_dev, os.stat(log).st_ino)


def test_an_unwritable_state_directory_fails_at_startup(tmp_path: Path) -> None:
    state = tmp_path / "no-such-dir" / "state.json"
    result = start_with_state(tmp_path, state)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"vllm-log-exporter: error: cannot write state file {state}: No such file or directory"
    )


def test_a_300_mib_line_without_newline_keeps_peak_rss_under_80_mb(tmp_path: Path) -> None:
    log = tmp_path / "huge.log"
    with open(log, "wb") as out:
        out.write(START.encode())
        out.truncate(len(START) + (300 << 20))  # a sparse 300 MiB "line" of NULs
        out.seek(0, os.SEEK_END)
        out.write(b"\n" + OOM.encode())
    # A small parent measures the child: RUSAGE_CHILDREN of pytest itself would include the
    # pages of the forked pytest process before the exec.
    probe = (
        "import resource, subprocess, sys; "
        "r = subprocess.run(sys.argv[1:], capture_output=True); "
        "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + '\\n'); "
        "sys.stdout.buffer.write(r.stdout); sys.exit(r.returncode)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, *exporter_command("--once", str(log))], capture_output=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    peak_kib, _, exposition = result.stdout.decode().partition("\n")
    assert int(peak_kib) * 1024 < 80e6
    observed = samples(exposition)
    assert observed["vllm_log_oversized_lines_total"] == 1
    assert observed["vllm_log_lines_total"] == 4
    assert observed[event("startup_complete")] == 1 and observed[event("oom")] == 1
    log.unlink()
