"""Every knob of a bundle, with its default and its documentation, in one place. A user overrides
knobs with a YAML file shaped like `vllm-obs default-config`; unknown keys and wrongly typed values
are errors naming the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import BundleError
from .promql import equality_labels, seconds

_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def knob(default: Any, doc: str, *, bucket_bound: bool = False, shapes_rules: bool = False) -> Any:
    """A config field: its default and the one-line documentation shown in the defaults file.
    bucket_bound: a latency threshold a histogram answers; shapes_rules: a value that changes which
    rules exist or their form. Either keeps the knob out of the mixin's `_config` (regenerate)."""
    metadata = {"doc": doc, "mixin": not (bucket_bound or shapes_rules)}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: _copy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _copy(value: Any) -> Any:
    return yaml.safe_load(yaml.safe_dump(value))


@dataclass(frozen=True)
class LogExporterTarget:
    target: str = knob("vllm-log-exporter:9400", "host:port of one vllm-log-exporter")
    vllm_instance: str = knob(
        "vllm:8000",
        "the instance label of the vLLM server whose logs it reads; its series get this "
        "instance, so log-based alerts line up (and inhibit) with that server's other alerts",
    )


@dataclass(frozen=True)
class PrometheusSection:
    vllm_job: str = knob("vllm", "job label of the vLLM API servers")
    vllm_targets: list[str] = knob(["vllm:8000"], "host:port of every vLLM API server to scrape")
    extra_selector: str = knob(
        "",
        'extra label matchers added to every vLLM query, e.g. namespace="llm" '
        "(pasted inside {} after the job matcher)",
    )
    log_exporter_job: str = knob("vllm-log-exporter", "job label of the log exporters")
    log_exporters: list[LogExporterTarget] = knob(
        [{"target": "vllm-log-exporter:9400", "vllm_instance": "vllm:8000"}],
        "log exporters to scrape, each with the vLLM instance it watches",
    )
    probe_job: str = knob("vllm-probe", "job label of the canary probes (vllm-probe)")
    probes: list[str] = knob(
        ["vllm-probe:9401"],
        "host:port of every vllm-probe to scrape ([] if you run none); each sends the vLLM servers it "
        "watches a one-token request, which is how a hung engine with /health at 200 shows",
    )
    alertmanagers: list[str] = knob(["alertmanager:9093"], "host:port of the Alertmanagers")
    prometheus_job: str = knob(
        "prometheus",
        "job label of Prometheus' own metrics (self-monitoring: failed rule evaluations, notifications "
        "and reloads page); kube-prometheus calls it prometheus-k8s",
    )
    prometheus_targets: list[str] = knob(
        ["prometheus:9090"], "host:port Prometheus scrapes itself at ([] where another job already does)"
    )
    alertmanager_job: str = knob(
        "alertmanager",
        "job label of Alertmanager's own metrics; the bundle scrapes the Alertmanagers above under it "
        "(kube-prometheus: alertmanager-main)",
    )
    scrape_alertmanagers: bool = knob(
        True, "scrape the Alertmanagers above for their own metrics (false where another job already does)"
    )
    scrape_interval: str = knob("15s", "how often Prometheus scrapes vLLM and the exporters")
    scrape_timeout: str = knob("10s", "scrape timeout; must not exceed scrape_interval")
    evaluation_interval: str = knob("15s", "how often Prometheus evaluates the rules")
    metrics_path: str = knob("/metrics", "path of vLLM's metrics endpoint")
    scheme: str = knob("http", "http or https, for the vLLM targets")
    bearer_token_file: str = knob(
        "", "file Prometheus reads a bearer token from for the vLLM targets (empty: none)"
    )
    tls_insecure_skip_verify: bool = knob(False, "skip TLS certificate checks for the vLLM targets")
    external_labels: dict[str, str] = knob({}, "labels Prometheus adds to every alert it sends")
    multi_cluster: bool = knob(
        False,
        "keep the cluster label in every aggregation, alert, inhibition and notification group, and "
        "add a cluster variable to the dashboards; turn on where the rules see series from several "
        "clusters (Thanos Ruler, the Mimir ruler, or a Prometheus whose targets carry the label)",
    )
    cluster_label: str = knob("cluster", "the label that names the cluster a series comes from")
    pod_labels: bool = knob(
        False,
        "keep namespace and pod in every per-replica aggregation and namespace in every fleet-wide "
        "one, so SLOs, capacity and alerts are per namespace and name the pod; the Kubernetes output "
        "(kubernetes/generated/) always does, turn on for these rule files where Prometheus scrapes pods",
    )


@dataclass(frozen=True)
class AlertsSection:
    rate_window: str = knob("5m", "window of the rates and quantiles that alerts and panels use")
    ttft_p95_warning_seconds: float = knob(
        2.5,
        "one replica's p95 time to first token above this warns (the SLO burn alerts page); a "
        "bucket bound of the histogram, so the p95 is not an interpolation",
        bucket_bound=True,
    )
    ttft_for: str = knob("3m", "how long the TTFT condition must hold")
    itl_p95_warning_seconds: float = knob(
        0.2,
        "one replica's p95 inter-token latency above this warns (the SLO burn alerts page); a "
        "bucket bound of the histogram",
        bucket_bound=True,
    )
    itl_for: str = knob("5m", "how long the inter-token latency condition must hold")
    queue_time_p95_warning_seconds: float = knob(
        1.0,
        "one replica's p95 time waiting for a slot above this warns: the queue's share of time to "
        "first token; a bucket bound of the histogram",
        bucket_bound=True,
    )
    queue_time_for: str = knob("3m", "how long the queue-time condition must hold")
    min_requests: float = knob(
        20,
        "requests (the canary's left out) a replica must finish within rate_window before its "
        "latency, error and preemption alerts judge it, so one slow request on an idle replica "
        "does not alert",
    )
    queue_waiting_threshold: float = knob(
        20,
        "requests waiting above this (per replica and model) warns, while alerts.max_num_seqs is 0; "
        "with it set, queue_waiting_per_slot decides",
    )
    queue_waiting_per_slot: float = knob(
        0.5,
        "with alerts.max_num_seqs set, requests waiting above this many per slot (--max-num-seqs) warn: "
        "at 0.5 a new request waits about half a request's duration before its prefill starts",
        shapes_rules=True,  # written only as its product with max_num_seqs
    )
    queue_for: str = knob(
        "5m",
        "how long the queue must stay above the threshold: longer than a normal peak's queue lasts "
        "(docs/alerts.md, 'How long saturation must last'); a queue users feel pages as SLO burn",
    )
    throttled_kv_usage_below: float = knob(
        0.5, "VllmSchedulerThrottled: the queue grows while KV-cache usage stays below this"
    )
    throttled_window: str = knob("10m", "VllmSchedulerThrottled: window over which the queue grows")
    throttled_for: str = knob("10m", "VllmSchedulerThrottled: how long it must hold")
    max_num_seqs: float = knob(
        0,
        "the servers' --max-num-seqs (times the data-parallel engines), so VllmSchedulerThrottled and "
        "VllmGpuIdleWhileBusy can tell 'every slot taken'; 0: the peak of running requests over the last "
        "hour stands for it",
        shapes_rules=True,
    )
    kv_usage_threshold: float = knob(0.90, "KV-cache usage (0-1) above this warns")
    kv_usage_for: str = knob(
        "5m",
        "how long KV-cache usage must stay above the threshold while requests wait: longer than a "
        "normal peak fills it (docs/alerts.md, 'How long saturation must last')",
    )
    kv_predict_window: str = knob("15m", "VllmKVCacheFillingUp: history used for the linear prediction")
    kv_predict_horizon: str = knob("15m", "VllmKVCacheFillingUp: warn when full within this time")
    kv_predict_floor: float = knob(
        0.75, "VllmKVCacheFillingUp: only predict when usage is already above this"
    )
    kv_predict_for: str = knob("5m", "VllmKVCacheFillingUp: how long the prediction must hold")
    preemptions_per_request: float = knob(
        0.05, "preemptions per finished request above this warns (normalised by traffic)"
    )
    preemptions_for: str = knob("10m", "how long the preemption ratio must stay high")
    error_ratio_warning: float = knob(
        0.05,
        "share of one replica's requests failing (vLLM's count or HTTP 5xx on the inference "
        "handlers, whichever is larger) above this warns (the availability SLO pages)",
    )
    errors_for: str = knob("5m", "how long the error ratio must stay high")
    stall_window: str = knob(
        "5m", "VllmEngineStalled: requests are in flight yet no token came out for this long"
    )
    stall_for: str = knob("2m", "VllmEngineStalled: how long the stall must hold after the window")
    target_down_for: str = knob("2m", "how long a vLLM target must be down before paging")
    metrics_absent_for: str = knob("10m", "how long vLLM series may be missing before alerting")
    hung_for: str = knob(
        "2m",
        "VllmEngineHung: how long the canary probe must keep failing (timeouts or 5xx) while /health "
        "answers 200",
    )
    hung_window: str = knob(
        "5m", "VllmEngineHung: the failures must include a timeout or 5xx within this window"
    )
    hung_progress_window: str = knob(
        "1m",
        "VllmEngineHung: a server that generated any token within this window is saturated, not hung "
        "(the probe waits in its queue like any other request)",
    )
    probe_down_for: str = knob("5m", "how long a canary probe may be down or refused before warning")
    log_event_window: str = knob(
        "10m", "log-exporter events (OOM, dead engine, failed start) stay firing this long"
    )
    log_event_for: str = knob(
        "1m",
        "a log-exporter event fires this long after it is seen: longer than a scrape and two rule "
        "evaluations, so the lost capacity that explains it holds it back in Alertmanager before it is sent",
    )
    spec_decode_acceptance_below: float = knob(
        0.2,
        "VllmSpecDecodeAcceptanceLow: share of draft tokens accepted below this warns (drafts then cost "
        "more than they save; an n-gram proposer on text that does not repeat sits near 0)",
    )
    spec_decode_for: str = knob("15m", "VllmSpecDecodeAcceptanceLow: how long the acceptance must stay low")
    rejections_for: str = knob("2m", "VllmRequestsRejected: how long vLLM must keep turning requests away")
    kv_transfer_window: str = knob(
        "10m", "VllmKVTransferFailures: a failed KV transfer or offload allocation keeps it firing this long"
    )
    engine_kv_spread: float = knob(
        0.5, "VllmEngineImbalance: KV-cache usage of the fullest and the emptiest engine differ by more"
    )
    engine_waiting_spread: float = knob(
        10,
        "VllmEngineImbalance: waiting requests of the longest and the shortest engine queue differ by more",
    )
    engine_imbalance_for: str = knob("15m", "VllmEngineImbalance: how long the imbalance must hold")
    expected_startup: str = knob(
        "10m",
        "how long a start may take (start marker to `Application startup complete.` in the log): "
        "VllmTargetDown stays quiet while a start is within it, VllmStartupSlow warns past it and pages "
        'past twice it; set it from vllm_log_startup_duration_seconds{phase="total"} plus a margin',
    )
    planned_stop_grace: str = knob(
        "1h",
        "after a planned shutdown (the log shows it), VllmTargetDown stays quiet this long: a stop on "
        "purpose pages nobody, a server that does not come back pages",
    )
    restart_loop_starts: float = knob(
        3, "VllmRestartLoop: this many starts within the window with no period of readiness"
    )
    restart_loop_window: str = knob("30m", "VllmRestartLoop: the window the starts are counted in")
    log_exporter_down_for: str = knob("5m", "how long a log exporter may be down before warning")
    pipeline_for: str = knob(
        "10m",
        "how long rule evaluations, notifications or a configuration reload must keep failing before "
        "the monitoring pipeline pages",
    )
    notification_window: str = knob(
        "30m",
        "VllmObsNotificationsFailing: the window its failed notifications are counted over, as a "
        "share of the attempts in it",
    )
    notification_failure_ratio: float = knob(
        0.1,
        "VllmObsNotificationsFailing: the share of notifications (per Alertmanager integration, or "
        "of alerts Prometheus sends) that may fail within notification_window; the pager's "
        "integration pages above it, any other warns",
    )
    notification_min_attempts: float = knob(
        3,
        "VllmObsNotificationsFailing: notifications attempted within notification_window before "
        "their failures are judged, so one failed retry of a quiet pipeline alerts nobody",
    )


@dataclass(frozen=True)
class PagingSection:
    min_ready_replicas: float = knob(
        1,
        "a model pages (VllmModelCapacityLow) when fewer of its replicas are ready (scraped, engine "
        "alive, canary answering); replicas stopped or restarted on purpose count as ready",
    )
    capacity_fraction: float = knob(
        0.5,
        "a model also pages when its ready replicas fall below this share of the replicas it should "
        "run (kube-state-metrics' desired replicas, expected_replicas, or the most it had ready "
        "within expected_window); 0 turns it off",
    )
    expected_replicas: dict[str, float] = knob(
        {},
        "replicas each model should run, by model name (e.g. {llama-3-8b: 4}), where no "
        "kube-state-metrics says so: a model below its floor pages however long it lasts",
    )
    expected_window: str = knob(
        "1d",
        "without kube-state-metrics or expected_replicas, a model should run the most replicas it "
        "had ready within this window; a replica that served it within the window and is still "
        "discovered (up == 0 too) is one of its replicas",
    )
    recovery_for: str = knob(
        "10m",
        "a page stays open this long after its condition ends (keep_firing_for of the capacity page "
        "and the paging burn tiers): a replica that fails again within it, a burn that dips for a "
        "minute, or a slower tier taking over are the same incident",
    )


@dataclass(frozen=True)
class SloModels:
    model_name: str = knob("", "regex of the model names this entry sets (or use namespace)")
    namespace: str = knob("", "regex of the namespaces this entry sets (needs prometheus.pod_labels)")
    slis: list[str] = knob(
        ["availability", "ttft", "itl"],
        "the SLOs these models have: availability, ttft, itl (a pooling model has no itl)",
    )
    availability_objective: float | None = knob(None, "share of requests that must succeed")
    ttft_threshold_seconds: float | None = knob(None, "the TTFT threshold; a bucket bound")
    ttft_objective: float | None = knob(None, "share of requests that must meet it")
    itl_threshold_seconds: float | None = knob(None, "the inter-token threshold; a bucket bound")
    itl_objective: float | None = knob(None, "share of output tokens that must meet it")


@dataclass(frozen=True)
class SloSection:
    ttft_threshold_seconds: float = knob(
        2.5,
        "a request meets the TTFT SLO when its first token came within this; must be a bucket bound",
        bucket_bound=True,
    )
    ttft_objective: float = knob(0.99, "share of requests that must meet the TTFT threshold")
    itl_threshold_seconds: float = knob(
        0.2,
        "an output token meets the TPOT SLO when it came within this of the previous one; a bucket bound",
        bucket_bound=True,
    )
    itl_objective: float = knob(0.99, "share of output tokens that must meet the TPOT threshold")
    availability_objective: float = knob(
        0.999,
        "share of requests that must succeed: bad are requests that finished with an error, HTTP 5xx "
        "on the inference handlers, requests refused at admission and the canary's failures",
    )
    min_requests: float = knob(
        100,
        "a burn tier of a request-weighted SLO (availability, time to first token) judges a model only "
        "once its long window saw this many requests: one slow request on a quiet model pages nobody",
    )
    min_tokens: float = knob(
        5000,
        "a burn tier of the inter-token SLO (weighted by output tokens) judges a model only once its "
        "long window saw this many output tokens",
    )
    min_bad_events: float = knob(
        5,
        "a burn tier fires only once its long window holds this many bad events (in its SLO's unit): "
        "two failures of a quiet model page nobody",
    )
    min_history: float = knob(
        0.8,
        "a Prometheus that has scraped for less than this share of a burn tier's long window reads "
        "the part it has not seen as good traffic and counts the bad events it saw, so a stack started "
        "minutes ago does not read minutes as an hour (0 turns it off)",
        shapes_rules=True,  # 0 leaves out the clause
    )
    inference_handlers: str = knob(
        "/v1/chat/completions|/v1/completions|/v1/embeddings|/v1/responses|/v1/messages"
        "|/v1/audio/transcriptions|/v1/audio/translations|/v1/score|/v1/rerank|/v2/rerank|/v2/embed"
        "|/pooling|/classify|/score|/rerank|/invocations|/inference/v1/generate|/cohere/v2/chat",
        "the HTTP handlers (regex of vLLM's handler label) that serve inference: only their 5xx "
        "count as failed requests, and load-balancer polls of /health or /v1/models never do",
        shapes_rules=True,  # a regex pasted into selectors, not a number or a duration
    )
    models: list[SloModels] = knob(
        [],
        "models whose objectives, thresholds or SLOs differ from the defaults above, the first entry "
        "that matches a model winning; a key left out keeps the default",
    )


@dataclass(frozen=True)
class Receiver:
    type: str = knob("none", "pagerduty | opsgenie | slack | webhook | email | none")
    secret_file: str = knob(
        "",
        "file mounted into Alertmanager holding the PagerDuty routing key, Opsgenie API key, "
        "Slack webhook URL, or a webhook's bearer token (never written into the generated file)",
    )
    url: str = knob("", "webhook endpoint, for type webhook (keep secrets in secret_file)")
    channel: str = knob("", "Slack channel, e.g. #vllm-alerts")
    to: str = knob("", "email address, for type email")
    send_resolved: bool = knob(True, "also notify when the alert resolves")


@dataclass(frozen=True)
class TeamRoute:
    matchers: list[str] = knob([], 'Alertmanager matchers, e.g. [team="search"] or [model_name=~"llama.*"]')
    critical: Receiver = knob({}, "this team's pager")
    warning: Receiver = knob({}, "this team's chat")


@dataclass(frozen=True)
class AlertmanagerSection:
    critical: Receiver = knob(
        {"type": "pagerduty", "secret_file": "/etc/alertmanager/secrets/pagerduty-routing-key"},
        "receiver for severity=critical (a pager)",
    )
    warning: Receiver = knob(
        {
            "type": "slack",
            "secret_file": "/etc/alertmanager/secrets/slack-webhook-url",
            "channel": "#vllm-alerts",
        },
        "receiver for severity=warning (chat)",
    )
    info: Receiver = knob({"type": "none"}, "receiver for severity=info (a ticket queue, or nothing)")
    watchdog: Receiver = knob(
        {"type": "webhook", "url": "http://heartbeat.invalid/ping"},
        "receiver of the always-firing Watchdog alert: a dead man's switch heartbeat (healthchecks.io, "
        "Dead Man's Snitch, a PagerDuty heartbeat...), never a pager; the .invalid URL is a placeholder",
    )
    teams: list[TeamRoute] = knob(
        [], "extra routes tried before the severity routes, e.g. per team or per model"
    )
    group_by: list[str] = knob(
        ["alertname", "model_name"],
        "labels that make one notification group of warnings and info: one per model and cause, its "
        "message listing each replica once, so a cause on several replicas is one chat thread",
    )
    page_group_by: list[str] = knob(
        ["model_name", "namespace", "cluster"],
        "labels that make one page: one per model (and namespace and cluster where the alerts "
        "carry them), listing every critical alert and affected replica, so a lost capacity and "
        "the SLO burn it leaves behind are one incident on the pager",
    )
    group_wait: str = knob(
        "30s", "wait before the first notification of a new group (warnings: warning_group_wait)"
    )
    warning_group_wait: str = knob(
        "1m",
        "wait before the first chat notification of a new warning group: longer than a scrape and two "
        "evaluations, the capacity page's lag behind a replica's own alerts, so that page inhibits them first",
    )
    group_interval: str = knob("5m", "wait before notifying about new alerts in a group")
    page_group_interval: str = knob(
        "30s",
        "wait before notifying a model's page group again, as short as group_wait: Prometheus re-sends "
        "a resolved alert for 15 minutes, which keeps the group alive, and a next loss of capacity "
        "in that time joins it and waits for this instead of group_wait; PagerDuty files a group's "
        "updates in the incident it opened",
    )
    page_chat_interval: str = knob(
        "15m",
        "wait before posting a model's page group to chat again: its copy in chat says a page is open, "
        "and PagerDuty holds the updates that page_group_interval sends every half minute",
    )
    repeat_interval: str = knob("4h", "re-send a still-firing alert this often")
    watchdog_repeat_interval: str = knob(
        "1m", "how often the Watchdog heartbeat is re-sent; the switch expects it"
    )
    webhook_url_file: bool = knob(
        False,
        "Alertmanager 0.26+ reads webhook URLs from files: set true to use a webhook's secret_file "
        "as url_file (for heartbeat URLs that embed a secret) instead of as a bearer token",
    )
    smtp_smarthost: str = knob("", "SMTP server host:port, for email receivers")
    smtp_from: str = knob("", "sender address, for email receivers")
    smtp_auth_username: str = knob("", "SMTP user, for email receivers (empty: no auth)")
    smtp_auth_password_file: str = knob("", "file holding the SMTP password, mounted into Alertmanager")


@dataclass(frozen=True)
class DashboardsSection:
    uid_prefix: str = knob("vllm-obs", "prefix of every dashboard uid (uids must be unique in Grafana)")
    title_prefix: str = knob("vLLM", "prefix of every dashboard title")
    folder: str = knob("vLLM", "Grafana folder the provisioning puts the dashboards in")
    refresh: str = knob("30s", "dashboard auto-refresh")
    time_from: str = knob("now-1h", "default time range start")
    datasource_name: str = knob("Prometheus", "name of the provisioned Prometheus datasource")
    prometheus_url: str = knob("http://prometheus:9090", "URL Grafana reaches Prometheus at (provisioning)")


@dataclass(frozen=True)
class GpuExporterTarget:
    target: str = knob("dcgm-exporter:9400", "host:port of one NVIDIA dcgm-exporter")
    vllm_instance: str = knob(
        "vllm:8000",
        "the instance label of the vLLM server that uses this host's GPUs; the exporter's series get "
        "it, so GPU panels and alerts line up with that server's",
    )


@dataclass(frozen=True)
class GpuSection:
    enabled: bool = knob(
        False,
        "generate the GPU layer (NVIDIA GPUs watched by dcgm-exporter): its scrape job, recording "
        "rules, alerts (XID errors, framebuffer nearly full, GPU idle while requests hold every slot) "
        "and panels; off by default because a CPU server has no DCGM series",
    )
    job: str = knob("dcgm-exporter", "job label of the DCGM exporters")
    join: str = knob(
        "instance",
        "how a GPU is tied to the vLLM server using it: instance (the scrape job below gives the "
        "exporter's series that server's instance label: one vLLM per host, as in the compose stack) "
        "or pod (Kubernetes: dcgm-exporter's pod mapping labels each GPU with the namespace and pod "
        "using it, exported_namespace/exported_pod when scraped without honorLabels, and the vLLM "
        "series carry the same namespace and pod)",
        shapes_rules=True,
    )
    exporters: list[GpuExporterTarget] = knob(
        [{"target": "dcgm-exporter:9400", "vllm_instance": "vllm:8000"}],
        "dcgm-exporters to scrape with join: instance; with join: pod leave it empty ([]) and let the "
        "GPU operator's ServiceMonitor scrape them (set job to its job label, nvidia-dcgm-exporter)",
    )
    memory_full_threshold: float = knob(
        0.97,
        "framebuffer used / total above this warns; vLLM itself reserves --gpu-memory-utilization "
        "(0.9 by default) of it, so only what comes on top is alarming",
    )
    memory_full_for: str = knob("5m", "how long the framebuffer must stay that full")
    idle_utilization_below: float = knob(
        0.1,
        "VllmGpuIdleWhileBusy: GPU utilisation (0-1) below this while running requests sit at their "
        "peak (slots held by clients that stopped reading)",
    )
    idle_for: str = knob("10m", "VllmGpuIdleWhileBusy: how long it must hold")
    xid_window: str = knob("10m", "an XID error (a GPU fault) keeps VllmGpuXidError firing this long")


@dataclass(frozen=True)
class LinksSection:
    grafana_url: str = knob(
        "",
        "Grafana base URL your responders can open, for the dashboard links in alert annotations; "
        "unset: alerts carry no dashboard_url",
    )
    runbook_url: str = knob(
        "",
        "where alerts/runbooks.md is published (e.g. your repository's URL to it); each alert links "
        "to its own section; unset: alerts carry no runbook_url",
    )


@dataclass(frozen=True)
class AutoscalingSection:
    deployment: str = knob(
        "vllm",
        "the Deployment the autoscalers scale (kubernetes/vllm.yaml's); KEDA's queries select its pods "
        "by name, <deployment>-<hash>-<suffix> as a Deployment names them, so a second Deployment of the "
        "same model in the namespace is never counted",
    )
    namespace: str = knob(
        "default",
        "the namespace the Deployment runs in, which KEDA's queries select (they read the whole "
        "Prometheus); kubernetes/ sets none, so kubectl apply -k uses the current context's: usually "
        "default. Apply the ScaledObject and the HPA there; the HPA needs no namespace in its queries",
    )
    model_name: str = knob(
        "qwen2.5-0.5b",
        "the served model name (--served-model-name, the model_name label) KEDA's queries select; "
        "kubernetes/vllm.yaml serves qwen2.5-0.5b. The HPA reads the Deployment's pods whatever they serve",
    )
    signals: list[str] = knob(
        ["queue", "kv_cache"],
        "what to scale on: queue (requests waiting, the direct signal: users already wait) and "
        "kv_cache (KV-cache usage, the leading one); with both the larger replica count wins",
    )
    min_replicas: float = knob(
        1,
        "never fewer replicas; at least 1: with none there is no vLLM series to scale back up on, and "
        "a cold start takes from 20 s to minutes. 2 keeps the model served while one pod restarts",
    )
    max_replicas: float = knob(4, "never more replicas: what your GPU quota allows")
    waiting_per_replica: float = knob(
        4,
        "requests waiting per replica the autoscalers aim for (ceil(waiting over the model's replicas / "
        "this) replicas); llm-d's autoscaler calls a replica saturated at 5 waiting, so 4 adds one "
        "just before; far below alerts.queue_waiting_threshold (20), so replicas come before the warning",
    )
    kv_usage_per_replica: float = knob(
        0.8,
        "KV-cache usage (0-1) per replica the autoscalers aim for (ceil(sum of the replicas' usage / "
        "this) replicas); llm-d's default (kvCacheThreshold 0.8), below alerts.kv_usage_threshold (0.9): "
        "a full cache preempts running requests, and a new replica takes minutes to load",
    )
    prometheus_url: str = knob(
        "http://prometheus-k8s.monitoring.svc:9090",
        "the Prometheus KEDA queries (serverAddress), one that evaluates this bundle's recording rules "
        "(kube-prometheus: prometheus-k8s; kube-prometheus-stack: prometheus-operated in its namespace)",
    )
    polling_interval: str = knob(
        "15s",
        "how often KEDA queries Prometheus; the recorded series change once per rule evaluation "
        "(prometheus.evaluation_interval, 15s), so polling faster gains nothing",
    )
    cooldown_period: str = knob(
        "5m",
        "after removing a replica, wait this long before removing another (one pod per period, at "
        "most 30m); also KEDA's cooldownPeriod, which only delays a scale to zero (never: min_replicas >= 1)",
    )
    scale_down_window: str = knob(
        "10m",
        "scale down only to the highest replica count wanted within this window (the HPA's "
        "stabilizationWindowSeconds, at most 1h): longer than a cold start, so a lull does not drop "
        "a replica that takes minutes to bring back; scaling up never waits",
    )


@dataclass(frozen=True)
class BundleConfig:
    prometheus: PrometheusSection = knob({}, "scrape targets and Prometheus settings")
    alerts: AlertsSection = knob({}, "alert thresholds and durations")
    slo: SloSection = knob({}, "service-level objectives for the burn-rate alerts")
    paging: PagingSection = knob({}, "when a model's lost serving capacity pages")
    alertmanager: AlertmanagerSection = knob({}, "on-call routing")
    dashboards: DashboardsSection = knob({}, "Grafana dashboards")
    gpu: GpuSection = knob({}, "the GPU layer: NVIDIA's DCGM exporter next to vLLM's own series")
    links: LinksSection = knob({}, "URLs put into alert annotations")
    autoscaling: AutoscalingSection = knob(
        {},
        "Kubernetes autoscaling on the recorded queue and KV-cache series: a KEDA ScaledObject, or "
        "prometheus-adapter rules and an HPA (kubernetes/generated/autoscaling/, docs/autoscaling.md)",
    )

    @property
    def vllm_selector(self) -> str:
        """Matchers for every vLLM series query."""
        parts = [f'job="{self.prometheus.vllm_job}"']
        if self.prometheus.extra_selector.strip():
            parts.append(self.prometheus.extra_selector.strip())
        return ", ".join(parts)

    @property
    def exporter_selector(self) -> str:
        return f'job="{self.prometheus.log_exporter_job}"'

    @property
    def probe_selector(self) -> str:
        return f'job="{self.prometheus.probe_job}"'


# -- loading ------------------------------------------------------------------------


def load_config(path: str | Path | None) -> BundleConfig:
    if path is None:
        return build(BundleConfig, {}, "")
    path = Path(path)
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise BundleError(f"cannot read the config file {path}: {exc.strerror}; check the path.") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise BundleError(f"the config file {path} is not valid YAML{where}; fix the syntax there.") from None
    if not isinstance(data, dict):
        raise BundleError(
            f"the config file {path} must be a YAML mapping of sections; see `vllm-obs default-config`."
        )
    return build(BundleConfig, data, "", source=str(path))


def build(cls: type, data: Any, prefix: str, source: str = "the config") -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BundleError(
            f"{prefix or 'the config'} in {source} must be a mapping; see `vllm-obs default-config`."
        )
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise BundleError(
            f"unknown config key '{key}' in {source}; valid keys here are: {', '.join(fields)}."
        )
    values = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if name in data:
            raw = data[name]
        elif f.default is not dataclasses.MISSING:
            raw = f.default
        else:
            raw = f.default_factory()  # type: ignore[misc]
        values[name] = _coerce(hints[name], raw, key, source)
    obj = cls(**values)
    _validate(obj, prefix, source)
    return obj


def _coerce(hint: Any, raw: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return build(hint, raw, key, source)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(raw, list):
            raise BundleError(f"config key '{key}' in {source} must be a list.")
        return [_coerce(item, v, f"{key}[{i}]", source) for i, v in enumerate(raw)]
    if origin is dict:
        _, value = typing.get_args(hint)
        kind = "strings" if value is str else "numbers"
        if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
            raise BundleError(f"config key '{key}' in {source} must be a mapping of strings to {kind}.")
        return {k: _coerce(value, v, f"{key}.{k}", source) for k, v in raw.items()}
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if raw is None else _coerce(inner, raw, key, source)
    if hint is bool:
        if not isinstance(raw, bool):
            raise BundleError(f"config key '{key}' in {source} must be true or false.")
        return raw
    if hint is float:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise BundleError(f"config key '{key}' in {source} must be a number.")
        return float(raw)
    if hint is str:
        if not isinstance(raw, str):
            raise BundleError(f"config key '{key}' in {source} must be a string (quote it).")
        return raw
    raise TypeError(f"unsupported config type {hint} for {key}")


def _validate(obj: Any, prefix: str, source: str) -> None:
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}.{f.name}" if prefix else f.name
        is_duration = f.name.endswith(("_for", "_window", "_interval", "_timeout", "_horizon", "group_wait"))
        if is_duration and isinstance(value, str) and not _DURATION.match(value):
            raise BundleError(
                f"config key '{key}' in {source} must be a Prometheus duration like 5m, got '{value}'."
            )
        if isinstance(value, float) and value < 0:
            raise BundleError(f"config key '{key}' in {source} must not be negative.")
        # An objective of 1 leaves no error budget; a usage threshold of 1 is still meaningful.
        is_objective = f.name.endswith("_objective")
        is_usage = f.name.startswith(
            (
                "kv_usage",
                "kv_predict_floor",
                "throttled_kv",
                "memory_full_threshold",
                "idle_utilization",
                "spec_decode_acceptance",
                "engine_kv_spread",
            )
        )
        if isinstance(value, float) and (is_objective or is_usage):
            if not (0 < value < 1 if is_objective else 0 < value <= 1):
                raise BundleError(f"config key '{key}' in {source} must be a fraction between 0 and 1.")
    if isinstance(obj, Receiver):
        kinds = ("pagerduty", "opsgenie", "slack", "webhook", "email", "none")
        if obj.type not in kinds:
            raise BundleError(f"config key '{prefix}.type' in {source} must be one of {', '.join(kinds)}.")
        if obj.type == "webhook" and not obj.url.startswith(("http://", "https://")):
            raise BundleError(f"config key '{prefix}.url' in {source} must be the webhook's http(s) URL.")
        if obj.type in ("pagerduty", "opsgenie", "slack") and not obj.secret_file:
            raise BundleError(
                f"config key '{prefix}.secret_file' in {source} is required for a {obj.type} receiver: "
                "name the mounted file that holds its key or URL."
            )
        if obj.type == "email" and not obj.to:
            raise BundleError(f"config key '{prefix}.to' in {source} is required for an email receiver.")
    if isinstance(obj, PagingSection):
        if not 0 <= obj.capacity_fraction <= 1:
            raise BundleError(f"config key '{prefix}.capacity_fraction' in {source} must be between 0 and 1.")
        if not seconds(obj.recovery_for) > 0:
            raise BundleError(
                f"config key '{prefix}.recovery_for' in {source} must be longer than 0s, like 10m."
            )
        if obj.min_ready_replicas != int(obj.min_ready_replicas):
            raise BundleError(f"config key '{prefix}.min_ready_replicas' in {source} must be a whole number.")
    if isinstance(obj, SloModels):
        _validate_slo_models(obj, prefix, source)
    if isinstance(obj, AlertsSection) and not seconds(obj.log_event_for) < seconds(obj.log_event_window):
        raise BundleError(
            f"config key '{prefix}.log_event_for' in {source} ({obj.log_event_for}) must be shorter than "
            f"'{prefix}.log_event_window' ({obj.log_event_window}), or the event never fires."
        )
    if isinstance(obj, PagingSection):
        for model, replicas in obj.expected_replicas.items():
            if replicas < 1 or replicas != int(replicas):
                raise BundleError(
                    f"config key '{prefix}.expected_replicas.{model}' in {source} must be a whole number of replicas, 1 or more."
                )
    if isinstance(obj, SloSection):
        if not 0 <= obj.min_history < 1:
            raise BundleError(
                f"config key '{prefix}.min_history' in {source} must be a fraction from 0 to below 1."
            )
        try:
            re.compile(obj.inference_handlers)
        except re.error as exc:
            raise BundleError(
                f"config key '{prefix}.inference_handlers' in {source} is not a valid regex ({exc.msg}); fix it."
            ) from None
    if isinstance(obj, GpuSection) and obj.join not in ("instance", "pod"):
        raise BundleError(f"config key '{prefix}.join' in {source} must be instance or pod.")
    if isinstance(obj, PrometheusSection):
        if obj.scheme not in ("http", "https"):
            raise BundleError(f"config key '{prefix}.scheme' in {source} must be http or https.")
        try:
            equality_labels(obj.extra_selector)
        except BundleError as exc:
            raise BundleError(f"config key '{prefix}.extra_selector' in {source}: {exc.message}") from None


SLO_NAMES = ("availability", "ttft", "itl")


def _validate_slo_models(obj: SloModels, prefix: str, source: str) -> None:
    """One label to match by (a regex that compiles), known SLO names, objectives below 1."""
    if bool(obj.model_name) == bool(obj.namespace):
        raise BundleError(
            f"config key '{prefix}' in {source} must set exactly one of model_name or namespace (a regex)."
        )
    try:
        re.compile(obj.model_name or obj.namespace)
    except re.error as exc:
        raise BundleError(
            f"config key '{prefix}' in {source} has an invalid regex ({exc.msg}); fix it."
        ) from None
    unknown = [s for s in obj.slis if s not in SLO_NAMES]
    if unknown:
        raise BundleError(
            f"config key '{prefix}.slis' in {source} names {unknown[0]!r}; the SLOs are {', '.join(SLO_NAMES)}."
        )


# -- the documented defaults file ----------------------------------------------------


def default_config_text() -> str:
    """The defaults as a commented YAML file: the reference for every knob."""
    lines = [
        "# vllm-obs configuration: every knob with its default.",
        "# Generated by `vllm-obs default-config`. Copy it, keep what you change, and pass it",
        "# with `vllm-obs generate --config FILE`; keys you leave out keep these defaults.",
        "",
    ]
    _render(BundleConfig, build(BundleConfig, {}, ""), 0, lines)
    return "\n".join(lines) + "\n"


def _render(cls: type, value: Any, indent: int, lines: list[str]) -> None:
    pad = "  " * indent
    for f in dataclasses.fields(cls):
        current = getattr(value, f.name)
        lines.append(f"{pad}# {f.metadata['doc']}")
        if dataclasses.is_dataclass(current):
            lines.append(f"{pad}{f.name}:")
            _render(type(current), current, indent + 1, lines)
        else:
            plain = _plain(current)
            if isinstance(plain, list) and plain and isinstance(plain[0], dict):
                lines.append(f"{pad}{f.name}:")
                block = yaml.safe_dump(plain, default_flow_style=False, sort_keys=False, width=200)
                lines.extend(pad + line for line in block.rstrip("\n").split("\n"))
            else:
                scalar = yaml.safe_dump(plain, default_flow_style=True, width=200)
                scalar = scalar.rstrip("\n").removesuffix("\n...").strip()
                lines.append(f"{pad}{f.name}: {scalar}")
        if indent == 0:
            lines.append("")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
