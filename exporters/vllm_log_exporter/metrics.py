"""The Prometheus collector: renders Counts as metric families on every scrape.

Every label value comes from a fixed set (patterns.EVENTS, patterns.REASONS,
counts.READ_ERROR_REASONS, counts.FILE_STATES, lifecycle.STATES, lifecycle.DURATION_PHASES),
is an engine index parsed from `Engine NNN:`, or is the one vLLM version the log last
announced, checked against the shape of a release number (lifecycle.valid_version); nothing
else from free log text reaches a label.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from . import __version__
from .counts import FILE_STATES, READ_ERROR_REASONS, Counts
from .lifecycle import BUCKETS, DURATION_PHASES, STATES
from .patterns import EVENTS, REASONS

_STATS_FAMILIES = (
    (
        "vllm_log_requests_running",
        "running",
        "Requests running, from the last periodic stats line.",
    ),
    (
        "vllm_log_requests_waiting",
        "waiting",
        "Requests waiting, from the last periodic stats line.",
    ),
    (
        "vllm_log_kv_cache_usage_ratio",
        "kv_cache_usage_ratio",
        "KV-cache usage (0-1), from the last periodic stats line.",
    ),
    (
        "vllm_log_prompt_throughput_tokens_per_second",
        "prompt_throughput",
        "Average prompt throughput, from the last periodic stats line.",
    ),
    (
        "vllm_log_generation_throughput_tokens_per_second",
        "generation_throughput",
        "Average generation throughput, from the last periodic stats line.",
    ),
    (
        "vllm_log_stats_last_timestamp_seconds",
        "timestamp",
        "Unix time the exporter read the last periodic stats line.",
    ),
)


class LogCollector:
    """Collector over a Counts object; `lock` is the pipeline's (consistent snapshots)."""

    def __init__(
        self,
        counts: Counts,
        lock: threading.RLock | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.counts = counts
        self.lock = lock or threading.RLock()
        if registry is not None:
            registry.register(self)

    def collect(self) -> Iterable[Metric]:
        with self.lock:
            return list(self._families(self.counts))

    def _families(self, c: Counts) -> Iterable[Metric]:
        events = CounterMetricFamily(
            "vllm_log_events",
            "vLLM incidents and lifecycle events seen in the log (one incident counts once).",
            labels=["event"],
        )
        last = GaugeMetricFamily(
            "vllm_log_last_event_timestamp_seconds",
            "Unix time the exporter last counted the event (0 until seen).",
            labels=["event"],
        )
        for event in EVENTS:
            events.add_metric([event], c.events[event])
            last.add_metric([event], c.last_event_time[event])
        yield events
        yield last

        reasons = CounterMetricFamily(
            "vllm_log_startup_failures",
            "Failed vLLM startups by reason.",
            labels=["reason"],
        )
        for reason in REASONS:
            reasons.add_metric([reason], c.startup_failures[reason])
        yield reasons

        yield from self._lifecycle_families(c)

        if c.stats:
            for name, key, help_text in _STATS_FAMILIES:
                family = GaugeMetricFamily(name, help_text, labels=["engine"])
                for engine in sorted(c.stats):
                    family.add_metric([engine], c.stats[engine][key])
                yield family

        for name, value, help_text in (
            ("vllm_log_lines", c.lines, "Log lines read."),
            ("vllm_log_bytes", c.bytes, "Log bytes read."),
            ("vllm_log_undecodable_lines", c.undecodable_lines, "Lines that are not valid UTF-8."),
            (
                "vllm_log_oversized_lines",
                c.oversized_lines,
                "Lines longer than --max-line-bytes, skipped.",
            ),
            ("vllm_log_rotations", c.rotations, "Log files replaced by a new file (rotation)."),
            ("vllm_log_truncations", c.truncations, "Log files truncated in place."),
        ):
            yield CounterMetricFamily(name, help_text, value=value)

        errors = CounterMetricFamily(
            "vllm_log_read_errors",
            "Failures to open or read a log file, by reason (each episode once).",
            labels=["reason"],
        )
        for reason in READ_ERROR_REASONS:
            errors.add_metric([reason], c.read_errors[reason])
        yield errors

        files = GaugeMetricFamily(
            "vllm_log_files",
            "Configured log files by state.",
            labels=["state"],
        )
        for state in FILE_STATES:
            files.add_metric([state], c.files[state])
        yield files

        yield GaugeMetricFamily(
            "vllm_log_unread_bytes",
            "Bytes written to the log files but not read yet (lag).",
            value=c.unread_bytes,
        )
        yield GaugeMetricFamily(
            "vllm_log_last_read_timestamp_seconds",
            "Unix time the exporter last read log data (0 until then).",
            value=c.last_read_time,
        )
        info = GaugeMetricFamily(
            "vllm_log_exporter_build_info", "vllm-log-exporter version.", labels=["version"]
        )
        info.add_metric([__version__], 1)
        yield info

    @staticmethod
    def _lifecycle_families(c: Counts) -> Iterable[Metric]:
        state = GaugeMetricFamily(
            "vllm_log_server_state",
            "1 for the vLLM server's lifecycle state as its log tells it, 0 for the others.",
            labels=["state"],
        )
        for name in STATES:
            state.add_metric([name], 1 if name == c.server_state else 0)
        yield state
        yield GaugeMetricFamily(
            "vllm_log_server_state_since_timestamp_seconds",
            "Unix time of the last lifecycle state transition (0 until the first).",
            value=c.server_state_since,
        )
        version = GaugeMetricFamily(
            "vllm_log_vllm_version_info",
            "The vLLM version the log last announced (no series until one was seen).",
            labels=["version"],
        )
        if c.vllm_version is not None:
            version.add_metric([c.vllm_version], 1)
        yield version
        durations = HistogramMetricFamily(
            "vllm_log_startup_duration_seconds",
            "Durations of completed startups: loading the weights, initialising the engine, total.",
            labels=["phase"],
        )
        for phase in DURATION_PHASES:
            histogram = c.startup_durations[phase]
            cumulative, buckets = 0, []
            for bound, count in zip((*BUCKETS, float("inf")), histogram["buckets"], strict=True):
                cumulative += count
                buckets.append((_bound(bound), cumulative))
            durations.add_metric([phase], buckets, histogram["sum"])
        yield durations
        last = GaugeMetricFamily(
            "vllm_log_last_startup_duration_seconds",
            "Durations of the most recent completed startup, by phase (absent until known).",
            labels=["phase"],
        )
        for phase in DURATION_PHASES:
            if phase in c.last_startup_durations:
                last.add_metric([phase], c.last_startup_durations[phase])
        yield last


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


def build_registry(counts: Counts, lock: threading.RLock | None = None) -> CollectorRegistry:
    """A fresh registry holding only the exporter's collector (nothing global)."""
    registry = CollectorRegistry(auto_describe=False)
    LogCollector(counts, lock, registry)
    return registry
