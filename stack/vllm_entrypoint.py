#!/usr/bin/env python3
"""Run vLLM as a child process: its output goes to stdout and to a size-rotated log file.
Signals reach vLLM, its exit status is ours; docs/scripts.md says why a shell and tee do not do.
"""

from __future__ import annotations

import argparse
import errno
import os
import select
import shlex
import signal
import subprocess
import sys
import time

FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
READ_SIZE = 1 << 16
MIN_MAX_BYTES = 4096
# After vLLM exits, its worker processes may hold the pipe a moment longer; what they
# write within this time is still copied, then the wrapper exits.
DRAIN_SECONDS = 5.0
PROG = "vllm-entrypoint"


class UsageError(Exception):
    """A bad command line: reported as one sentence, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message)


def warn(message: str) -> None:
    try:
        os.write(2, f"{PROG}: {message}\n".encode())
    except OSError:
        pass


class RotatingLog:
    """An append-only log file rotated by size, at line ends, by rename."""

    def __init__(self, path: str, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.fd: int | None = None
        self.size = 0
        self.at_line_end = True  # the file is empty or ends with a newline
        self.failing = False  # an error was reported; the next one is after a success
        self._open()

    def _open(self) -> None:
        try:
            directory = os.path.dirname(self.path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            # 0644: the log exporter reads it as another user. Read-write: pread of the last byte.
            self.fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self.size = os.fstat(self.fd).st_size
            self.at_line_end = self.size == 0 or os.pread(self.fd, 1, self.size - 1) == b"\n"
        except OSError as exc:
            self.close()
            self._failed(f"cannot open {self.path}: {exc.strerror}; vLLM's output still goes to stdout")

    def write(self, data: bytes) -> None:
        while data:
            if self.fd is None:
                self._open()
                if self.fd is None:
                    return
            full = self.size >= self.max_bytes and self.at_line_end
            if full or self.size >= 2 * self.max_bytes:  # the latter: a line longer than the limit
                if not self.rotate():
                    self._write(data)
                    return
                continue
            if self.size + len(data) < self.max_bytes:
                self._write(data)
                return
            # Up to the first line end at or after the limit, or, inside a line that
            # outgrows twice the limit, up to that size.
            room = 2 * self.max_bytes - self.size
            end = data.find(b"\n", max(0, self.max_bytes - self.size - 1))
            cut = end + 1 if 0 <= end < room else min(len(data), room)
            self._write(data[:cut])
            data = data[cut:]

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                assert self.fd is not None
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            self._failed(f"cannot write {self.path}: {exc.strerror}; vLLM's output still goes to stdout")
        else:
            self.failing = False
        finally:
            written = len(data) - len(view)
            self.size += written
            if written:
                self.at_line_end = data[written - 1 : written] == b"\n"

    def rotate(self) -> bool:
        """PATH -> PATH.1 -> ... -> PATH.<backups> (dropped); False if a rename failed."""
        self.close()
        done = True
        try:
            for index in range(self.backups - 1, 0, -1):
                older = f"{self.path}.{index}"
                if os.path.exists(older):
                    os.replace(older, f"{self.path}.{index + 1}")
            os.replace(self.path, f"{self.path}.1")
        except FileNotFoundError:
            pass  # someone removed the file: nothing to keep
        except OSError as exc:
            self._failed(f"cannot rotate {self.path}: {exc.strerror}; the file grows past --max-bytes")
            done = False
        self._open()
        return done

    def _failed(self, message: str) -> None:
        if not self.failing:
            warn(message)
        self.failing = True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--log-file", required=True, metavar="PATH", help="the file vLLM's output is copied to"
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=10 << 20,
        metavar="N",
        help="rotate the log file once it holds N bytes (default 10 MiB)",
    )
    parser.add_argument(
        "--backups",
        type=int,
        default=5,
        metavar="N",
        help="rotated files to keep: PATH.1 ... PATH.N (default 5)",
    )
    parser.add_argument(
        "--api-key-file", metavar="PATH", help="file holding vLLM's API key, passed to vLLM as VLLM_API_KEY"
    )
    parser.add_argument(
        "--extra-args",
        default="",
        metavar="ARGS",
        help="more arguments for the command, split like a shell would (for VLLM_ARGS)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("no command given: put the vLLM command line after `--`")
    try:
        args.command = command + shlex.split(args.extra_args)
    except ValueError as exc:
        raise UsageError(f"--extra-args is not a valid argument list ({exc}); check its quotes") from None
    if args.max_bytes < MIN_MAX_BYTES:
        raise UsageError(f"--max-bytes must be at least {MIN_MAX_BYTES}, not {args.max_bytes}")
    if args.backups < 1:
        raise UsageError(f"--backups must be at least 1, not {args.backups}")
    return args


def read_api_key(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            key = handle.read().strip()
    except OSError as exc:
        raise UsageError(
            f"cannot read the API key file {path}: {exc.strerror}; run `make secrets` or mount the secret"
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"the API key file {path} is not UTF-8 text") from None
    if not key:
        raise UsageError(f"the API key file {path} is empty; put the key in it or run `make secrets`")
    return key


def write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            warn(f"cannot copy vLLM's output to stdout: {exc.strerror}")
        return False
    return True


def run(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    if args.api_key_file:
        env["VLLM_API_KEY"] = read_api_key(args.api_key_file)
    log = RotatingLog(args.log_file, args.max_bytes, args.backups)

    pending: list[int] = []
    child: subprocess.Popen | None = None

    def forward(signum: int, _frame: object) -> None:
        if child is None:
            pending.append(signum)
            return
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for name in FORWARDED:
        signal.signal(getattr(signal, name), forward)
    try:
        # Its own session: a terminal's Ctrl-C reaches vLLM once, through this wrapper.
        child = subprocess.Popen(
            args.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    except OSError as exc:
        warn(f"cannot start {args.command[0]}: {exc.strerror}")
        log.close()
        return 127
    for signum in pending:
        child.send_signal(signum)

    assert child.stdout is not None
    pipe = child.stdout.fileno()
    stdout_open = True
    drain_until: float | None = None
    while True:
        if drain_until is None and child.poll() is not None:
            drain_until = time.monotonic() + DRAIN_SECONDS
        if drain_until is not None and time.monotonic() > drain_until:
            break
        ready, _, _ = select.select([pipe], [], [], 0.5)
        if not ready:
            continue
        data = os.read(pipe, READ_SIZE)
        if not data:
            break  # every writer closed the pipe
        # The file first: the log exporter reads it even while a slow console blocks us.
        log.write(data)
        if stdout_open:
            stdout_open = write_all(1, data)
    log.close()
    code = child.wait()
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parse(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        warn(str(exc))
        return 2


if __name__ == "__main__":
    sys.exit(main())
