"""Bytes to lines: bounded line assembly and per-line cleaning. LineAssembler keeps a chunk's
unterminated tail until its newline, at most `max_line_bytes` of it: a longer line is counted as
oversized and skipped to its newline, so memory stays bounded whatever the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MAX_LINE_BYTES = 1 << 20
"""1 MiB: well above vLLM's longest real lines (config dumps, crash dumps of a few KB)."""

# ANSI colour/style sequences: vLLM 0.10-0.14 colour the `(Name pid=N)` prefix even in
# files, and 0.14+ colour level and timestamp on a TTY (`docker run -t`).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class Assembled:
    """Complete lines produced by one feed() call."""

    region: bytes
    """Zero or more whole lines, each ending in b"\\n" (empty when no line completed)."""
    oversized: int = 0
    """Lines longer than the limit that were dropped (each also counts as one line)."""


class LineAssembler:
    """Turns arbitrary chunks into whole lines; one per source (file or pipe)."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.max_line_bytes = max_line_bytes
        self._carry = b""
        self._skipping = False  # inside an oversized line: drop bytes up to its newline

    @property
    def pending_bytes(self) -> int:
        """Bytes held for an unterminated line (these are re-read after a restart)."""
        return len(self._carry)

    @property
    def skipping(self) -> bool:
        """Inside an oversized line (the state file keeps this across restarts)."""
        return self._skipping

    def reset(self, *, skipping: bool = False) -> None:
        """Forget the partial line (the source was reopened from a known offset)."""
        self._carry, self._skipping = b"", skipping

    def feed(self, data: bytes) -> Assembled:
        out = Assembled(b"")
        parts = []
        # Pieces no longer than the limit: a line that ends inside one piece is then
        # short enough by construction, and only lines crossing pieces need checking.
        step = self.max_line_bytes
        for start in range(0, len(data), step):
            region, oversized = self._feed_piece(data[start : start + step])
            out.oversized += oversized
            if region:
                parts.append(region)
        out.region = b"".join(parts) if len(parts) != 1 else parts[0]
        return out

    def _feed_piece(self, piece: bytes) -> tuple[bytes, int]:
        oversized = 0
        if self._skipping:
            newline = piece.find(b"\n")
            if newline < 0:
                return b"", 0
            piece = piece[newline + 1 :]
            self._skipping = False
        last_newline = piece.rfind(b"\n")
        if last_newline < 0:
            if len(self._carry) + len(piece) > self.max_line_bytes:
                self._carry, self._skipping = b"", True
                return b"", 1
            self._carry += piece
            return b"", 0
        head, tail = piece[: last_newline + 1], piece[last_newline + 1 :]
        if self._carry:
            first_end = head.find(b"\n")
            if len(self._carry) + first_end > self.max_line_bytes:
                head, oversized = head[first_end + 1 :], 1
            else:
                head = self._carry + head
        self._carry = tail
        return head, oversized

    def flush(self) -> Assembled:
        """Emit the unterminated last line (source closed, truncated or rotated)."""
        carry, skipping = self._carry, self._skipping
        self.reset()
        if carry and not skipping:
            return Assembled(carry + b"\n")
        return Assembled(b"")


def clean_line(raw: bytes) -> str:
    """Decoded text of one line: invalid UTF-8 replaced, NULs, ANSI codes and CR removed."""
    text = raw.decode("utf-8", "replace")
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text.rstrip("\r\n")


UTF8_CHECK_BYTES = 64 * 1024
"""Lines are checked for valid UTF-8 in pieces of about this size: a piece of ASCII (nearly
all of a log) costs one C-speed test, and only the rare pieces holding other bytes (vLLM's
logo, progress bars, bad bytes) are decoded, so the cost does not depend on where in the
log those lines stand."""


def count_undecodable(region: bytes) -> int:
    """Lines of region that are not valid UTF-8 (region: whole lines, as the assembler
    emits them)."""
    if region.isascii():
        return 0
    bad = 0
    size = len(region)
    begin = 0
    while begin < size:
        end = region.find(b"\n", min(begin + UTF8_CHECK_BYTES, size) - 1)
        end = size if end < 0 else end + 1
        piece = region[begin:end]
        begin = end
        if piece.isascii():
            continue
        try:
            piece.decode("utf-8")
            continue
        except UnicodeDecodeError:
            pass
        for line in piece.split(b"\n"):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                bad += 1
    return bad
