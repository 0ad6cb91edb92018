"""How busy the machine is, and how much of that is someone else's work."""

from __future__ import annotations

import os
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

    def _read(self) -> tuple[float, float]:
        ours = sum(process_cpu_seconds(p) for p in self.pids) + own_cpu_seconds()
        return busy_seconds(), ours

    def reading(self) -> tuple[float, float]:
        """(all busy CPU seconds, ours) since the previous reading."""
        now = self._read()
        busy, ours = now[0] - self._last[0], now[1] - self._last[1]
        self._last = now
        return busy, ours
