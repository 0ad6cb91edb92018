"""The runbook section every alert declares, and the names its text may refer to: `{placeholders}`
for the bundle's recorded series and selectors or the section's own `values`, so a runbook always
quotes the queries of the bundle it ships with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..exporter_series import LOG, PROBE, select
from ..vocabulary import Vocabulary
from .expressions import replica_statistic


@dataclass(frozen=True)
class Section:
    meaning: str
    confirm: list[str]  # markdown bullets; {placeholders} filled from the bundle
    act: list[str]
    values: dict[str, str] = field(default_factory=dict)  # placeholders of this section only
    # A page's runbook opens with these: the queries that reproduce it, and the first moves.
    why: list[str] = field(default_factory=list)
    first: list[str] = field(default_factory=list)


def placeholders(v: Vocabulary) -> dict[str, str]:
    """The names every section may quote."""
    n, res, cfg = v.names, v.res, v.cfg

    def name_of(key: str) -> str:
        sig = res.signals.get(key)
        return sig.name if sig is not None else f"(no {key} series in this source)"

    exporter, probe = v.exporter, v.probe
    return {
        "ttft_p95": n.quantile("time_to_first_token", "p95"),
        "itl_p95": n.quantile("inter_token_latency", "p95"),
        "queue_p95": n.quantile("request_queue_time", "p95"),
        # Not recorded (no alert reads it): quoted as the expression a rule would record.
        "prefill_p95": (
            replica_statistic(v, "request_prefill_time", "p95")
            if "request_prefill_time" in res.signals
            else "(no request_prefill_time series in this source)"
        ),
        "waiting": n.requests_waiting,
        "running": n.requests_running,
        "kv": n.kv_cache_usage,
        "kv_series": name_of("kv_cache_usage"),
        "preemptions": n.preemptions,
        "preemptions_ratio": n.preemptions_per_request,
        "errors": n.request_errors,
        "failures": n.request_failures,
        "replicas_ready": n.replicas_ready,
        "replicas_expected": n.replicas_expected,
        "replicas_desired": n.replicas_desired,
        "replica_unready": n.replica_unready,
        "http_errors": n.http_errors,
        "generation_series": name_of("generation_tokens"),
        "running_series": name_of("requests_running"),
        "selector": cfg.vllm_selector,
        "probe_selector": probe,
        "probe_success": select(PROBE, "vllm_probe_success", probe),
        "probe_failures": f"increase({select(PROBE, 'vllm_probe_failures', probe)}[10m])",
        "probe_health": select(PROBE, "vllm_probe_health_up", probe),
        "waiting_series": name_of("requests_waiting"),
        "state": f"{select(LOG, 'vllm_log_server_state', exporter)} == 1",
        "since_start": (
            f"time() - {select(LOG, 'vllm_log_last_event_timestamp_seconds', exporter, event='startup_begin')}"
        ),
        "startup_durations": select(LOG, "vllm_log_last_startup_duration_seconds", exporter),
        "starts": f"increase({select(LOG, 'vllm_log_events', exporter, event='startup_begin')}[1h])",
        "startup_failures": f"increase({select(LOG, 'vllm_log_startup_failures', exporter)}[1h])",
        "version_info": select(LOG, "vllm_log_vllm_version_info", exporter),
        "spec_acceptance": n.spec_acceptance,
        "spec_length": n.spec_accepted_length,
        "rejections": n.rejections,
        "exporter_selector": exporter,
    }
