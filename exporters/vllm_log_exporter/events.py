"""The rules that turn pattern matches into counted events: one count per incident, not per line
(vLLM repeats one failure 2-4 times), by a state machine driven by the server's lifecycle as the
log shows it. The counting rules: exporters/README.md; phases, expiry, log time: docs/exporters.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .counts import MAX_ENGINES, Counts
from .lifecycle import Lifecycle
from .patterns import (
    ENGINE_DEAD,
    ENGINE_FAULTED,
    ENGINE_INIT_FAILED,
    GENERIC_REASONS,
    GPU_FAULT,
    OOM,
    OTHER,
    OUT_OF_MEMORY,
    PREEMPTION,
    REQUEST_ERROR,
    REQUEST_REFUSED,
    SHUTDOWN,
    STARTUP_BEGIN,
    STARTUP_COMPLETE,
    STARTUP_FAILED,
    Pattern,
)

UNKNOWN, STARTING, SERVING, STOPPING, DEAD, FAILED, FAULTED = (
    "unknown",
    "starting",
    "serving",
    "stopping",
    "dead",
    "failed",
    "faulted",
)
PHASES = (UNKNOWN, STARTING, SERVING, STOPPING, DEAD, FAILED, FAULTED)
MAX_REFUSALS = 100_000
"""Refusals logged whose 503 access line has not been read yet, at most (a bounded state)."""

HEALTH_PATHS = frozenset({"/health", "/ping"})
"""Probe endpoints: a 5xx answer there is the probe doing its job, not a failed request."""


@dataclass
class Wait:
    """Something an incident leaves open until more lines tell: since a log time (None without
    timestamps) and a wall-clock time. It ends when the log moves `window` past it, after
    `settle_after` wall seconds (tick), or when a line decides it."""

    time: float | None = None
    wall: float | None = None

    @property
    def open(self) -> bool:
        return self.wall is not None

    def start(self, time: float | None, wall: float) -> None:
        self.time, self.wall = time, wall

    def close(self) -> None:
        self.time = self.wall = None

    def outlived(self, now: float, window: float) -> bool:
        """The log has moved more than `window` past it."""
        return self.time is not None and abs(now - self.time) > window

    def waited(self, now: float, after: float) -> bool:
        """`after` wall-clock seconds have passed since it began."""
        return self.wall is not None and now - self.wall >= after

    def to_json(self, prefix: str) -> dict[str, float | None]:
        return {f"{prefix}_time": self.time, f"{prefix}_wall": self.wall}

    def restore(self, data: dict[str, Any], prefix: str) -> None:
        wall = _optional_float(data.get(f"{prefix}_wall"))
        self.time = _optional_float(data.get(f"{prefix}_time")) if wall is not None else None
        self.wall = wall


@dataclass
class Settings:
    window: float = 30.0
    """Seconds of log time during which repeated OOM / startup lines are one incident."""
    hold: float = 600.0
    """Seconds of log time a dead or failed server stays so without a related line."""
    stop_hold: float = 60.0
    """Seconds of log time a shutdown stays in progress without a shutdown line."""
    settle_after: float = 10.0
    """Wall-clock seconds after which a provisional startup-failure reason is final."""
    live: bool = True
    """Lines are read as they are written (following a log), so the wall clock between
    reading two lines measures the time between them; not so for --once."""


class EventMachine:
    def __init__(
        self,
        counts: Counts,
        clock: Callable[[], float],
        settings: Settings | None = None,
    ) -> None:
        self.counts = counts
        self.clock = clock
        self.settings = settings or Settings()
        self.phase = UNKNOWN
        self.phase_time: float | None = None  # log time of the last line that kept the phase
        self.oom_since: float | None = None  # log time that opened the OOM window
        self.oom_open = False
        self.startup_complete_since: float | None = None
        self.pending_reason: str | None = None  # provisional startup-failure reason
        self.pending = Wait()  # ... waiting for a specific one
        self.fault_since: float | None = None  # log time of the last GPU fault line
        self.death_cause = Wait()  # a death whose cause may still follow
        self.exception = Wait()  # an engine exception not yet told apart
        self.last_log_time: float | None = None
        self.v0_preemption_total: int | None = None
        self.fault_tolerant = False  # the arguments of the current start turn fault tolerance on
        self.refusals = 0  # requests refused (logged) whose 503 access line is still to come
        self.lifecycle = Lifecycle(counts, clock, live=self.settings.live)

    # -- input -------------------------------------------------------------------------

    def observe_time(self, log_time: float | None) -> float | None:
        """Note a line's own timestamp; returns the time to use for it."""
        if log_time is not None:
            self.last_log_time = log_time
            self._expire(log_time)
        return self.last_log_time

    def handle(self, pattern: Pattern, match: re.Match[str], when: float | None) -> None:
        kind = pattern.kind
        if kind == "stats":
            self._stats(match)
        elif kind == "http_access":
            if match.group("path") in HEALTH_PATHS:
                pass
            elif match.group("status") == "503" and self.refusals:
                self.refusals -= 1  # a refusal already counted from its own line
            else:
                self._count(REQUEST_ERROR)
        elif kind == "request_error":
            self._count(REQUEST_ERROR)
        elif kind == "preemption_total":
            self._v0_preemptions(int(match.group("total")))
        elif kind in ("startup_begin", "engine_begin"):
            version = match.groupdict().get("version")
            if self.lifecycle.start_marker(pattern.name, kind == "engine_begin", when, version):
                self._count(STARTUP_BEGIN)
                self._startup_begin(when)
            if "fault_tolerance" in pattern.regex.groupindex:  # the arguments' line
                self.fault_tolerant = match.group("fault_tolerance") is not None
        elif kind == "loading":
            self.lifecycle.loading()
        elif kind == "startup_duration":
            seconds = _seconds(match.group("seconds"))
            if seconds is not None:
                self.lifecycle.figure(pattern.phase or "", seconds)
        elif kind == "startup_complete":
            self._startup_complete(when)
            self.lifecycle.ready(when)
        elif kind == "shutdown":
            self._shutdown(when)
            self.lifecycle.shutdown()
        elif kind == "shutdown_complete":
            self._shutdown(when)  # counted like any shutdown line: once per sequence
            self.lifecycle.shutdown_complete()
        elif kind == "engine_dead":
            self._engine_dead(when, pattern.reason)
        elif kind == "gpu_fault":
            self._gpu_fault(when)
        elif kind == "engine_exception":
            self._engine_exception(when)
        elif kind == "frame":
            if pattern.context == "starting":
                self._start_path(when)
            elif self.phase != FAULTED:  # a held fault's traceback runs through the loop too
                self._engine_dead(when)
        elif kind == "engine_faulted":
            self._faulted(when)
        elif kind == "faulted_rejection":
            self._count(REQUEST_REFUSED)
            self.refusals = min(self.refusals + 1, MAX_REFUSALS)
            self._faulted(when)
        elif kind == "engine_recovered":
            if self.phase == FAULTED:
                self._set_phase(SERVING, when)
                self.lifecycle.recovered()
        elif kind == "oom":
            self._oom(when, pattern.reason or OUT_OF_MEMORY)
        elif kind == "startup_failed":
            self._startup_failed(when, pattern.reason or OTHER)

    def tick(self) -> None:
        """Settle what has waited settle_after wall-clock seconds for more lines."""
        now, after = self.clock(), self.settings.settle_after
        if self.exception.waited(now, after):
            self._exception_is_death()
        if self.death_cause.waited(now, after):
            self._settle_death(OTHER)
        if self.pending.waited(now, after):
            self.settle()

    def settle(self) -> None:
        """End the waits of the current incident: an engine exception nothing has told apart
        is a death, a death's or a startup failure's generic reason is final."""
        self._exception_is_death()
        self._settle_death(OTHER)
        if self.pending_reason is not None:
            self.counts.startup_failures[self.pending_reason] += 1
        self.pending_reason = None
        self.pending.close()

    # -- rules ---------------------------------------------------------------------------

    def _count(self, event: str, amount: int = 1) -> None:
        self.counts.count_event(event, self.clock(), amount)

    def _set_phase(self, phase: str, when: float | None) -> None:
        self.phase, self.phase_time = phase, when

    def _startup_begin(self, when: float | None) -> None:
        self.settle()
        self.fault_since = None
        self._set_phase(STARTING, when)
        self.oom_open = False
        self.startup_complete_since = None
        self.v0_preemption_total = None  # a new scheduler counts from zero
        self.fault_tolerant = False  # until this start's arguments say otherwise
        self.refusals = 0

    def _startup_complete(self, when: float | None) -> None:
        self.settle()
        # One line per API server process (multi-API-server mode): count the first.
        if not (self.phase == SERVING and self._within(self.startup_complete_since, when)):
            self._count(STARTUP_COMPLETE)
            self.startup_complete_since = when
        self._set_phase(SERVING, when)

    def _shutdown(self, when: float | None) -> None:
        if self.phase != STOPPING:
            self._count(SHUTDOWN)
        self._set_phase(STOPPING, when)

    def _engine_exception(self, when: float | None) -> None:
        # "EngineCore hit an exception" precedes its traceback, which ends in the engine's loop (a death)
        # or its constructor (a failed start): with the start out of view, the next telling line or
        # settle() decides. With fault tolerance on, a worker's exception may be a held fault: wait too.
        if self.phase == FAULTED:
            return  # fault tolerance is handling a fault: a death shows as its own line
        if self.phase != UNKNOWN and not (self.phase == SERVING and self.fault_tolerant):
            self._engine_dead(when)
        elif not self.exception.open:
            self.exception.start(when, self.clock())

    def _exception_is_death(self) -> None:
        if self.exception.open:
            when = self.exception.time
            self.exception.close()
            self._engine_dead(when)

    def _start_path(self, when: float | None) -> None:
        # A traceback through a method only a start calls: the server was starting, though
        # its start marker is out of view. An OOM already counted in this incident is why.
        if self.phase != UNKNOWN:
            return
        self.exception.close()
        if self.oom_open and self._within(self.oom_since, when):
            self._startup_failed(when, OUT_OF_MEMORY)
        else:
            self._startup_failed(when, ENGINE_INIT_FAILED)

    def _engine_dead(self, when: float | None, reason: str | None = None) -> None:
        self.exception.close()
        if self.phase in (STARTING, FAILED):
            self._startup_failed(when, ENGINE_INIT_FAILED)
        elif self.phase in (STOPPING, DEAD):
            # STOPPING: 0.32 logs EngineDeadError while it shuts down normally (and a dead
            # engine's processes are being killed). DEAD: the same death, told again.
            if self.phase == DEAD:
                self.phase_time = when
            if reason is not None:
                self._settle_death(reason)
        else:
            self._count(ENGINE_DEAD)
            self._set_phase(DEAD, when)
            self.refusals = 0
            self.lifecycle.dead()
            cause = reason or self._recent_cause(when)
            if cause is not None:
                self.counts.engine_deaths[cause] += 1
            else:  # the cause is often printed after the death (the traceback ends in it)
                self.death_cause.start(when, self.clock())

    def _faulted(self, when: float | None) -> None:
        """The engine faulted and fault tolerance holds it: up, refusing requests, not dead."""
        if self.phase not in (SERVING, UNKNOWN, FAULTED):
            return  # starting, stopping, dead or failed: that decides, not this
        self.exception.close()  # the exception reported before it was this fault
        if self.phase != FAULTED:
            self._count(ENGINE_FAULTED)
        self._set_phase(FAULTED, when)
        self.lifecycle.faulted()

    def _recent_cause(self, when: float | None) -> str | None:
        """The cause of a death from the lines just before it (an OOM, a GPU fault)."""
        if self.oom_open and self._within(self.oom_since, when):
            return OUT_OF_MEMORY
        if self.fault_since is not None and self._within(self.fault_since, when):
            return GPU_FAULT
        return None

    def _settle_death(self, reason: str) -> None:
        """The death waiting for its cause takes this one."""
        if self.death_cause.open:
            self.counts.engine_deaths[reason] += 1
            self.death_cause.close()

    def _gpu_fault(self, when: float | None) -> None:
        # A CUDA fault (illegal access, ECC, ...) is the cause of what follows: the engine's
        # death while serving, its failed start while starting; by itself it counts nothing.
        self.fault_since = when
        self._settle_death(GPU_FAULT)  # a death waiting for its cause

    def _oom(self, when: float | None, reason: str) -> None:
        if self.phase in (STARTING, FAILED):
            self._startup_failed(when, reason)  # counts the oom too
            return
        self._count_oom(when)

    def _count_oom(self, when: float | None) -> None:
        # Every rank and process that hit it repeats it: one incident within the window.
        self._settle_death(OUT_OF_MEMORY)  # a death waiting for its cause
        if self.oom_open and self._within(self.oom_since, when):
            return
        self._count(OOM)
        self.oom_open, self.oom_since = True, when

    def _startup_failed(self, when: float | None, reason: str) -> None:
        self.exception.close()
        if reason in GENERIC_REASONS and self.oom_open and self._within(self.oom_since, when):
            reason = OUT_OF_MEMORY  # the OOM just counted is why (it counts once)
        if reason == OUT_OF_MEMORY:
            # An out-of-memory is an oom wherever it happens; during a start it is also why the
            # start failed (the routing sends the two alerts as one notification).
            self._count_oom(when)
        specific = reason not in GENERIC_REASONS
        self.lifecycle.failed_start()
        if self.phase == FAILED:  # the same failed start, told again
            self.phase_time = when
            if specific and self.pending_reason is not None:
                self.pending_reason = reason
                self.settle()
            return
        self.settle()
        self._count(STARTUP_FAILED)
        self._set_phase(FAILED, when)
        if specific:
            self.counts.startup_failures[reason] += 1
        else:
            self.pending_reason = reason
            self.pending.start(when, self.clock())

    def _v0_preemptions(self, total: int) -> None:
        # V0 logs only every 50th preemption, with the running total: add the difference.
        previous = self.v0_preemption_total
        delta = total if previous is None or total < previous else total - previous
        self.v0_preemption_total = total
        if delta:
            self._count(PREEMPTION, delta)

    def _stats(self, match: re.Match[str]) -> None:
        groups = match.groupdict()
        engine = engine_label(groups.get("engine"), bool(groups.get("aggregated")))
        if engine is None:
            return
        self.counts.stats[engine] = {
            "running": float(groups["running"]),
            "waiting": float(groups["waiting"]),
            "kv_cache_usage_ratio": round(float(groups["kv_percent"]) / 100.0, 6),
            "prompt_throughput": float(groups["prompt"]),
            "generation_throughput": float(groups["generation"]),
            "timestamp": self.clock(),
        }
        if groups.get("preemptions"):
            self._count(PREEMPTION, int(groups["preemptions"]))

    # -- time --------------------------------------------------------------------------

    def _within(self, since: float | None, when: float | None) -> bool:
        """Same incident? Without timestamps on either side, assume so."""
        if since is None or when is None:
            return True
        return abs(when - since) <= self.settings.window

    def _expire(self, now: float) -> None:
        window = self.settings.window
        if self.exception.outlived(now, window):
            self._exception_is_death()
        if self.death_cause.outlived(now, window):
            self._settle_death(OTHER)
        if self.pending.outlived(now, window):
            self.settle()
        if self.phase_time is None:
            return
        idle = abs(now - self.phase_time)
        if (self.phase in (DEAD, FAILED, FAULTED) and idle > self.settings.hold) or (
            self.phase == STOPPING and idle > self.settings.stop_hold
        ):
            if self.phase == FAULTED:
                self.lifecycle.fault_forgotten()
            self._set_phase(UNKNOWN, None)

    # -- persistence -------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "phase_time": self.phase_time,
            "oom_open": self.oom_open,
            "oom_since": self.oom_since,
            "startup_complete_since": self.startup_complete_since,
            "pending_reason": self.pending_reason,
            **self.pending.to_json("pending"),
            "fault_since": self.fault_since,
            **self.death_cause.to_json("death_cause"),
            **self.exception.to_json("exception"),
            "last_log_time": self.last_log_time,
            "v0_preemption_total": self.v0_preemption_total,
            "fault_tolerant": self.fault_tolerant,
            "refusals": self.refusals,
            "lifecycle": self.lifecycle.to_json(),
        }

    def restore(self, data: dict[str, Any]) -> None:
        phase = data.get("phase", UNKNOWN)
        self.phase = phase if phase in PHASES else UNKNOWN
        self.phase_time = _optional_float(data.get("phase_time"))
        self.oom_open = bool(data.get("oom_open", False))
        self.oom_since = _optional_float(data.get("oom_since"))
        self.startup_complete_since = _optional_float(data.get("startup_complete_since"))
        reason = data.get("pending_reason")
        self.pending_reason = reason if reason in self.counts.startup_failures else None
        self.pending.restore(data if self.pending_reason is not None else {}, "pending")
        self.fault_since = _optional_float(data.get("fault_since"))
        self.death_cause.restore(data, "death_cause")
        self.exception.restore(data, "exception")
        self.last_log_time = _optional_float(data.get("last_log_time"))
        total = data.get("v0_preemption_total")
        self.v0_preemption_total = int(total) if total is not None else None
        self.fault_tolerant = bool(data.get("fault_tolerant", False))
        self.refusals = min(max(int(data.get("refusals", 0)), 0), MAX_REFUSALS)
        lifecycle = data.get("lifecycle")
        self.lifecycle.restore(lifecycle if isinstance(lifecycle, dict) else {})


def engine_label(index: str | None, aggregated: bool = False) -> str | None:
    """The `engine` label for a stats line, or None when out of the bounded set."""
    if aggregated:
        return "all"
    if not index:
        return "0"
    number = int(index)
    return str(number) if number < MAX_ENGINES else None


def _seconds(text: str) -> float | None:
    """A duration from a log line, or None if it is not a finite, non-negative number."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value < float("inf") else None


def _optional_float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]
