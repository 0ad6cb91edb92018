"""Following log files (and a pipe) the way mtail and promtail do, through rotation, truncation,
deletion and missing or unreadable files (docs/exporters.md). `committed()` is the offset the state
file stores: the first byte not yet part of a counted line.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .counts import FILE_STATES, IO_ERROR, MISSING, NOT_FOUND, PERMISSION_DENIED, READING, UNREADABLE
from .pipeline import Pipeline

READ_SIZE = 1 << 20
"""Bytes per read: large blocks make the scanner's fast path pay off."""
POLL_BUDGET = 8 << 20
"""Bytes per source per poll, so one huge file cannot starve the others or the state file."""


@dataclass
class Resume:
    """Where a previous run stopped in one file (from the state file)."""

    device: int
    inode: int
    offset: int
    skipping: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resume:
        return cls(int(data["device"]), int(data["inode"]), int(data["offset"]), bool(data.get("skipping")))


Opener = Callable[[Path], int]


def open_readonly(path: Path) -> int:
    # O_NONBLOCK: opening a FIFO must not hang the exporter (it is then refused: pipes go
    # through --stdin). It changes nothing for regular files.
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))


class FileSource:
    """One --log-file path, followed across rotation, truncation and deletion."""

    def __init__(
        self,
        path: Path,
        pipeline: Pipeline,
        *,
        resume: Resume | None = None,
        start_at_end: bool = False,
        read_size: int = READ_SIZE,
        opener: Opener = open_readonly,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.pipeline = pipeline
        self.counts = pipeline.counts
        self.assembler = pipeline.new_source()
        self.read_size = read_size
        self.start_at_end = start_at_end
        self.resume = resume
        self.opener = opener
        self.warn = warn or _warn_stderr
        self.fd: int | None = None
        self.identity: tuple[int, int] | None = None  # (device, inode) of the file last open
        self.deleted = False  # the file last open was unlinked: a file at the path is new
        self.offset = 0
        self.status = MISSING  # one of FILE_STATES
        self.error: str | None = None  # reason of the current error episode
        self.first_attempt = True  # --from-end only skips what a file held at startup

    # -- public --------------------------------------------------------------------------

    def poll(self, budget: int = POLL_BUDGET) -> int:
        """Read what is available (up to budget bytes); returns the bytes read."""
        if self.fd is None and not self._open():
            return 0
        done = self._read(budget)
        if done < budget and self.fd is not None:
            done += self._check_replaced()
        return done

    def committed(self) -> dict[str, Any] | None:
        """Resume point for the state file, or None when no file is open."""
        if self.identity is None or self.fd is None:
            return None
        return {
            "device": self.identity[0],
            "inode": self.identity[1],
            "offset": self.offset - self.assembler.pending_bytes,
            "skipping": self.assembler.skipping,
        }

    def unread_bytes(self) -> int:
        if self.fd is None:
            return 0
        try:
            return max(0, os.fstat(self.fd).st_size - self.offset)
        except OSError:
            return 0

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    # -- reading -------------------------------------------------------------------------

    def _read(self, budget: int) -> int:
        done = 0
        while done < budget and self.fd is not None:
            try:
                data = os.read(self.fd, min(self.read_size, budget - done))
            except OSError as exc:
                self._report(IO_ERROR, f"cannot read {self.path}: {exc.strerror}; will retry")
                self.pipeline.flush(self.assembler)
                self.close()
                return done
            if not data:
                break
            self.offset += len(data)
            done += len(data)
            self.pipeline.feed(self.assembler, data)
        return done

    def _check_replaced(self) -> int:
        """At EOF: has the path been rotated, truncated or deleted?"""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            self._drain_and_close()  # deleted: what was written before is still ours
            self.deleted, self.status = True, MISSING
            return 0
        except OSError:
            return 0  # e.g. the directory became unreadable; keep the open descriptor
        if (now.st_dev, now.st_ino) != self.identity:
            self._drain_and_close()
            return self._read(POLL_BUDGET) if self._open() else 0
        if now.st_size < self.offset:
            assert self.fd is not None
            self.pipeline.flush(self.assembler)
            os.lseek(self.fd, 0, os.SEEK_SET)
            self.offset = 0
            with self.pipeline.lock:
                self.counts.truncations += 1
            return self._read(POLL_BUDGET)
        return 0

    def _drain_and_close(self) -> None:
        while self.fd is not None and self._read(POLL_BUDGET) == POLL_BUDGET:
            pass
        self.pipeline.flush(self.assembler)
        self.close()

    # -- opening -------------------------------------------------------------------------

    def _open(self) -> bool:
        first_attempt, self.first_attempt = self.first_attempt, False
        try:
            fd = self.opener(self.path)
        except FileNotFoundError:
            self._report(NOT_FOUND, f"{self.path} does not exist (yet); will retry", MISSING)
            return False
        except PermissionError:
            self._report(PERMISSION_DENIED, f"permission denied reading {self.path}; will retry")
            return False
        except OSError as exc:
            self._report(IO_ERROR, f"cannot open {self.path}: {exc.strerror}; will retry")
            return False
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            self._report(IO_ERROR, f"{self.path} is not a regular file; will retry")
            return False
        identity = (info.st_dev, info.st_ino)
        offset, skipping = self._start_offset(identity, info.st_size, first_attempt)
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        self.fd, self.identity, self.offset, self.deleted = fd, identity, offset, False
        self.assembler.reset(skipping=skipping)
        if self.error is not None:
            self.warn(f"reading {self.path} again")
        self.error, self.status = None, READING
        return True

    def _start_offset(self, identity: tuple[int, int], size: int, first_attempt: bool) -> tuple[int, bool]:
        """Where to start reading a file just opened at the path, and whether that is
        inside an oversized line."""
        if self.resume is not None:  # first open after a restart with --state-file
            saved, self.resume = self.resume, None
            if identity == (saved.device, saved.inode):
                if size >= saved.offset:
                    return saved.offset, saved.skipping
                self._count("truncations")  # truncated while we were down
                return 0, False
            self._drain_rotated(saved)  # rotated while we were down
            self._count("rotations")
            return 0, False
        if self.identity is None:  # first file at the path: all of it, or (--from-end, when it
            # already existed at startup) only what comes next; a file created later is all new
            return (size if self.start_at_end and first_attempt else 0), False
        if self.deleted or identity != self.identity:  # a new file at the path
            self._count("rotations")
            return 0, False
        if size < self.offset:  # the same file, reopened after an error, and truncated
            self._count("truncations")
            return 0, False
        return self.offset, False  # the same file, reopened after a read error

    def _drain_rotated(self, saved: Resume) -> None:
        """Read the rest of the file we stopped in, if it was renamed within the directory."""
        try:
            entries = list(os.scandir(self.path.parent))
        except OSError:
            return
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) != (
                saved.device,
                saved.inode,
            ) or info.st_size < saved.offset:
                continue
            try:
                fd = self.opener(Path(entry.path))
            except OSError:
                return
            try:
                os.lseek(fd, saved.offset, os.SEEK_SET)
                self.assembler.reset(skipping=saved.skipping)
                while data := os.read(fd, self.read_size):
                    self.pipeline.feed(self.assembler, data)
                self.pipeline.flush(self.assembler)
            finally:
                os.close(fd)
            return

    def _count(self, name: str) -> None:
        with self.pipeline.lock:
            setattr(self.counts, name, getattr(self.counts, name) + 1)

    def _report(self, reason: str, message: str, status: str = UNREADABLE) -> None:
        """Count an error once per episode (a new reason starts a new episode)."""
        self.status = status
        if self.error == reason:
            return
        self.error = reason
        with self.pipeline.lock:
            self.counts.read_errors[reason] += 1
        self.warn(message)


class StreamSource:
    """A pipe (normally stdin), optionally copied to an output stream as it is read."""

    def __init__(
        self,
        fd: int,
        pipeline: Pipeline,
        *,
        passthrough_fd: int | None = None,
        read_size: int = READ_SIZE,
    ) -> None:
        self.fd: int | None = fd
        self.pipeline = pipeline
        self.assembler = pipeline.new_source()
        self.passthrough_fd = passthrough_fd
        self.read_size = read_size
        self.closed = False

    def poll(self, budget: int = POLL_BUDGET) -> int:
        done = 0
        while self.fd is not None and done < budget:
            ready, _, _ = select.select([self.fd], [], [], 0)
            if not ready:
                break
            try:
                data = os.read(self.fd, self.read_size)
            except BlockingIOError:
                break
            except OSError as exc:
                with self.pipeline.lock:
                    self.pipeline.counts.read_errors[IO_ERROR] += 1
                _warn_stderr(f"cannot read standard input: {exc.strerror}")
                data = b""
            if not data:
                self.pipeline.flush(self.assembler)
                self.fd, self.closed = None, True
                break
            self._copy(data)
            done += len(data)
            self.pipeline.feed(self.assembler, data)
        return done

    def _copy(self, data: bytes) -> None:
        if self.passthrough_fd is None:
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.passthrough_fd, view) :]
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                _warn_stderr(f"cannot copy input to standard output: {exc.strerror}")
            self.passthrough_fd = None  # the console went away; keep exporting

    def committed(self) -> None:
        return None

    def unread_bytes(self) -> int:
        return 0


class Tailer:
    """Polls every source once per call and keeps the live gauges up to date."""

    def __init__(
        self, pipeline: Pipeline, files: Sequence[FileSource], stream: StreamSource | None = None
    ) -> None:
        self.pipeline = pipeline
        self.files = list(files)
        self.stream = stream

    def poll(self) -> int:
        done = sum(source.poll() for source in self.files)
        if self.stream is not None:
            done += self.stream.poll()
        self.pipeline.tick()
        self.update_gauges()
        return done

    def update_gauges(self) -> None:
        unread = sum(source.unread_bytes() for source in self.files)
        states = dict.fromkeys(FILE_STATES, 0)
        for source in self.files:
            states[source.status] += 1
        with self.pipeline.lock:
            self.pipeline.counts.unread_bytes = unread
            self.pipeline.counts.files.update(states)

    def pending_bytes(self) -> int:
        """Bytes of partial lines held by the file sources (not committed yet)."""
        return sum(source.assembler.pending_bytes for source in self.files if source.fd is not None)

    def resume_points(self) -> dict[str, dict[str, Any]]:
        points = {}
        for source in self.files:
            point = source.committed()
            if point is not None:
                points[str(source.path)] = point
        return points

    def close(self) -> None:
        for source in self.files:
            source.close()


def _warn_stderr(message: str, stream: TextIO | None = None) -> None:
    print(f"vllm-log-exporter: {message}", file=stream or sys.stderr, flush=True)
