"""The server's lifecycle as its log tells it (state, startup durations, version), so alerts can
tell a slow start from a restart loop and a planned stop from a death. Failures and deaths are the
event rules' decisions (events.py); states, markers and durations are in exporters/README.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .counts import Counts
from .lifecycle_labels import (
    DEAD,
    ENGINE_INIT,
    FAILED_START,
    FAULTED,
    LOADING,
    READY,
    STARTING,
    STOPPED,
    STOPPING,
    TOTAL,
    UNKNOWN,
    WEIGHTS,
    bucket_index,
    valid_version,
)

_IN_STARTUP = (STARTING, LOADING)
_STOPPABLE = (UNKNOWN, STARTING, LOADING, READY, FAULTED)
_MAX_MARKERS = 32


class Lifecycle:
    """Keeps counts.server_state and the startup figures; the event rules drive it."""

    def __init__(self, counts: Counts, clock: Callable[[], float], live: bool = True) -> None:
        self.counts = counts
        self.clock = clock
        self.live = live  # reading time is log time (following); not for --once
        self._new_startup_data(None, None)

    def _new_startup_data(self, log_time: float | None, wall_time: float | None) -> None:
        self.markers: set[str] = set()  # start patterns seen in the current startup
        self.started_log = log_time  # log time of its first start marker
        self.started_wall = wall_time  # wall clock when that marker was read
        self.figures: dict[str, float] = {}  # duration source -> the largest figure seen

    # -- lines -------------------------------------------------------------------------

    def start_marker(self, name: str, engine: bool, when: float | None, version: str | None) -> bool:
        """A start marker (pattern `name`); True when it begins a new startup."""
        if version is not None and valid_version(version):
            self.counts.vllm_version = version
        state = self.counts.server_state
        if state in _IN_STARTUP and (engine or (state == STARTING and name not in self.markers)):
            if len(self.markers) < _MAX_MARKERS:
                self.markers.add(name)
            return False
        self._new_startup_data(when, self.clock())
        self.markers.add(name)
        self._enter(STARTING, again=True)
        return True

    def loading(self) -> None:
        """A line printed while the model loads or the engine initialises."""
        if self.counts.server_state in (UNKNOWN, STARTING):
            self._enter(LOADING)

    def figure(self, source: str, seconds: float) -> None:
        """A duration the startup reports (source: patterns.DURATION_SOURCES)."""
        if self.counts.server_state in (UNKNOWN, STARTING, LOADING):
            self.figures[source] = max(seconds, self.figures.get(source, 0.0))
            self._enter(LOADING)

    def ready(self, when: float | None) -> None:
        """`Application startup complete.`: the server answers requests."""
        if self.counts.server_state in _IN_STARTUP:
            self._record_startup(when)
        self._enter(READY)

    def shutdown(self) -> None:
        """A shutdown sequence began. A dead or failed server shutting down stays so."""
        if self.counts.server_state in _STOPPABLE:
            self._enter(STOPPING)

    def shutdown_complete(self) -> None:
        if self.counts.server_state in (*_STOPPABLE, STOPPING):
            self._enter(STOPPED)

    def failed_start(self) -> None:
        """The event rules counted (or absorbed) a startup failure."""
        self._enter(FAILED_START)

    def dead(self) -> None:
        """The event rules counted an engine death."""
        self._enter(DEAD)

    def faulted(self) -> None:
        """The engine faulted and fault tolerance holds it: the server is up, refusing requests."""
        if self.counts.server_state in (UNKNOWN, READY):
            self._enter(FAULTED)

    def recovered(self) -> None:
        """Fault tolerance brought the engine back."""
        if self.counts.server_state == FAULTED:
            self._enter(READY)

    def fault_forgotten(self) -> None:
        """No line about the fault for the event rules' hold: what followed is unknown."""
        if self.counts.server_state == FAULTED:
            self._enter(UNKNOWN)

    # -- internals ---------------------------------------------------------------------

    def _enter(self, state: str, again: bool = False) -> None:
        if state not in _IN_STARTUP and self.counts.server_state in _IN_STARTUP:
            self._new_startup_data(None, None)  # the startup ended: its figures are done
        if again or state != self.counts.server_state:
            self.counts.server_state = state
            self.counts.server_state_since = self.clock()

    def _record_startup(self, when: float | None) -> None:
        figures = self.figures
        observed = {}
        # Figures are keyed by their source (patterns.DURATION_SOURCES), observations by phase.
        weights = figures.get("weights", figures.get("model_load"))
        if weights is not None:
            observed[WEIGHTS] = weights
        if "engine_init" in figures:
            observed[ENGINE_INIT] = figures["engine_init"]
        total = self._total(when)
        if total is not None:
            observed[TOTAL] = total
        for phase, seconds in observed.items():
            histogram = self.counts.startup_durations[phase]
            histogram["buckets"][bucket_index(seconds)] += 1
            histogram["sum"] += seconds
        if observed:
            self.counts.last_startup_durations = observed

    def _total(self, when: float | None) -> float | None:
        start = self.started_log
        if start is not None and when is not None and when > start:
            return when - start
        if self.live and self.started_wall is not None:
            return max(0.0, self.clock() - self.started_wall)
        return None

    # -- persistence -------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "markers": sorted(self.markers),
            "started_log": self.started_log,
            "started_wall": self.started_wall,
            "figures": dict(self.figures),
        }

    def restore(self, data: dict[str, Any]) -> None:
        markers = data.get("markers", [])
        self.markers = {str(m) for m in markers[:_MAX_MARKERS]} if isinstance(markers, list) else set()
        self.started_log = _optional_float(data.get("started_log"))
        self.started_wall = _optional_float(data.get("started_wall"))
        figures = data.get("figures", {})
        self.figures = (
            {k: float(v) for k, v in figures.items() if k in ("weights", "model_load", "engine_init")}
            if isinstance(figures, dict)
            else {}
        )

    def adopt_phase(self, phase: str) -> None:
        """A state file from before the lifecycle metrics: take the event rules' phase. The
        time of the transition is unknown; the time of the restore stands for it."""
        state = {
            "starting": STARTING,
            "serving": READY,
            "stopping": STOPPING,
            "dead": DEAD,
            "failed": FAILED_START,
            "faulted": FAULTED,
        }.get(phase, UNKNOWN)
        self.counts.server_state = state
        self.counts.server_state_since = self.clock() if state != UNKNOWN else 0.0


def _optional_float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]
