"""The probe's metrics: per-target state under one lock, rendered by a custom collector so a scrape
sees one snapshot (`requests - sum(failures)` is always the probes vLLM answered). Families come from
the exporters' contract; label values only from the targets, the model name sent and outcome.REASONS.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from . import __version__
from .contract import FAMILIES, family
from .outcome import HTTP_4XX, REASONS, Outcome

BUCKETS = FAMILIES["vllm_probe_duration_seconds"].buckets  # from the exporters' contract
UNKNOWN_MODEL = "unknown"


@dataclass
class ModelSeries:
    """Series labelled with (target, model_name): they start afresh when the model changes."""

    success: float = 0.0
    last_success: float = 0.0
    requests: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    duration_sum: float = 0.0
    duration_count: int = 0


@dataclass
class TargetSeries:
    model: str
    by_model: ModelSeries = field(default_factory=ModelSeries)
    skipped: int = 0
    health_up: float = 0.0
    last_probe: float = 0.0
    # Readiness (not exported as metrics): failed probes since the last success, the last of
    # them in a row that saw the engine's counters stand still, the last reading, and whether
    # a probe ever succeeded.
    failures_in_row: int = 0
    stalls_in_row: int = 0
    progress_mark: float | None = None
    ever_ok: bool = False


class ProbeMetrics:
    """Every series the probe exports; thread-safe; each record_* is one atomic update."""

    def __init__(self, targets: dict[str, str | None], clock: Callable[[], float]) -> None:
        """`targets` maps each target label to its configured model (None: discovered)."""
        self.clock = clock
        self.lock = threading.Lock()
        self.targets = {instance: TargetSeries(model or UNKNOWN_MODEL) for instance, model in targets.items()}

    def record_probe(
        self,
        instance: str,
        model: str | None,
        outcome: Outcome,
        health_up: bool,
        progress: float | None = None,
    ) -> None:
        """`progress`: the engine's progress counters read after a failure (None: not read)."""
        now = self.clock()
        with self.lock:
            series = self.targets[instance]
            if model is not None and model != series.model:
                series.model, series.by_model = model, ModelSeries()
            current = series.by_model
            current.requests += 1
            if outcome.ok:
                assert outcome.latency is not None
                current.success, current.last_success = 1.0, now
                index = bisect.bisect_left(BUCKETS, outcome.latency)
                for i in range(index, len(BUCKETS)):
                    current.buckets[i] += 1
                current.duration_sum += outcome.latency
                current.duration_count += 1
            else:
                assert outcome.reason is not None
                current.success = 0.0
                current.failures[outcome.reason] += 1
            if outcome.ok:
                series.failures_in_row, series.stalls_in_row, series.ever_ok = 0, 0, True
                series.progress_mark = None
            elif outcome.reason != HTTP_4XX:
                # A 4xx turns the probe away (a wrong key or model): the server answers, so it is
                # the probe's problem (VllmProbeDown), and must not take every replica out.
                series.failures_in_row += 1
                mark = series.progress_mark
                if progress is not None and mark is not None and progress > mark:
                    series.stalls_in_row = 0  # busy: the probe waited in a queue that moves
                else:
                    series.stalls_in_row += 1
                if progress is not None:
                    series.progress_mark = progress
            series.health_up = 1.0 if health_up else 0.0
            series.last_probe = now

    def readiness(self, instance: str, not_ready_after: int) -> tuple[bool, str]:
        """Whether the target should take traffic, and why in a few words: not before its first
        successful probe (a server still loading), nor once `not_ready_after` probes in a row failed
        while the engine's counters stood still (a hang; a queue moves them); ready at a success."""
        with self.lock:
            series = self.targets[instance]
            failed, stalled, ever_ok = series.failures_in_row, series.stalls_in_row, series.ever_ok
        if not ever_ok:
            return False, f"no probe has succeeded yet ({failed} failed)"
        if stalled >= not_ready_after:
            return False, (
                f"{failed} probes in a row failed, the last {stalled} with no engine progress "
                f"(not ready after {not_ready_after})"
            )
        if failed:
            return True, (
                f"ready ({failed} probes in a row failed, the last {stalled} with no engine progress; "
                f"not ready after {not_ready_after})"
            )
        return True, "ready"

    def record_skip(self, instance: str) -> None:
        with self.lock:
            self.targets[instance].skipped += 1

    # -- rendering ---------------------------------------------------------------------------

    def collect(self) -> Iterable[Metric]:
        with self.lock:
            return list(self._families())

    def _families(self) -> Iterable[Metric]:
        success = family(GaugeMetricFamily, "vllm_probe_success")
        duration = family(HistogramMetricFamily, "vllm_probe_duration_seconds")
        last_success = family(GaugeMetricFamily, "vllm_probe_last_success_timestamp_seconds")
        requests = family(CounterMetricFamily, "vllm_probe_requests")
        failures = family(CounterMetricFamily, "vllm_probe_failures")
        skipped = family(CounterMetricFamily, "vllm_probe_skipped")
        health = family(GaugeMetricFamily, "vllm_probe_health_up")
        last_probe = family(GaugeMetricFamily, "vllm_probe_last_probe_timestamp_seconds")
        for instance, series in self.targets.items():
            labels = [instance, series.model]
            current = series.by_model
            success.add_metric(labels, current.success)
            last_success.add_metric(labels, current.last_success)
            requests.add_metric(labels, current.requests)
            for reason in REASONS:
                failures.add_metric([*labels, reason], current.failures[reason])
            duration.add_metric(
                labels,
                buckets=[
                    *(
                        (floatToGoString(bound), count)
                        for bound, count in zip(BUCKETS, current.buckets, strict=True)
                    ),
                    ("+Inf", current.duration_count),
                ],
                sum_value=current.duration_sum,
            )
            skipped.add_metric([instance], series.skipped)
            health.add_metric([instance], series.health_up)
            last_probe.add_metric([instance], series.last_probe)
        info = family(GaugeMetricFamily, "vllm_probe_build_info")
        info.add_metric([__version__], 1)
        yield from (success, duration, last_success, requests, failures, skipped, health, last_probe, info)


def build_registry(metrics: ProbeMetrics) -> CollectorRegistry:
    """A fresh registry holding only the probe's collector (nothing global)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    return registry
