"""The schedule: one worker thread per target, one ticking thread for all of them. A tick that finds
the previous cycle still running is skipped and counted, never queued (a hung server gets one probe
at a time); waits of interval x (1 +/- jitter), drawn per target, keep probes from arriving together.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
import time
from collections.abc import Sequence

from .canary import Canary, Cycle
from .metrics import ProbeMetrics
from .outcome import ERROR, HTTP_4XX, Outcome

log = logging.getLogger("vllm_probe")


class TargetWorker:
    """Runs the cycles of one target, one at a time, and logs its state changes."""

    def __init__(self, canary: Canary, metrics: ProbeMetrics, stop: threading.Event) -> None:
        self.canary = canary
        self.metrics = metrics
        self.stop = stop
        self.instance = canary.target.instance
        self._busy = threading.Lock()  # held from the tick that starts a cycle to its end
        self._go = threading.Event()
        self._last_ok: bool | None = None
        self._last_reason: str | None = None
        self._last_health: bool | None = None
        self._failures_in_row = 0
        self._logged_model: str | None = None
        self._progress_unread = False  # the last failure's /metrics gave no progress reading
        self._bug_reported = False
        self.thread = threading.Thread(target=self._loop, name=f"probe {self.instance}", daemon=True)

    def tick(self) -> bool:
        """Start a cycle if idle; otherwise count a skipped tick. True if a cycle started."""
        if not self._busy.acquire(blocking=False):
            self.metrics.record_skip(self.instance)
            return False
        self._go.set()
        return True

    def wake(self) -> None:
        self._go.set()

    def run_once(self) -> Cycle:
        """One cycle in the calling thread (for --once), recorded like any other."""
        with self._busy:
            return self._cycle()

    def _loop(self) -> None:
        while True:
            self._go.wait()
            self._go.clear()
            if self.stop.is_set():
                return
            try:
                self._cycle()
            finally:
                self._busy.release()

    def _cycle(self) -> Cycle:
        try:
            cycle = self.canary.run()
        except Exception as exc:  # a bug must not end the target's probing; report once, go on
            if not self._bug_reported:
                log.exception("target %s: probe raised an unexpected error", self.instance)
                self._bug_reported = True
            cycle = Cycle(Outcome.failure(ERROR, type(exc).__name__), None, False)
        self.metrics.record_probe(self.instance, cycle.model, cycle.outcome, cycle.health_up, cycle.progress)
        self._log_changes(cycle)
        return cycle

    def _log_changes(self, cycle: Cycle) -> None:
        outcome, name = cycle.outcome, self.instance
        if cycle.discovered and cycle.model != self._logged_model:
            log.info("target %s: serves model %s (from /v1/models)", name, cycle.model)
            self._logged_model = cycle.model
        if outcome.ok:
            if self._last_ok is not True:
                after = f" after {self._failures_in_row} failed probes" if self._failures_in_row else ""
                log.info("target %s: probes succeed%s (%.3f s)", name, after, outcome.latency)
            self._failures_in_row = 0
        else:
            self._failures_in_row += 1
            if self._last_ok is not False or outcome.reason != self._last_reason:
                log.warning("target %s: probes fail: %s (%s)", name, outcome.reason, outcome.detail)
        if cycle.progress_missing is not None and not self._progress_unread:
            log.warning("target %s: engine progress unknown (%s)", name, cycle.progress_missing)
        if not outcome.ok and outcome.reason != HTTP_4XX:
            self._progress_unread = cycle.progress_missing is not None
        if cycle.health_up != self._last_health:
            if cycle.health_up:
                log.info("target %s: health check answers 200", name)
            else:
                log.warning("target %s: health check fails", name)
        self._last_ok, self._last_reason, self._last_health = outcome.ok, outcome.reason, cycle.health_up


class Runner:
    def __init__(
        self,
        workers: Sequence[TargetWorker],
        interval: float,
        jitter: float,
        stop: threading.Event,
        rng: random.Random | None = None,
    ) -> None:
        self.workers = list(workers)
        self.interval = interval
        self.jitter = jitter
        self.stop = stop
        self.rng = rng or random.Random()
        self.thread = threading.Thread(target=self._schedule, name="probe schedule", daemon=True)

    def wait_time(self) -> float:
        return self.interval * (1 + self.rng.uniform(-self.jitter, self.jitter))

    def start(self) -> None:
        for worker in self.workers:
            worker.thread.start()
        self.thread.start()

    def _schedule(self) -> None:
        now = time.monotonic()
        due = [(now, i) for i in range(len(self.workers))]  # first probe of every target at once
        heapq.heapify(due)
        while not self.stop.is_set():
            when, index = due[0]
            delay = when - time.monotonic()
            if delay > 0:
                self.stop.wait(delay)
                continue
            heapq.heappop(due)
            self.workers[index].tick()
            following = when + self.wait_time()
            now = time.monotonic()
            if following < now:  # this thread was held up (suspend, overload): no burst of ticks
                following = now + self.wait_time()
            heapq.heappush(due, (following, index))
        for worker in self.workers:
            worker.wake()  # let idle workers see the stop and end
