"""Alerting rules. The alert names are a contract: routing, runbooks and tests use them.

Every alert carries `severity` (critical | warning | info), a fixed `summary`, a
`description` that names the instance and model, a `runbook_url` and a `dashboard_url`.
Alerts read the recording rules of recording.py, so an alert and the dashboard panel
that explains it show the same number.
"""

from __future__ import annotations

import re

from ..config import BundleConfig
from ..promql import number, seconds, selector
from ..signals import Resolution
from . import features, gpu
from .model import Alert, Group
from .names import Names, by, scope_of, slo_miss

EXPORTER_EVENTS = {
    "engine_dead": "VllmEngineDead",
    "oom": "VllmOutOfMemory",
    "startup_failed": "VllmStartupFailed",
}

# (severity, for, long window, short window, burn factor): kubernetes-mixin's four tiers.
BURN_TIERS = (
    ("critical", "2m", "1h", "5m", 14.4),
    ("critical", "15m", "6h", "30m", 6.0),
    ("warning", "1h", "1d", "2h", 3.0),
    ("warning", "3h", "3d", "6h", 1.0),
)


def human_seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:g}ms"
    return f"{value:g}s"


def percent(value: float) -> str:
    return f"{value * 100:g}%"


def alert_groups(res: Resolution, cfg: BundleConfig) -> list[Group]:
    a = cfg.alerts
    n = Names(a.rate_window)
    groups = [
        Group("vllm-obs.latency", tuple(_latency(res, cfg, n))),
        Group("vllm-obs.saturation", tuple(_saturation(res, cfg, n))),
        Group("vllm-obs.errors", tuple(_errors(res, cfg, n))),
        Group("vllm-obs.availability", tuple(_availability(res, cfg, n))),
        Group("vllm-obs.log-events", tuple(_log_events(cfg))),
        Group("vllm-obs.probe", tuple(_probe(res, cfg))),
        Group("vllm-obs.lifecycle", tuple(_lifecycle(res, cfg))),
        Group("vllm-obs.slo-burn", tuple(_burn(res, cfg))),
        Group(features.ALERT_GROUP, tuple(features.alerts(res, cfg))),  # what the source turns on
        Group(gpu.ALERT_GROUP, tuple(gpu.alerts(res, cfg))),  # empty unless gpu.enabled
        Group("vllm-obs.meta", (_watchdog(),)),
    ]
    return [g for g in groups if g.rules]


def _traffic(n: Names, cfg: BundleConfig) -> str:
    return f"{n.requests_finished} > {number(cfg.alerts.min_request_rate)}"


def _latency(res: Resolution, cfg: BundleConfig, n: Names) -> list[Alert]:
    sc = scope_of(cfg, res)
    a = cfg.alerts
    out = []
    for key, name, what, warn, crit, for_ in (
        (
            "time_to_first_token",
            "VllmHighTimeToFirstToken",
            "time to first token",
            a.ttft_p95_warning_seconds,
            a.ttft_p95_critical_seconds,
            a.ttft_for,
        ),
        (
            "inter_token_latency",
            "VllmHighTimePerOutputToken",
            "inter-token latency (time per output token)",
            a.itl_p95_warning_seconds,
            a.itl_p95_critical_seconds,
            a.itl_for,
        ),
    ):
        if key not in res.signals:
            continue
        for severity, threshold in (("warning", warn), ("critical", crit)):
            out.append(
                Alert(
                    name=name,
                    expr=f"{n.quantile(key, 'p95')} > {number(threshold)}\nand {sc.on_instance_model}\n{_traffic(n, cfg)}",
                    for_=for_,
                    severity=severity,
                    summary=f"vLLM p95 {what} is above {human_seconds(threshold)}.",
                    description=(
                        f"p95 {what} of {sc.where} is {{{{ $value | humanizeDuration }}}} "
                        f"(threshold {human_seconds(threshold)}, for {for_})."
                    ),
                    dashboard="instance",
                    threshold=threshold,
                )
            )
    return out


def _saturation(res: Resolution, cfg: BundleConfig, n: Names) -> list[Alert]:
    sc = scope_of(cfg, res)
    a = cfg.alerts
    out = []
    if "requests_waiting" in res.signals:
        out.append(
            Alert(
                name="VllmQueueDepthHigh",
                expr=f"{n.requests_waiting} > {number(a.queue_waiting_threshold)}",
                for_=a.queue_for,
                severity="warning",
                summary="vLLM requests are queueing.",
                description=(
                    f"{{{{ $value }}}} requests are waiting on {sc.where} "
                    f"(threshold {number(a.queue_waiting_threshold)}, for {a.queue_for})."
                ),
                dashboard="kv_cache",
            )
        )
    if res.has("requests_waiting", "requests_running", "kv_cache_usage"):
        out.append(
            Alert(
                name="VllmSchedulerThrottled",
                expr=(
                    f"{n.requests_waiting} > 0\n"
                    f"and {sc.on_instance_model}\nderiv({n.requests_waiting}[{a.throttled_window}]) > 0\n"
                    f"and {sc.on_instance_model}\n{n.kv_cache_usage} < {number(a.throttled_kv_usage_below)}\n"
                    f"and {sc.on_instance_model}\n{n.requests_running} > 0"
                ),
                for_=a.throttled_for,
                severity="warning",
                summary="vLLM's queue grows while the KV cache has room: the scheduler limits are the bottleneck.",
                description=(
                    f"The queue on {sc.where} has kept growing for {a.throttled_window} ({{{{ $value }}}} waiting) "
                    f"while KV-cache usage stays below {percent(a.throttled_kv_usage_below)}; "
                    "raise --max-num-seqs or --max-num-batched-tokens."
                ),
                dashboard="kv_cache",
            )
        )
    if "kv_cache_usage" in res.signals:
        kv = res["kv_cache_usage"]
        usage, engine = n.kv_cache_usage, ""
        if kv.has_label("engine"):
            # Each engine (data-parallel rank) has its own cache: name the one that fills.
            usage = f"max by ({by(sc.instance_model)}, engine) ({selector(kv.name, cfg.vllm_selector)})"
            engine = " engine {{ $labels.engine }}"
        out.append(
            Alert(
                name="VllmKVCachePressure",
                expr=f"{usage} > {number(a.kv_usage_threshold)}",
                for_=a.kv_usage_for,
                severity="warning",
                summary="vLLM's KV cache is nearly full.",
                description=(
                    f"KV-cache usage of {sc.where}{engine} is {{{{ $value | humanizePercentage }}}} "
                    f"(threshold {percent(a.kv_usage_threshold)}, for {a.kv_usage_for}); "
                    "requests will be preempted."
                ),
                dashboard="kv_cache",
            )
        )
        horizon = int(seconds(a.kv_predict_horizon))
        out.append(
            Alert(
                name="VllmKVCacheFillingUp",
                expr=(
                    f"{n.kv_cache_usage} > {number(a.kv_predict_floor)}\n"
                    f"and {sc.on_instance_model}\npredict_linear({n.kv_cache_usage}[{a.kv_predict_window}], {horizon}) >= 1"
                ),
                for_=a.kv_predict_for,
                severity="warning",
                summary="vLLM's KV cache will be full soon.",
                description=(
                    f"KV-cache usage of {sc.where} is {{{{ $value | humanizePercentage }}}} and, at the rate of "
                    f"the last {a.kv_predict_window}, will be full within {a.kv_predict_horizon}."
                ),
                dashboard="kv_cache",
            )
        )
    if "preemptions" in res.signals:
        out.append(
            Alert(
                name="VllmPreemptions",
                expr=(
                    f"{n.preemptions_per_request} > {number(a.preemptions_per_request)}\n"
                    f"and {sc.on_instance_model}\n{_traffic(n, cfg)}"
                ),
                for_=a.preemptions_for,
                severity="warning",
                summary="vLLM is preempting requests for lack of KV cache.",
                description=(
                    f"{sc.where} preempts {{{{ $value | humanize }}}} times per finished request "
                    f"(threshold {number(a.preemptions_per_request)}, for {a.preemptions_for})."
                ),
                dashboard="kv_cache",
            )
        )
    return out


def _errors(res: Resolution, cfg: BundleConfig, n: Names) -> list[Alert]:
    sc = scope_of(cfg, res)
    a = cfg.alerts
    out = []
    for severity, threshold in (("warning", a.error_ratio_warning), ("critical", a.error_ratio_critical)):
        if res.reports_engine_errors:
            out.append(
                Alert(
                    name="VllmRequestErrors",
                    expr=f"{n.request_errors} > {number(threshold)}\nand {sc.on_instance_model}\n{_traffic(n, cfg)}",
                    for_=a.errors_for,
                    severity=severity,
                    labels={"source": "engine"},
                    summary=f"More than {percent(threshold)} of vLLM requests fail.",
                    description=(
                        f"{{{{ $value | humanizePercentage }}}} of the requests of {sc.where} "
                        f'finished with finished_reason="error" (threshold {percent(threshold)}, for {a.errors_for}).'
                    ),
                    dashboard="instance",
                )
            )
        if "http_requests" in res.signals:
            out.append(
                Alert(
                    name="VllmRequestErrors",
                    expr=(
                        f"{n.http_errors} > {number(threshold)}\n"
                        f"and on ({by(sc.instance)})\n{n.http_requests} > {number(a.min_request_rate)}"
                    ),
                    for_=a.errors_for,
                    severity=severity,
                    labels={"source": "http"},
                    summary=f"More than {percent(threshold)} of vLLM requests fail.",
                    description=(
                        f"{{{{ $value | humanizePercentage }}}} of the HTTP requests to {sc.target_ref} "
                        f"answered 5xx (threshold {percent(threshold)}, for {a.errors_for})."
                    ),
                    dashboard="instance",
                )
            )
    return out


def _availability(res: Resolution, cfg: BundleConfig, n: Names) -> list[Alert]:
    sc = scope_of(cfg, res)
    a = cfg.alerts
    up = selector("up", cfg.vllm_selector)
    out = []
    if res.has("generation_tokens", "requests_waiting", "requests_running"):
        tokens = selector(res["generation_tokens"].name, cfg.vllm_selector)
        out.append(
            Alert(
                name="VllmEngineStalled",
                expr=(
                    f"({n.requests_waiting} + {n.requests_running}) > 0\n"
                    f"and {sc.on_instance_model}\nsum by ({by(sc.instance_model)}) (increase({tokens}[{a.stall_window}])) == 0"
                ),
                for_=a.stall_for,
                severity="critical",
                summary="vLLM has requests in flight but generates no tokens: the engine is stuck.",
                description=(
                    f"{{{{ $value }}}} requests are in flight on {sc.where}, yet no token was generated "
                    f"for {a.stall_window}; /health may still answer 200. Restart the server."
                ),
                dashboard="failures",
            )
        )
    down = f"{up} == 0"
    if cfg.prometheus.log_exporters:
        # A server that is loading its model does not listen yet, and one stopped on purpose
        # is not down: the log says which, so neither pages (VllmStartupSlow and
        # VllmRestartLoop watch the starts; a planned stop pages once its grace is over).
        down += f"\nunless on ({by(sc.target)})\n{_quiet_lifecycle(cfg)}"
    out.append(
        Alert(
            name="VllmTargetDown",
            expr=down,
            for_=a.target_down_for,
            severity="critical",
            summary="Prometheus cannot scrape a vLLM server.",
            description=(
                f"{sc.target_ref} (job {{{{ $labels.job }}}}) has not answered scrapes "
                f"for {a.target_down_for}: the server is down or unreachable."
            ),
            dashboard="overview",
        )
    )
    out.append(
        Alert(
            name="VllmMetricsAbsent",
            expr=f"absent({up})",
            for_=a.metrics_absent_for,
            severity="warning",
            labels={"scope": "job"},
            summary="Prometheus scrapes no vLLM target at all.",
            description=(
                # absent() keeps the selector's equality labels, so the job is on the alert.
                f'No target of job "{{{{ $labels.job }}}}" has been scraped for {a.metrics_absent_for}: '
                "service discovery or the scrape configuration is broken."
            ),
            dashboard="overview",
        )
    )
    if "requests_running" in res.signals:
        running = selector(res["requests_running"].name, cfg.vllm_selector)
        out.append(
            Alert(
                name="VllmMetricsAbsent",
                expr=f"{up} == 1\nunless on ({by(sc.instance)})\ngroup by ({by(sc.instance)}) ({running})",
                for_=a.metrics_absent_for,
                severity="warning",
                labels={"scope": "target"},
                summary="A vLLM target answers scrapes but exposes no vLLM series.",
                description=(
                    f"{sc.target_ref} answers scrapes but its vLLM series have been gone for "
                    f"{a.metrics_absent_for}: it is not a vLLM server, or its metrics are broken."
                ),
                dashboard="overview",
            )
        )
    return out


def _log_events(cfg: BundleConfig) -> list[Alert]:
    sc = scope_of(cfg)
    if not cfg.prometheus.log_exporters:
        return []
    a = cfg.alerts
    exporter = cfg.exporter_selector
    texts = {
        "engine_dead": (
            "The vLLM engine died.",
            f"The log of {sc.target_ref} shows the engine died (EngineDeadError or a dead "
            "engine process); the first error above it is the cause.",
        ),
        "oom": (
            "vLLM ran out of memory.",
            f"The log of {sc.target_ref} shows an out-of-memory error (CUDA or CPU allocator).",
        ),
        "startup_failed": (
            "vLLM failed to start.",
            f"The log of {sc.target_ref} shows the server failed to start (engine initialisation, "
            "or the KV cache cannot hold --max-model-len).",
        ),
    }
    out = []
    for event, name in EXPORTER_EVENTS.items():
        summary, description = texts[event]
        # No `for`: a dead engine is not ambiguous, it pages on the first evaluation.
        events = selector("vllm_log_events_total", exporter, f'event="{event}"')
        out.append(
            Alert(
                name=name,
                expr=f"increase({events}[{a.log_event_window}]) > 0",
                severity="critical",
                summary=summary,
                description=description,
                dashboard="failures",
            )
        )
    out.append(
        Alert(
            name="VllmLogExporterDown",
            expr=f"{selector('up', exporter)} == 0",
            for_=a.log_exporter_down_for,
            severity="warning",
            summary="The vLLM log exporter is down: OOM and dead-engine alerts are blind.",
            description=(
                f"The log exporter watching {sc.target_ref} has not answered scrapes for "
                f"{a.log_exporter_down_for}."
            ),
            dashboard="failures",
        )
    )
    return out


def _state(cfg: BundleConfig, states: str) -> str:
    return selector("vllm_log_server_state", cfg.exporter_selector, f'state=~"{states}"')


def _since_start(cfg: BundleConfig) -> str:
    """Seconds since the current start began, per server, from the log."""
    begun = selector("vllm_log_last_event_timestamp_seconds", cfg.exporter_selector, 'event="startup_begin"')
    return f"time() - max by ({by(scope_of(cfg).target)}) ({begun})"


def _quiet_lifecycle(cfg: BundleConfig) -> str:
    """Servers whose log says they are starting, or stopped on purpose within the grace."""
    target = by(scope_of(cfg).target)
    a = cfg.alerts
    since = selector("vllm_log_server_state_since_timestamp_seconds", cfg.exporter_selector)
    return (
        f"(\n  max by ({target}) ({_state(cfg, 'starting|loading')}) == 1\n"
        f"  or\n"
        f"  max by ({target}) ({_state(cfg, 'stopping|stopped')}) == 1\n"
        f"  and on ({target})\n"
        f"  time() - max by ({target}) ({since}) < {int(seconds(a.planned_stop_grace))}\n)"
    )


def _lifecycle(res: Resolution, cfg: BundleConfig) -> list[Alert]:
    if not cfg.prometheus.log_exporters:
        return []
    sc = scope_of(cfg)
    a = cfg.alerts
    target = by(sc.target)
    expected = int(seconds(a.expected_startup))
    starting = f"max by ({target}) ({_state(cfg, 'starting|loading')}) == 1"
    out = []
    for severity, factor in (("warning", 1), ("critical", 2)):
        limit = expected * factor
        out.append(
            Alert(
                name="VllmStartupSlow",
                expr=f"({_since_start(cfg)}) > {limit}\nand on ({target})\n{starting}",
                severity=severity,
                summary="vLLM is taking longer than expected to start.",
                description=(
                    f"{sc.target_ref} has been starting for {{{{ $value | humanizeDuration }}}}, more than "
                    f"{'' if factor == 1 else 'twice '}the expected {a.expected_startup} (log: loading "
                    "weights, profiling, warm-up); it does not serve yet."
                ),
                dashboard="failures",
                threshold=limit,
            )
        )
    begun = selector("vllm_log_events_total", cfg.exporter_selector, 'event="startup_begin"')
    window = a.restart_loop_window
    starts = f"max by ({target}) (max_over_time({begun}[{window}]) - min_over_time({begun}[{window}]))"
    out.append(
        Alert(
            name="VllmRestartLoop",
            expr=(
                f"{starts} >= {number(a.restart_loop_starts)}\n"
                f"unless on ({target})\n"
                f"max by ({target}) (max_over_time({_state(cfg, 'ready')}[{window}])) == 1"
            ),
            severity="critical",
            summary="vLLM keeps restarting and never becomes ready.",
            description=(
                f"{sc.target_ref} started {{{{ $value }}}} times in the last {window} without once "
                "becoming ready: a configuration that cannot work (a model that does not fit, a bad flag) "
                "or a crash during start-up. Restarting again will not help."
            ),
            dashboard="failures",
            threshold=a.restart_loop_starts,
        )
    )
    versions = res.source.release_versions
    if versions:
        # A minor release and its patches: the metric set changes with minor releases.
        pattern = "|".join(re.escape(v) + r"(\..*)?" for v in versions)
        out.append(
            Alert(
                name="VllmVersionDrift",
                expr=(
                    f"max by ({target}, version) "
                    f"({selector('vllm_log_vllm_version_info', cfg.exporter_selector, f'version!~{_quote(pattern)}')}) == 1"
                ),
                severity="info",
                summary="vLLM runs a release this bundle was not generated for.",
                description=(
                    f"The log of {sc.target_ref} announces vLLM {{{{ $labels.version }}}}; this bundle was "
                    f"generated for {', '.join(versions)}. Metric names may have changed: regenerate the "
                    "bundle with `vllm-obs generate --metrics-url` against the upgraded server."
                ),
                dashboard="failures",
            )
        )
    return out


def _quote(text: str) -> str:
    """A PromQL double-quoted string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# Probe failures that mean the server cannot serve (a hang, an engine that errors), as
# opposed to a probe the server turns away (a wrong model name or key: 4xx, bad body).
HUNG_REASONS = "timeout|http_5xx"
REJECTED_REASONS = "http_4xx|bad_body|error"


def _probe(res: Resolution, cfg: BundleConfig) -> list[Alert]:
    if not cfg.prometheus.probes:
        return []
    sc = scope_of(cfg)
    a = cfg.alerts
    probe = cfg.probe_selector
    keyed, target = by(sc.target_model), by(sc.target)
    failing = f"max by ({keyed}) ({selector('vllm_probe_success', probe)}) == 0"

    def failures(reasons: str) -> str:
        series = selector("vllm_probe_failures_total", probe, f'reason=~"{reasons}"')
        return f"sum by ({keyed}) (increase({series}[{a.hung_window}])) > 0"

    where = f"{{{{ $labels.model_name }}}} on {{{{ $labels.instance }}}}{sc.in_cluster}"
    hung = (
        f"{failing}\nand on ({keyed})\n{failures(HUNG_REASONS)}\n"
        f"and on ({target})\nmax by ({target}) ({selector('vllm_probe_health_up', probe)}) == 1"
    )
    if res.has("generation_tokens"):
        # The probe's one-token request waits in vLLM's queue like any other: on a saturated
        # server it times out too. A hung engine generates nothing; a saturated one keeps going,
        # and the queue and latency alerts name its real cause.
        tokens = selector(res["generation_tokens"].name, cfg.vllm_selector)
        hung += (
            f"\nunless on ({target})\nsum by ({target}) (increase({tokens}[{a.hung_progress_window}])) > 0"
        )
    return [
        Alert(
            name="VllmEngineHung",
            expr=hung,
            for_=a.hung_for,
            severity="critical",
            summary="vLLM answers /health but cannot serve a one-token request: the engine is hung.",
            description=(
                f"The canary probe of {where} has failed for {a.hung_for} (timeouts or server errors) while "
                "/health still answers 200. Requests hang; restart the server after taking a py-spy dump."
            ),
            dashboard="failures",
        ),
        Alert(
            name="VllmProbeDown",
            expr=f"{selector('up', probe)} == 0",
            for_=a.probe_down_for,
            severity="warning",
            labels={"cause": "down"},
            summary="A vLLM canary probe is down: a hung engine would go unnoticed.",
            description=(
                f"The vllm-probe at {{{{ $labels.instance }}}}{sc.in_cluster} has not answered scrapes for "
                f"{a.probe_down_for}, so VllmEngineHung cannot fire for the servers it watches."
            ),
            dashboard="failures",
        ),
        Alert(
            name="VllmProbeDown",
            expr=f"{failing}\nand on ({keyed})\n{failures(REJECTED_REASONS)}",
            for_=a.probe_down_for,
            severity="warning",
            labels={"cause": "rejected"},
            summary="vLLM turns the canary probe away: a hung engine would go unnoticed.",
            description=(
                f"The canary probe of {where} gets 4xx or unusable answers "
                f"for {a.probe_down_for}: check its model name and API key."
            ),
            dashboard="failures",
        ),
    ]


def _burn(res: Resolution, cfg: BundleConfig) -> list[Alert]:
    sc = scope_of(cfg)
    out = []
    for key, name, what, objective in (
        (
            "time_to_first_token",
            "VllmTimeToFirstTokenBudgetBurn",
            "time-to-first-token",
            cfg.slo.ttft_objective,
        ),
        (
            "inter_token_latency",
            "VllmTimePerOutputTokenBudgetBurn",
            "time-per-output-token",
            cfg.slo.itl_objective,
        ),
    ):
        if key not in res.signals:
            continue
        budget = 1 - objective
        for severity, for_, long, short, factor in BURN_TIERS:
            limit = f"({number(factor)} * {number(round(budget, 10))})"
            out.append(
                Alert(
                    name=name,
                    expr=(
                        f"{slo_miss(key, long)} > {limit}\n"
                        f"and on ({by(sc.fleet_model)})\n{slo_miss(key, short)} > {limit}"
                    ),
                    for_=for_,
                    severity=severity,
                    labels={"long": long, "short": short},
                    summary=f"vLLM is burning its {what} error budget too fast.",
                    description=(
                        f"Model {{{{ $labels.model_name }}}} (job {{{{ $labels.job }}}}{sc.in_cluster}) misses its {what} "
                        f"SLO on {{{{ $value | humanizePercentage }}}} of requests over {long}, "
                        f"{number(factor)}x the rate its {percent(objective)} objective allows."
                    ),
                    dashboard="overview",
                )
            )
    return out


def _watchdog() -> Alert:
    return Alert(
        name="Watchdog",
        expr="vector(1)",
        severity="info",
        summary="The alerting pipeline is alive.",
        description=(
            "Always firing. If its heartbeat stops arriving at the dead man's switch, Prometheus, "
            "Alertmanager or the path between them is broken."
        ),
        dashboard="overview",
    )
