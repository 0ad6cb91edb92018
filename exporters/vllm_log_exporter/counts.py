"""Everything the exporter reports, as plain numbers: updated by the pipeline and the tailer,
rendered by metrics.py, saved and restored by state.py. Also the contract's label values for
what the tailer reports about the log files (read-error reasons, file states)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .contract import closed_values
from .lifecycle_labels import BUCKETS, DURATION_PHASES, STATES, UNKNOWN, valid_version
from .patterns import DEATH_REASONS, EVENTS, REASONS

# What the tailer reports about a log file (tailer.py), by name.
PERMISSION_DENIED, NOT_FOUND, IO_ERROR = "permission_denied", "not_found", "io_error"
READING, MISSING, UNREADABLE = "reading", "missing", "unreadable"

READ_ERROR_REASONS = closed_values(
    "reason", "vllm_log_read_errors", named=(PERMISSION_DENIED, NOT_FOUND, IO_ERROR)
)
"""Values of the `reason` label of vllm_log_read_errors (the exporters' contract)."""
FILE_STATES = closed_values("state", "vllm_log_files", named=(READING, MISSING, UNREADABLE))
"""Values of the `state` label of vllm_log_files (the exporters' contract)."""

STATS_GAUGES = (
    "running",
    "waiting",
    "kv_cache_usage_ratio",
    "prompt_throughput",
    "generation_throughput",
    "timestamp",
)


def _zeros(keys: tuple[str, ...]) -> dict[str, int]:
    return dict.fromkeys(keys, 0)


def _float_zeros(keys: tuple[str, ...]) -> dict[str, float]:
    return dict.fromkeys(keys, 0.0)


MAX_ENGINES = 256
"""Engine labels are "0".."255" (data-parallel ranks) and "all" (aggregated stats lines):
a bounded set even if a garbled line carries `Engine 987654:`."""


def _empty_histograms() -> dict[str, dict[str, Any]]:
    """phase -> {"buckets": count per bucket (the last one above the largest bound), "sum"}"""
    return {phase: {"buckets": [0] * (len(BUCKETS) + 1), "sum": 0.0} for phase in DURATION_PHASES}


def _valid_engine(label: str) -> bool:
    return label == "all" or (label.isdigit() and str(int(label)) == label and int(label) < MAX_ENGINES)


@dataclass
class Counts:
    events: dict[str, int] = field(default_factory=lambda: _zeros(EVENTS))
    last_event_time: dict[str, float] = field(default_factory=lambda: _float_zeros(EVENTS))
    startup_failures: dict[str, int] = field(default_factory=lambda: _zeros(REASONS))
    engine_deaths: dict[str, int] = field(default_factory=lambda: _zeros(DEATH_REASONS))
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    """engine label -> STATS_GAUGES; empty until a stats line was seen."""
    lines: int = 0
    bytes: int = 0
    undecodable_lines: int = 0
    oversized_lines: int = 0
    rotations: int = 0
    truncations: int = 0
    read_errors: dict[str, int] = field(default_factory=lambda: _zeros(READ_ERROR_REASONS))
    last_read_time: float = 0.0
    server_state: str = UNKNOWN
    server_state_since: float = 0.0
    vllm_version: str | None = None
    """The version the log last announced; None until one was seen."""
    startup_durations: dict[str, dict[str, Any]] = field(default_factory=_empty_histograms)
    last_startup_durations: dict[str, float] = field(default_factory=dict)
    """phase -> seconds, for the most recent completed startup."""
    # Live values owned by the tailer; not persisted.
    unread_bytes: int = 0
    files: dict[str, int] = field(default_factory=lambda: _zeros(FILE_STATES))

    def count_event(self, event: str, now: float, amount: int = 1) -> None:
        self.events[event] += amount
        self.last_event_time[event] = now

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["unread_bytes"], data["files"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Counts:
        """Restore saved counts; keys outside the fixed label sets are dropped."""
        counts = cls()
        for name, convert in (
            ("events", int),
            ("last_event_time", float),
            ("startup_failures", int),
            ("engine_deaths", int),
            ("read_errors", int),
        ):
            target = getattr(counts, name)
            for key, value in dict(data.get(name, {})).items():
                if key in target:
                    target[key] = convert(value)
        for engine, gauges in dict(data.get("stats", {})).items():
            if _valid_engine(str(engine)) and all(k in gauges for k in STATS_GAUGES):
                counts.stats[str(engine)] = {k: float(gauges[k]) for k in STATS_GAUGES}
        for name in (
            "lines",
            "bytes",
            "undecodable_lines",
            "oversized_lines",
            "rotations",
            "truncations",
        ):
            setattr(counts, name, int(data.get(name, 0)))
        counts.last_read_time = float(data.get("last_read_time", 0.0))
        # Lifecycle fields (absent from state files of earlier versions: defaults stay).
        state = data.get("server_state", UNKNOWN)
        counts.server_state = state if state in STATES else UNKNOWN
        counts.server_state_since = float(data.get("server_state_since", 0.0))
        version = data.get("vllm_version")
        counts.vllm_version = version if isinstance(version, str) and valid_version(version) else None
        for phase, saved in dict(data.get("startup_durations", {})).items():
            buckets = saved.get("buckets") if isinstance(saved, dict) else None
            if (
                phase in counts.startup_durations
                and isinstance(buckets, list)
                and len(buckets) == len(BUCKETS) + 1
            ):
                counts.startup_durations[phase] = {
                    "buckets": [int(n) for n in buckets],
                    "sum": float(saved.get("sum", 0.0)),
                }
        counts.last_startup_durations = {
            phase: float(seconds)
            for phase, seconds in dict(data.get("last_startup_durations", {})).items()
            if phase in DURATION_PHASES
        }
        return counts
