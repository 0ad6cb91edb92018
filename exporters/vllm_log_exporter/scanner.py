"""The fast path: find, in a block of whole lines, the few lines worth parsing.

A busy vLLM log is nearly all uvicorn access lines and periodic stats lines. Looking at
each line in Python would cap throughput far below what a sidecar should cost, so the
scanner works on whole blocks with C-speed bytes methods and hands only *candidate*
lines to the per-line code:

* Each block is cut into sub-blocks of about 64 KiB. If a sub-block's lines are all access
  or stats lines (three `bytes.count` calls tell), only the anchors that can occur in such
  lines are searched: `" 5` (a 5xx response) and `Preemptions: `.
* Otherwise every pattern anchor (a literal each pattern's regex requires) is searched
  with `bytes.find`; a line holding any anchor is a candidate.
* Stats lines only update gauges, so only the last one per engine matters: one `rfind`
  finds it. Lines with `Preemptions:` are always candidates (their counts add up).

Candidates come back in file order, because the event rules depend on order.

The clean-sub-block test counts marks, not lines: a failure line that happened to contain
` HTTP/1.` in a sub-block whose every other line is an access or stats line would only be
searched for the two clean anchors. vLLM's failure lines do not contain that text, and a
failure rarely comes alone (its traceback and repeats make the sub-block dirty anyway).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .patterns import STATS_ANCHOR, PatternSet

SUB_BLOCK_BYTES = 64 * 1024

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
        # Anchors that can occur in an access or stats line; enough for a clean sub-block.
        self._clean_anchors = tuple(a for a in (_SERVER_ERROR, _PREEMPTIONS) if a in self._anchors)

    def candidates(self, region: bytes) -> Iterator[bytes]:
        """Candidate lines of region (whole lines, each ending in b"\\n"), in order."""
        starts: set[int] = set()
        size = len(region)
        begin = 0
        while begin < size:
            end = region.find(b"\n", min(begin + SUB_BLOCK_BYTES, size) - 1)
            end = size if end < 0 else end + 1
            self._scan_sub_block(region, begin, end, starts)
            begin = end
        self._add_last_stats_lines(region, starts)
        for start in sorted(starts):
            stop = region.find(b"\n", start)
            yield region[start : stop if stop >= 0 else size]

    def _scan_sub_block(self, region: bytes, begin: int, end: int, starts: set[int]) -> None:
        lines = region.count(b"\n", begin, end)
        common = region.count(_ACCESS_MARK, begin, end) + region.count(self._stats, begin, end)
        anchors = self._clean_anchors if common == lines else self._anchors
        for anchor in anchors:
            at = region.find(anchor, begin, end)
            while at >= 0:
                start = region.rfind(b"\n", 0, at) + 1
                stop = region.find(b"\n", at, end)
                starts.add(start)
                if stop < 0:
                    break
                at = region.find(anchor, stop, end)

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
