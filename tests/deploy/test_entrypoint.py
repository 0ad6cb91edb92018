"""stack/vllm_entrypoint.py with real child processes: rotation at line ends within the
size bounds, output copied exactly, signals forwarded, exit status passed on, the API key
handed over as an environment variable, and one clear sentence for every usage error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .stackfiles import REPO

pytestmark = pytest.mark.slow

ENTRYPOINT = REPO / "stack" / "vllm_entrypoint.py"


def wrapper(*args: str) -> list[str]:
    return [sys.executable, str(ENTRYPOINT), *args]


def child(code: str) -> list[str]:
    return ["--", sys.executable, "-c", code]


def log_files(log: Path) -> list[Path]:
    """The current file and its rotated copies, oldest first."""
    rotated = sorted(log.parent.glob(log.name + ".*"), key=lambda p: -int(p.suffix[1:]))
    return rotated + ([log] if log.exists() else [])


LINES = "import sys\nfor i in range({n}):\n    sys.stdout.write(f'line {{i:06d}} ' + 'x' * ({width} - 12) + '\\n')\n"


def test_rotation_at_line_ends_within_bounds(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "vllm.log"
    n, width, max_bytes, backups = 2000, 60, 4096, 3
    result = subprocess.run(
        wrapper(
            f"--log-file={log}",
            f"--max-bytes={max_bytes}",
            f"--backups={backups}",
            *child(LINES.format(n=n, width=width)),
        ),
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    expected = b"".join(f"line {i:06d} {'x' * (width - 12)}\n".encode() for i in range(n))
    assert result.stdout == expected  # the console copy is exact and complete
    files = log_files(log)
    assert [f.name for f in files] == ["vllm.log.3", "vllm.log.2", "vllm.log.1", "vllm.log"]
    for path in files:
        data = path.read_bytes()
        assert data.endswith(b"\n"), f"{path.name} ends inside a line"
        assert len(data) < max_bytes + width, (path.name, len(data))  # closed at the first line end
        assert os.stat(path).st_mode & 0o777 == 0o644
    for path in files[:-1]:
        assert len(path.read_bytes()) >= max_bytes  # rotated only once full
    kept = b"".join(p.read_bytes() for p in files)
    assert expected.endswith(kept)  # the newest lines, in order, nothing lost in between
    assert len(kept) > backups * max_bytes


def test_a_line_longer_than_the_limit_is_cut_at_twice_the_size(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    code = "import sys\nfor _ in range(40):\n    sys.stdout.write('y' * 1000)\n    sys.stdout.flush()\n"
    result = subprocess.run(
        wrapper(f"--log-file={log}", "--max-bytes=4096", "--backups=2", *child(code)),
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"y" * 40_000
    # 40,000 bytes without a newline: cut every 8,192 bytes, the two newest cuts kept.
    assert [len(p.read_bytes()) for p in log_files(log)] == [8192, 8192, 40_000 - 4 * 8192]


def test_an_existing_full_log_is_rotated_before_new_output(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_bytes(b"old line\n" * 500)  # 4,500 bytes: over the limit already
    result = subprocess.run(
        wrapper(f"--log-file={log}", "--max-bytes=4096", *child("print('new line')")),
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "vllm.log.1").read_bytes() == b"old line\n" * 500
    assert log.read_bytes() == b"new line\n"


def test_an_existing_log_is_appended_to(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_bytes(b"old line\n")
    subprocess.run(wrapper(f"--log-file={log}", *child("print('new line')")), check=True, timeout=60)
    assert log.read_bytes() == b"old line\nnew line\n"
    assert not (tmp_path / "vllm.log.1").exists()


SIGNAL_CHILD = """
import signal, sys, time
def handler(signum, frame):
    print(f"got {signum}", flush=True)
    sys.exit(0)
for name in ("SIGTERM", "SIGINT", "SIGHUP"):
    signal.signal(getattr(signal, name), handler)
print("ready", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.1)
sys.exit(7)
"""
# Short sleeps: a signal landing between Python's last check and the start of one long sleep
# would wait for that sleep's end (CPython checks only after the syscall is interrupted).


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_signals_reach_the_child(tmp_path: Path, name: str) -> None:
    log = tmp_path / "vllm.log"
    process = subprocess.Popen(
        wrapper(f"--log-file={log}", *child(SIGNAL_CHILD)), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n"
        started = time.monotonic()
        process.send_signal(getattr(signal, name))
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    number = int(getattr(signal, name))
    assert process.returncode == 0, err  # the child's own status: it handled the signal
    assert out == f"got {number}\n".encode()
    assert time.monotonic() - started < 10  # not the child's 60 s sleep
    assert log.read_bytes() == f"ready\ngot {number}\n".encode()


def test_the_exit_status_is_the_childs(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    exited = subprocess.run(wrapper(f"--log-file={log}", *child("raise SystemExit(3)")), timeout=60)
    assert exited.returncode == 3
    killed = subprocess.run(
        wrapper(f"--log-file={log}", *child("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")),
        timeout=60,
    )
    assert killed.returncode == 128 + signal.SIGKILL


def test_the_api_key_reaches_the_child_as_an_environment_variable(tmp_path: Path) -> None:
    key = tmp_path / "vllm-api-key"
    key.write_text("  s3cret-value\n")
    seen = tmp_path / "seen"
    code = f"import os, sys; open({str(seen)!r}, 'w').write(os.environ['VLLM_API_KEY'] + '|' + ' '.join(sys.argv))"
    result = subprocess.run(
        wrapper(f"--log-file={tmp_path / 'vllm.log'}", f"--api-key-file={key}", *child(code)),
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    value, argv = seen.read_text().split("|", 1)
    assert value == "s3cret-value"  # surrounding whitespace and the newline stripped
    assert "s3cret" not in argv and b"s3cret" not in result.stdout + result.stderr


def test_extra_args_are_split_and_appended(tmp_path: Path) -> None:
    code = "import sys; print(sys.argv[1:])"
    result = subprocess.run(
        wrapper(
            f"--log-file={tmp_path / 'vllm.log'}",
            "--extra-args=--max-model-len 4096 --served-model-name 'a b'",
            *child(code),
            "--first",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(["--first", "--max-model-len", "4096", "--served-model-name", "a b"])


def test_an_unwritable_log_keeps_vllm_running(tmp_path: Path) -> None:
    """The log's folder cannot exist (a file is in the way): one warning, output on stdout."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = subprocess.run(
        wrapper(f"--log-file={blocker / 'vllm.log'}", *child("print('hello'); print('again')")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    assert result.stdout == "hello\nagain\n"
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 1 and "still goes to stdout" in warnings[0], warnings


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--log-file=/tmp/x.log"], "no command given"),
        (["--log-file=/tmp/x.log", "--max-bytes=100", "--", "true"], "--max-bytes must be at least 4096"),
        (["--log-file=/tmp/x.log", "--backups=0", "--", "true"], "--backups must be at least 1"),
        (["--log-file=/tmp/x.log", "--extra-args=--name 'unclosed", "--", "true"], "check its quotes"),
        (["--", "true"], "--log-file"),
        (
            ["--log-file=/tmp/x.log", "--api-key-file=/nonexistent/key", "--", "true"],
            "cannot read the API key",
        ),
    ],
)
def test_usage_errors_are_one_sentence_and_status_2(args: list[str], expected: str) -> None:
    result = subprocess.run(wrapper(*args), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vllm-entrypoint: ") and expected in lines[0], lines


def test_an_empty_api_key_file_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("\n")
    result = subprocess.run(
        wrapper(f"--log-file={tmp_path / 'l'}", f"--api-key-file={key}", "--", "true"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "is empty" in result.stderr and "make secrets" in result.stderr


def test_a_command_that_cannot_start(tmp_path: Path) -> None:
    result = subprocess.run(
        wrapper(f"--log-file={tmp_path / 'l'}", "--", str(tmp_path / "no-such-vllm")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 127
    assert (
        result.stderr.strip()
        == f"vllm-entrypoint: cannot start {tmp_path / 'no-such-vllm'}: No such file or directory"
    )


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def _as_pid_1(command: list[str]) -> tuple[subprocess.Popen, int]:
    """Run command as PID 1 of a new PID namespace, as a container without an init does.
    Returns the unshare process and the host pid of the namespace's PID 1."""
    process = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == b"ready\n"
    (init,) = _children(process.pid)
    nspid = next(
        line for line in Path(f"/proc/{init}/status").read_text().splitlines() if line.startswith("NSpid:")
    )
    assert nspid.split()[-1] == "1", nspid
    return process, init


def test_as_pid_1_sigterm_still_reaches_the_child(tmp_path: Path) -> None:
    """Kubernetes runs the wrapper as PID 1 (no init): the kernel drops signals a PID 1 has
    no handler for, so the wrapper must handle SIGTERM itself."""
    process, init = _as_pid_1(wrapper(f"--log-file={tmp_path / 'vllm.log'}", *child(SIGNAL_CHILD)))
    try:
        os.kill(init, signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    assert out == b"got 15\n", err
    assert process.returncode == 0


def test_as_pid_1_the_old_shell_pipeline_ignores_sigterm(tmp_path: Path) -> None:
    """Why the wrapper exists: the former `sh -c "exec vllm ... | tee -a vllm.log"` as PID 1
    never passes SIGTERM on; Docker had to kill vLLM after the grace period."""
    log = tmp_path / "vllm.log"
    script = f"exec {sys.executable} -c '{SIGNAL_CHILD}' 2>&1 | tee -a {log}"
    process, init = _as_pid_1(["/bin/sh", "-c", script])
    try:
        os.kill(init, signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=3)
        assert "got" not in log.read_text()
    finally:
        process.kill()  # --kill-child takes the namespace down with it
        process.communicate(timeout=10)


def test_a_process_left_holding_the_output_does_not_keep_the_wrapper_alive(tmp_path: Path) -> None:
    """vLLM's workers can outlive it for a moment with its stdout open: the wrapper copies
    what they write for a few seconds, then exits with vLLM's status instead of waiting."""
    worker = "import os, time; print('worker', os.getpid(), flush=True); time.sleep(60)"
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {worker!r}])\n"
        "print('main done', flush=True)\n"
    )
    started = time.monotonic()
    result = subprocess.run(
        wrapper(f"--log-file={tmp_path / 'vllm.log'}", *child(code)), capture_output=True, timeout=60
    )
    elapsed = time.monotonic() - started
    lines = sorted(result.stdout.decode().splitlines())
    pid = int(lines[-1].split()[1])
    try:
        assert result.returncode == 0, result.stderr
        assert lines[0] == "main done" and lines[1].startswith("worker ")
        assert elapsed < 20, elapsed  # DRAIN_SECONDS (5) after the child's exit, not the worker's 60 s
        os.kill(pid, 0)  # the worker was still running when the wrapper left
    finally:
        os.kill(pid, signal.SIGKILL)
