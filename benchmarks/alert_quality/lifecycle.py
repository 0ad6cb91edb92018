"""A simulated server's lifecycle: whether it answers scrapes, whether its Service routes to it, and
what vllm-log-exporter would export from its log (families from the exporters' contract). Its times
(STARTUP, backoff(), GRACE) are ones an operator would recognise, not one server's measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import vllm_obs_contract
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

STARTUP = 90.0
GRACE = 30.0

LOG = vllm_obs_contract.log_exporter()
STATES = LOG["vllm_log_server_state"].values("state")
EVENTS = LOG["vllm_log_events"].values("event")
DEATH_REASONS = LOG["vllm_log_engine_deaths"].values("reason")
START_FAILURES = LOG["vllm_log_startup_failures"].values("reason")


def backoff(restart: int) -> float:
    """Seconds before the orchestrator's `restart`-th start (0 for the first) of a container
    that keeps dying: 10 s doubling, at most five minutes."""
    return min(10.0 * 2**restart, 300.0)


@dataclass
class LogView:
    """What vllm-log-exporter exports for one server, as its log tells it. Times are simulated
    seconds; `epoch` (Unix seconds of the run's start) turns them into the exporter's stamps."""

    epoch: float
    state: str = "unknown"
    since: float | None = None  # simulated time of the last transition
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EVENTS, 0))
    last: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(EVENTS))
    deaths: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DEATH_REASONS, 0))
    start_failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(START_FAILURES, 0))
    version: int = 0  # counts changes: a server answering a scrape renders again only after one

    def enter(self, state: str, at: float) -> None:
        if state not in STATES:
            raise ValueError(f"{state} is not a server state of the log exporter's contract")
        if state != self.state:
            self.state, self.since = state, at
            self.version += 1

    def log(self, event: str, at: float) -> None:
        if event not in EVENTS:
            raise ValueError(f"{event} is not an event of the log exporter's contract")
        self.counts[event] += 1
        self.last[event] = at
        self.version += 1

    def exposition(self) -> bytes:
        """The exporter's /metrics for this server, the families the rules read. One exporter
        watches one server's log; the scrape config gives its series the server's instance."""
        view = self

        class Collector:
            def collect(self):
                return view._families()

        registry = CollectorRegistry(auto_describe=False)
        registry.register(Collector())
        return generate_latest(registry)

    def _families(self) -> list:
        def stamp(at: float | None) -> float:
            return 0.0 if at is None else self.epoch + at  # 0: never seen, as the exporter says

        events = LOG.family(CounterMetricFamily, "vllm_log_events")
        last = LOG.family(GaugeMetricFamily, "vllm_log_last_event_timestamp_seconds")
        for event in EVENTS:
            events.add_metric([event], self.counts[event])
            last.add_metric([event], stamp(self.last[event]))
        deaths = LOG.family(CounterMetricFamily, "vllm_log_engine_deaths")
        for reason, n in self.deaths.items():
            deaths.add_metric([reason], n)
        failures = LOG.family(CounterMetricFamily, "vllm_log_startup_failures")
        for reason, n in self.start_failures.items():
            failures.add_metric([reason], n)
        state = LOG.family(GaugeMetricFamily, "vllm_log_server_state")
        for s in STATES:
            state.add_metric([s], 1.0 if s == self.state else 0.0)
        since = LOG.family(
            GaugeMetricFamily, "vllm_log_server_state_since_timestamp_seconds", value=stamp(self.since)
        )
        return [events, last, deaths, failures, state, since]


@dataclass
class Server:
    """One replica's server: `answering` (its port serves /metrics: `up` is 1), `serving` (ready:
    the Service routes to it), `engine_alive`, and its log. Transitions only; the fleet's member
    schedules them and keeps its engine model in step."""

    log: LogView
    answering: bool = True
    serving: bool = True
    engine_alive: bool = True

    @classmethod
    def ready_at(cls, epoch: float, at: float = 0.0) -> Server:
        """A server that started and is ready at `at`, as the fleet begins."""
        server = cls(LogView(epoch))
        server.log.log("startup_begin", at)
        server.log.log("startup_complete", at)
        server.log.enter("ready", at)
        return server

    def engine_dies(self, at: float, logged: bool = True, reason: str = "other") -> None:
        """The engine dies. Logged: EngineDeadError in the log, the API server answers 503 and
        exits (vLLM's own behaviour); not logged (a SIGKILL, the kernel's OOM killer): the
        process is gone without a line, and the log exporter still says ready."""
        self.engine_alive = self.answering = self.serving = False
        if logged:
            self.log.log("engine_dead", at)
            self.log.deaths[reason] += 1
            self.log.log("shutdown", at)  # vLLM logs its shutdown after the death
            self.log.enter("dead", at)

    def stopping(self, at: float) -> None:
        """A planned stop begins (SIGTERM): out of the Service, the shutdown in the log; it
        still answers while it finishes what it holds."""
        self.serving = False
        self.log.log("shutdown", at)
        self.log.enter("stopping", at)

    def stopped(self, at: float) -> None:
        self.answering = self.engine_alive = False
        self.log.enter("stopped", at)

    def begins_start(self, at: float) -> None:
        """The orchestrator starts the process: it loads the model and answers nothing yet."""
        self.answering = self.serving = self.engine_alive = False
        self.log.log("startup_begin", at)
        self.log.enter("starting", at)

    def loads(self, at: float) -> None:
        self.log.enter("loading", at)

    def completes_start(self, at: float) -> None:
        self.engine_alive = self.answering = self.serving = True
        self.log.log("startup_complete", at)
        self.log.enter("ready", at)

    def fails_start(self, at: float, reason: str = "engine_init_failed") -> None:
        self.answering = self.serving = self.engine_alive = False
        self.log.log("startup_failed", at)
        self.log.start_failures[reason] += 1
        self.log.enter("failed_start", at)
