"""Failures: what the log exporter saw (OOM, dead engine, failed start) and what is firing."""

from __future__ import annotations

from ..config import BundleConfig
from ..rules.areas.meta import DELIVERIES, DELIVERY_FAILURES, RELOADED, RULE_FAILURES, SEND_ERRORS, SENT
from ..signals import Resolution
from ..vocabulary import DASHBOARDS, Vocabulary
from .panels.common import CRIT, keep
from .panels.queries import TOP, Filters
from .spec import Dashboard, Panel, Query, Row


def failures(v: Vocabulary) -> Dashboard:
    res, cfg = v.res, v.cfg
    f = Filters(v, engine=False)
    window = cfg.alerts.log_event_window
    rows = []
    if cfg.prometheus.log_exporters:
        counts = tuple(
            Panel(
                title=title,
                description=f"{what} in the selected time range, from the vLLM logs.",
                unit="none",
                kind="stat",
                queries=(Query(f"sum(increase({f.log('vllm_log_events', event=event)}[$__range]))", title),),
                thresholds=((1, CRIT),),
                width=6,
                height=5,
            )
            for event, title, what in (
                ("engine_dead", "Engine deaths", "Engine deaths (EngineDeadError and kin)"),
                ("oom", "Out of memory", "Out-of-memory errors"),
                ("startup_failed", "Failed starts", "Starts that never became ready"),
                ("request_error", "Request errors", "Failed requests seen in the log"),
            )
        )
        events = (
            Panel(
                title="Log events",
                description=f"Events per {window}: OOM, dead engine and failed starts are incidents; the rest is context.",
                unit="none",
                kind="bars",
                queries=(
                    Query(f"sum by (event) (increase({f.log('vllm_log_events')}[{window}]))", "{{event}}"),
                ),
                stack=True,
                min=0,
            ),
            Panel(
                title="Failed starts by reason",
                description="Why the server did not come up (KV cache too small, no memory, initialisation).",
                unit="none",
                kind="bars",
                queries=(
                    Query(
                        f"sum by (reason) (increase({f.log('vllm_log_startup_failures')}[{window}]))",
                        "{{reason}}",
                    ),
                ),
                stack=True,
                min=0,
            ),
            Panel(
                title="Engine deaths by cause",
                description=(
                    "The cause the log gave for each death: out of memory, a GPU fault (illegal memory access, "
                    "ECC), an NCCL timeout, or other (none named: a killed process)."
                ),
                unit="none",
                kind="bars",
                queries=(
                    Query(
                        f"sum by (reason) (increase({f.log('vllm_log_engine_deaths')}[{window}]))",
                        "{{reason}}",
                    ),
                ),
                stack=True,
                min=0,
            ),
            Panel(
                title="Engine state from the logs",
                description=(
                    "Running and waiting requests and KV-cache usage from the periodic stats line: they "
                    f"outlive a dead /metrics endpoint. The {TOP} highest servers of each."
                ),
                unit="none",
                queries=(
                    Query(
                        f.worst(f"sum by ({f.per_replica}) ({f.log('vllm_log_requests_running')})"),
                        "running {{instance}}",
                    ),
                    Query(
                        f.worst(f"sum by ({f.per_replica}) ({f.log('vllm_log_requests_waiting')})"),
                        "waiting {{instance}}",
                    ),
                    Query(
                        f.worst(f"max by ({f.per_replica}) ({f.log('vllm_log_kv_cache_usage_ratio')}) * 100"),
                        "KV cache % {{instance}}",
                    ),
                ),
                min=0,
                may_be_empty="the stats line is logged at DEBUG while the engine is idle",
            ),
            Panel(
                title="Log exporter health",
                description=(
                    "Lines read per second and bytes not yet read: a growing backlog means the exporter lags. "
                    f"The {TOP} busiest exporters and the {TOP} largest backlogs."
                ),
                unit="none",
                queries=(
                    Query(
                        f.worst(
                            f"sum by ({f.per_replica}) (rate({f.log('vllm_log_lines')}[$__rate_interval]))"
                        ),
                        "lines/s {{instance}}",
                    ),
                    Query(
                        f.worst(f"sum by ({f.per_replica}) ({f.log('vllm_log_unread_bytes')})"),
                        "unread bytes {{instance}}",
                    ),
                ),
                min=0,
            ),
        )
        rows += [Row("Incidents", counts), Row("Events", events), Row("Lifecycle", _lifecycle_panels(res, f))]
    if cfg.prometheus.probes:
        rows.append(Row("Canary probe", _probe_panels(f)))
    rows.append(Row("Engine progress", keep(_progress(res, cfg, f), _corrupted(res, f))))
    rows.append(
        Row(
            "Alerts and targets",
            (
                Panel(
                    title="Alerts firing",
                    description="vLLM alerts Prometheus is firing, by name and severity.",
                    unit="none",
                    queries=(
                        Query(
                            'sum by (alertname, severity) (ALERTS{alertstate="firing", alertname=~"Vllm.*|WatchdogVllmObs"})',
                            "{{alertname}} ({{severity}})",
                        ),
                    ),
                    kind="bars",
                    stack=True,
                    min=0,
                ),
                Panel(
                    title="Targets up",
                    description=(
                        "1 while Prometheus can scrape the server; a dead engine takes it down. The "
                        f"{TOP} lowest: any target down shows first."
                    ),
                    unit="none",
                    queries=(Query(f.worst(f"up{f.target}", lowest=True), "{{instance}}"),),
                    min=0,
                    max=1,
                ),
            ),
        )
    )
    if cfg.prometheus.prometheus_job:
        rows.append(Row("Monitoring pipeline", _pipeline_panels(cfg, f)))
    return Dashboard(
        key="failures",
        title=DASHBOARDS["failures"],
        description="Out-of-memory errors, dead engines and failed starts from the logs, and the alerts firing.",
        rows=tuple(rows),
        variables=f.variables(),
        annotations=(f.alert_annotation(),),
    )


def _progress(res: Resolution, cfg: BundleConfig, f: Filters) -> Panel | None:
    """What VllmEngineStalled judges: requests in flight while no token comes out."""
    if not res.has("generation_tokens", "requests_waiting", "requests_running"):
        return None
    n = f.names
    in_flight = f"({n.requests_running}{f.replica} + {n.requests_waiting}{f.replica})"
    tokens = f"{n.generation_tokens}{f.replica}"
    keys = f.per_replica_model
    # Worst first: requests in flight per token/s (+1 so that no tokens at all ranks highest).
    stuck = f.worst(f"({in_flight} / ({tokens} + 1))")
    return Panel(
        title="Requests in flight vs tokens generated",
        description=(
            f"Requests running or waiting against tokens generated per second ({cfg.alerts.rate_window} rate). "
            f"Requests in flight with no token for {cfg.alerts.stall_window} is a stuck engine "
            "(VllmEngineStalled), even while /health answers 200. The replicas with the most requests in "
            f"flight per token generated ({TOP}), each with both lines."
        ),
        unit="none",
        queries=(
            Query(f"{in_flight}\nand on ({keys}) {stuck}", "in flight {{instance}} {{model_name}}"),
            Query(f"{tokens}\nand on ({keys}) {stuck}", "tokens/s {{instance}} {{model_name}}"),
        ),
        min=0,
    )


def _corrupted(res: Resolution, f: Filters) -> Panel | None:
    if "corrupted_requests" not in res.signals:
        return None
    sig = res["corrupted_requests"]
    return Panel(
        title="Requests with NaN logits",
        description=(
            "Requests whose logits held NaNs (only counted with the NaN check on): a numerical fault of the "
            "model or the hardware; they return garbage."
        ),
        unit="reqps",
        queries=(Query(f.worst(f.rate(sig, f.per_replica_model)), "{{instance}} {{model_name}}"),),
        min=0,
    )


def _probe_panels(f: Filters) -> tuple[Panel, ...]:
    """What the one-token canary request sees: the only view of an engine that hangs with /health at 200."""
    per = f.per_replica_model
    return (
        Panel(
            title="Canary probe success",
            description=(
                "1 while the probe's one-token request gets an answer. 0 with /health still at 1 is a hung "
                f"engine (VllmEngineHung): requests hang while /health says 200. The {TOP} lowest of each."
            ),
            unit="none",
            queries=(
                Query(
                    f.worst(f"max by ({per}) ({f.probed('vllm_probe_success')})", lowest=True),
                    "probe {{instance}} {{model_name}}",
                ),
                Query(
                    f.worst(f"max by ({f.per_replica}) ({f.probed('vllm_probe_health_up')})", lowest=True),
                    "/health {{instance}}",
                ),
            ),
            min=0,
            max=1,
        ),
        Panel(
            title="Canary probe latency",
            description=(
                f"p50 and p95 time to answer the probe's one-token request (successful probes only): the {TOP} "
                "slowest servers of each."
            ),
            unit="s",
            queries=tuple(
                Query(
                    f.worst(
                        f"histogram_quantile({q}, sum by ({per}, le) "
                        f"(rate({f.probed('vllm_probe_duration_seconds_bucket')}[$__rate_interval])))"
                    ),
                    f"p{int(q * 100)} {{{{instance}}}} {{{{model_name}}}}",
                )
                for q in (0.5, 0.95)
            ),
            min=0,
        ),
        Panel(
            title="Canary probe failures by reason",
            description=(
                "timeout: hung or overloaded; refused: down or restarting; http_5xx: the engine errors; "
                "http_4xx: wrong model name or API key, or a pooling model without --mode embed (VllmProbeDown); "
                "bad_body: not vLLM answering. "
                f"The {TOP} largest (server, reason)."
            ),
            unit="none",
            kind="bars",
            queries=(
                Query(
                    f.worst(
                        f"sum by ({f.per_replica}, reason) (increase({f.probed('vllm_probe_failures')}[$__rate_interval]))"
                    ),
                    "{{reason}} {{instance}}",
                ),
            ),
            stack=True,
            min=0,
        ),
    )


def _lifecycle_panels(res: Resolution, f: Filters) -> tuple[Panel, ...]:
    """Starts, stops and restarts as the log tells them: the server cannot report them itself."""
    built_for = ", ".join(res.source.release_versions) or "a release newer than the catalog"
    return (
        Panel(
            title="Server state",
            description=(
                "The state the log shows: starting and loading (not listening yet), ready, stopping and "
                "stopped (planned), failed_start, dead. A start that never reaches ready is VllmStartupSlow; "
                "starts that keep failing are VllmRestartLoop. Servers in each state (one server "
                "selected: 1 in its state)."
            ),
            unit="none",
            kind="bars",
            queries=(
                Query(
                    f"count by (state) (max by ({f.per_replica}, state) ({f.log('vllm_log_server_state')}) > 0)",
                    "{{state}}",
                ),
            ),
            stack=True,
            min=0,
        ),
        Panel(
            title="Start-up time per restart",
            description=(
                "Seconds each phase of the last start took (weights, engine_init: profiling, KV cache and "
                "warm-up, total: start marker to ready). Size alerts.expected_startup and the Kubernetes "
                f"startupProbe from the total, with a margin of at least 30 s. The {TOP} slowest (server, phase)."
            ),
            unit="s",
            queries=(
                Query(
                    f.worst(
                        f"max by ({f.per_replica}, phase) ({f.log('vllm_log_last_startup_duration_seconds')})"
                    ),
                    "{{phase}} {{instance}}",
                ),
            ),
            min=0,
        ),
        Panel(
            title="vLLM version (from the log)",
            description=(
                f"The release the log announces. This bundle was generated for vLLM {built_for}; another "
                "minor release is VllmVersionDrift: regenerate the bundle."
            ),
            unit="none",
            kind="stat",
            queries=(
                Query(
                    f"count by (version) (max by ({f.per_replica}, version) ({f.log('vllm_log_vllm_version_info')}))",
                    "{{version}}",
                ),
            ),
            text_mode="name",
            width=6,
            height=5,
        ),
    )


def _pipeline_panels(cfg: BundleConfig, f: Filters) -> tuple[Panel, ...]:
    """The pipeline every alert goes through: Prometheus' rule evaluations and notifications,
    Alertmanager's deliveries, both configuration reloads (VllmObs* alerts)."""
    p = cfg.prometheus
    prom, am = f.job(p.prometheus_job), f.job(p.alertmanager_job)
    groups = f.job(p.prometheus_job, 'rule_group=~".*;vllm-obs\\\\..*"')
    return (
        Panel(
            title="Rule evaluation failures",
            description="Failed evaluations of the bundle's rule groups per second: their alerts cannot fire.",
            unit="none",
            queries=(
                Query(
                    f"sum by (rule_group) (rate({RULE_FAILURES}{groups}[$__rate_interval]))",
                    "{{rule_group}}",
                ),
            ),
            min=0,
            width=8,
        ),
        Panel(
            title="Notifications failing",
            description=(
                "The share of alerts Prometheus failed to send to Alertmanager, and of notifications "
                "Alertmanager failed to deliver, by integration: alerts that reach nobody "
                "(VllmObsNotificationsFailing judges it over alerts.notification_window)."
            ),
            unit="percentunit",
            # 0, not 0/0, while nothing was sent: a quiet pipeline has failed nothing.
            queries=(
                Query(_failed_share(SEND_ERRORS, SENT, prom, ""), "Prometheus to Alertmanager"),
                Query(_failed_share(DELIVERY_FAILURES, DELIVERIES, am, "integration"), "{{integration}}"),
            ),
            min=0,
            width=8,
        ),
        Panel(
            title="Configuration reloads",
            description="1 while the last configuration reload succeeded; 0 runs the previous configuration.",
            unit="none",
            queries=(
                Query(f"min({RELOADED['prometheus']}{prom})", "Prometheus"),
                Query(f"min({RELOADED['alertmanager']}{am})", "Alertmanager"),
            ),
            min=0,
            max=1,
            width=8,
            may_be_empty="Prometheus and Alertmanager are scraped under other jobs (prometheus.prometheus_job)",
        ),
    )


def _failed_share(failed: str, attempted: str, selector: str, by: str) -> str:
    """failed / attempted over the rate interval, 0 where nothing was attempted."""
    agg = f"sum by ({by})" if by else "sum"
    attempts = f"{agg} (rate({attempted}{selector}[$__rate_interval]))"
    return f"{agg} (rate({failed}{selector}[$__rate_interval]))\n/ ({attempts} > 0)\nor {attempts} * 0"
