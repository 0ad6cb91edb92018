"""The fast path: finds, in a block of whole lines, the few candidate lines worth parsing, with
C-speed bytes methods rather than Python per line (exporters/README.md, "How it stays fast and
small"). Candidates come back in file order, because the event rules depend on order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .patterns import STATS_ANCHOR, PatternSet

SUB_BLOCK_BYTES = 4 * 1024

_ACCESS_MARK = b" HTTP/1."  # in every uvicorn access line (h11 speaks HTTP/1.0 and 1.1)
_PREEMPTIONS = b"Preemptions: "
_SERVER_ERROR = b'" 5'
_ENGINE_PREFIX = re.compile(rb"(?:Engine \d+|\d+ Engines Aggregated): $")


class Scanner:
    def __init__(self, patterns: PatternSet) -> None:
        anchors = [a.encode("utf-8") for a in patterns.anchors]
        self._stats = STATS_ANCHOR.encode("utf-8")
        # Stats lines are handled by the rfind below, not by their anchor.
        self._anchors = tuple(a for a in anchors if a != self._stats) + (_PREEMPTIONS,)
        # Anchors that can occur in an access or stats line: searched in every sub-block.
        self._clean_anchors = tuple(a for a in (_SERVER_ERROR, _PREEMPTIONS) if a in self._anchors)
        # The rest: searched only in the other lines of a dirty sub-block.
        self._other_anchors = tuple(a for a in self._anchors if a not in self._clean_anchors)

    def candidates(self, region: bytes) -> Iterator[bytes]:
        """Candidate lines of region (whole lines, each ending in b"\\n"), in order."""
        starts: set[int] = set()
        for anchor in self._clean_anchors:
            self._add_lines_holding(region, anchor, starts)
        size = len(region)
        mark, stats, count = _ACCESS_MARK, self._stats, region.count
        begin = 0
        while begin < size:
            end = region.find(b"\n", min(begin + SUB_BLOCK_BYTES, size) - 1)
            end = size if end < 0 else end + 1
            if count(b"\n", begin, end) != count(mark, begin, end) + count(stats, begin, end):
                self._scan_other_lines(region, begin, end, starts)
            begin = end
        self._add_last_stats_lines(region, starts)
        for start in sorted(starts):
            stop = region.find(b"\n", start)
            yield region[start : stop if stop >= 0 else size]

    @staticmethod
    def _add_lines_holding(region: bytes, anchor: bytes, starts: set[int]) -> None:
        at = region.find(anchor)
        while at >= 0:
            starts.add(region.rfind(b"\n", 0, at) + 1)
            stop = region.find(b"\n", at)
            if stop < 0:
                break
            at = region.find(anchor, stop)

    def _scan_other_lines(self, region: bytes, begin: int, end: int, starts: set[int]) -> None:
        mark, stats, anchors = _ACCESS_MARK, self._stats, self._other_anchors
        others = [line for line in region[begin:end].split(b"\n") if mark not in line and stats not in line]
        at = begin  # a line start: where the next other line is looked for
        for line in others:
            for anchor in anchors:
                if anchor in line:
                    break
            else:
                continue
            at = _line_start(region, line, at, end)
            starts.add(at)
            at += len(line) + 1

    def _add_last_stats_lines(self, region: bytes, starts: set[int]) -> None:
        anchor = self._stats
        total = region.count(anchor)
        if not total:
            return
        at = region.rfind(anchor)
        line_start = region.rfind(b"\n", 0, at) + 1
        starts.add(line_start)
        if total == 1:
            return
        # Several stats lines: enough when they all belong to the same engine as the last.
        prefix = _ENGINE_PREFIX.search(region, max(line_start, at - 40), at)
        if prefix:
            same_engine = region.count(prefix.group(0) + anchor)
        else:  # un-prefixed (V0, V1 0.7): fine if no line in the block has a prefix
            same_engine = total if region.count(b": " + anchor) == 0 else -1
        if same_engine == total:
            return
        at = region.find(anchor)
        while at >= 0:  # several engines (data parallel): every stats line is a candidate
            starts.add(region.rfind(b"\n", 0, at) + 1)
            at = region.find(anchor, at + len(anchor))


def _line_start(region: bytes, line: bytes, at: int, end: int) -> int:
    """Start of the first line equal to `line` at or after the line start `at`. The other lines
    are visited in order, and a line equal to this one is itself an other line holding the same
    anchor, so the first match is the line wanted."""
    if region.startswith(line + b"\n", at):
        return at
    # The line does not start at `at`, so a newline precedes it, at or after at - 1.
    return region.find(b"\n" + line + b"\n", max(at - 1, 0), end) + 1
