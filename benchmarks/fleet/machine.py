"""How busy the machine is, and how much of that is someone else's work."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return float(one), float(five), float(fifteen)


def busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (everything but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


@dataclass
class CpuMeter:
    """CPU used between two readings: ours (the given pids and this process) and everyone's."""

    pids: tuple[int, ...]

    def __post_init__(self) -> None:
        self._last = self._read()

    def _read(self) -> tuple[float, float, float]:
        ours = sum(process_cpu_seconds(p) for p in self.pids) + own_cpu_seconds()
        return busy_seconds(), ours, time.monotonic()

    def reading(self) -> tuple[float, float]:
        """(all busy cores, ours) on average since the previous reading."""
        now = self._read()
        elapsed = max(now[2] - self._last[2], 1e-3)
        busy, ours = (now[0] - self._last[0]) / elapsed, (now[1] - self._last[1]) / elapsed
        self._last = now
        return busy, ours

    def others(self) -> float:
        """Cores other work used on average since the previous reading."""
        busy, ours = self.reading()
        return max(busy - ours, 0.0)

    def wait_quiet(self, max_other_cores: float, max_wait_s: float, window_s: float = 5.0) -> float:
        """Wait until other work used less than `max_other_cores` over `window_s`, at most
        `max_wait_s`; return what it used over the last window."""
        deadline = time.monotonic() + max_wait_s
        self.reading()
        while True:
            time.sleep(window_s)
            other = self.others()
            if other < max_other_cores or time.monotonic() >= deadline:
                return other
