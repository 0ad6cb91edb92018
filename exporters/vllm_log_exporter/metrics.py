"""The Prometheus collector: renders Counts as metric families on every scrape. Families come from
the exporters' contract; label values only from its closed sets, an engine index from `Engine NNN:`
or the last announced vLLM version of a release's shape: no free log text reaches a label.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from . import __version__
from .contract import family
from .counts import FILE_STATES, READ_ERROR_REASONS, Counts
from .lifecycle_labels import BUCKETS, DURATION_PHASES, STATES
from .patterns import DEATH_REASONS, EVENTS, REASONS

# Family of each periodic-stats gauge, and its key in Counts.stats.
_STATS_FAMILIES = (
    ("vllm_log_requests_running", "running"),
    ("vllm_log_requests_waiting", "waiting"),
    ("vllm_log_kv_cache_usage_ratio", "kv_cache_usage_ratio"),
    ("vllm_log_prompt_throughput_tokens_per_second", "prompt_throughput"),
    ("vllm_log_generation_throughput_tokens_per_second", "generation_throughput"),
    ("vllm_log_stats_last_timestamp_seconds", "timestamp"),
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
        events = family(CounterMetricFamily, "vllm_log_events")
        last = family(GaugeMetricFamily, "vllm_log_last_event_timestamp_seconds")
        for event in EVENTS:
            events.add_metric([event], c.events[event])
            last.add_metric([event], c.last_event_time[event])
        yield events
        yield last

        reasons = family(CounterMetricFamily, "vllm_log_startup_failures")
        for reason in REASONS:
            reasons.add_metric([reason], c.startup_failures[reason])
        yield reasons

        deaths = family(CounterMetricFamily, "vllm_log_engine_deaths")
        for reason in DEATH_REASONS:
            deaths.add_metric([reason], c.engine_deaths[reason])
        yield deaths

        yield from self._lifecycle_families(c)

        if c.stats:
            for name, key in _STATS_FAMILIES:
                gauge = family(GaugeMetricFamily, name)
                for engine in sorted(c.stats):
                    gauge.add_metric([engine], c.stats[engine][key])
                yield gauge

        for name, value in (
            ("vllm_log_lines", c.lines),
            ("vllm_log_bytes", c.bytes),
            ("vllm_log_undecodable_lines", c.undecodable_lines),
            ("vllm_log_oversized_lines", c.oversized_lines),
            ("vllm_log_rotations", c.rotations),
            ("vllm_log_truncations", c.truncations),
        ):
            yield family(CounterMetricFamily, name, value=value)

        errors = family(CounterMetricFamily, "vllm_log_read_errors")
        for reason in READ_ERROR_REASONS:
            errors.add_metric([reason], c.read_errors[reason])
        yield errors

        files = family(GaugeMetricFamily, "vllm_log_files")
        for state in FILE_STATES:
            files.add_metric([state], c.files[state])
        yield files

        yield family(GaugeMetricFamily, "vllm_log_unread_bytes", value=c.unread_bytes)
        yield family(GaugeMetricFamily, "vllm_log_last_read_timestamp_seconds", value=c.last_read_time)
        info = family(GaugeMetricFamily, "vllm_log_exporter_build_info")
        info.add_metric([__version__], 1)
        yield info

    @staticmethod
    def _lifecycle_families(c: Counts) -> Iterable[Metric]:
        state = family(GaugeMetricFamily, "vllm_log_server_state")
        for name in STATES:
            state.add_metric([name], 1 if name == c.server_state else 0)
        yield state
        yield family(
            GaugeMetricFamily, "vllm_log_server_state_since_timestamp_seconds", value=c.server_state_since
        )
        version = family(GaugeMetricFamily, "vllm_log_vllm_version_info")
        if c.vllm_version is not None:
            version.add_metric([c.vllm_version], 1)
        yield version
        durations = family(HistogramMetricFamily, "vllm_log_startup_duration_seconds")
        for phase in DURATION_PHASES:
            histogram = c.startup_durations[phase]
            cumulative, buckets = 0, []
            for bound, count in zip((*BUCKETS, float("inf")), histogram["buckets"], strict=True):
                cumulative += count
                buckets.append((_bound(bound), cumulative))
            durations.add_metric([phase], buckets, histogram["sum"])
        yield durations
        last = family(GaugeMetricFamily, "vllm_log_last_startup_duration_seconds")
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
