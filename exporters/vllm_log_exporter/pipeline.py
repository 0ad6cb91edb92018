"""Bytes in, counted events out. One Pipeline per exporter, shared by all its sources, so one
incident written to two files (a server's stdout and stderr) counts once. The HTTP thread
renders metrics while the main thread feeds bytes, both under `lock`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .counts import Counts
from .events import EventMachine, Settings
from .lines import DEFAULT_MAX_LINE_BYTES, Assembled, LineAssembler, clean_line, count_undecodable
from .patterns import PatternSet
from .records import parse_line
from .scanner import Scanner


class Pipeline:
    def __init__(
        self,
        patterns: PatternSet,
        clock: Callable[[], float],
        *,
        settings: Settings | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        counts: Counts | None = None,
    ) -> None:
        self.patterns = patterns
        self.clock = clock
        self.counts = counts or Counts()
        self.machine = EventMachine(self.counts, clock, settings)
        self.scanner = Scanner(patterns)
        self.max_line_bytes = max_line_bytes
        self.lock = threading.RLock()

    def new_source(self) -> LineAssembler:
        return LineAssembler(self.max_line_bytes)

    def feed(self, source: LineAssembler, data: bytes) -> None:
        """Account for bytes read from one source and process the lines they complete."""
        if not data:
            return
        with self.lock:
            self.counts.bytes += len(data)
            self.counts.last_read_time = self.clock()
            self._process(source.feed(data))

    def flush(self, source: LineAssembler) -> None:
        """The source ended (EOF of --once, rotation, truncation): its last partial line
        is a line."""
        with self.lock:
            self._process(source.flush())

    def finish(self) -> None:
        """No more input will come (--once): settle incidents that wait for more."""
        with self.lock:
            self.machine.settle()

    def tick(self) -> None:
        with self.lock:
            self.machine.tick()

    def _process(self, assembled: Assembled) -> None:
        counts, region = self.counts, assembled.region
        counts.lines += assembled.oversized
        counts.oversized_lines += assembled.oversized
        if not region:
            return
        counts.lines += region.count(b"\n")
        counts.undecodable_lines += count_undecodable(region)
        match, machine = self.patterns.match, self.machine
        for raw in self.scanner.candidates(region):
            record = parse_line(clean_line(raw))
            when = machine.observe_time(record.log_time)
            for message in record.messages:
                hit = match(message)
                if hit:
                    machine.handle(hit[0], hit[1], when)
