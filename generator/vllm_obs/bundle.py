"""Compose every artefact of a bundle, in memory, from one source and one config."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .alertmanager_config import alertmanager_config
from .catalog import Catalog
from .config import BundleConfig
from .dashboards.build import dashboards
from .dashboards.grafana import render as render_dashboard
from .dashboards.provisioning import dashboard_provider, datasources
from .kubernetes_manifests import alertmanager_config_resource, dashboards_config_map, prometheus_rule
from .mixin import mixin_files
from .prometheus_config import prometheus_config
from .rules.alerts import alert_groups
from .rules.files import rule_file
from .rules.gpu import warnings as gpu_warnings
from .rules.promtool_tests import test_files
from .rules.recording import recording_groups
from .rules.runbooks import runbook
from .signals import Resolution, resolve
from .source import MetricSource
from .yamlfmt import dump

RECORDING_FILE = "alerts/vllm-recording.rules.yml"
ALERTS_FILE = "alerts/vllm-alerts.rules.yml"
MANIFEST = ".vllm-obs-manifest.json"

# What each signal feeds, for the warning printed when a source lacks it. Signals
# nothing depends on are missing silently (V0-only legacy series on a V1 server).
DEPENDENTS = {
    "time_to_first_token": "VllmHighTimeToFirstToken, VllmTimeToFirstTokenBudgetBurn and the TTFT panels",
    "inter_token_latency": "VllmHighTimePerOutputToken, VllmTimePerOutputTokenBudgetBurn and the inter-token panels",
    "e2e_request_latency": "the end-to-end latency panels",
    "request_queue_time": "the queue-time line of the latency-phase panel",
    "request_prefill_time": "the prefill line of the latency-phase panel",
    "request_decode_time": "the decode line of the latency-phase panel",
    "requests_running": "VllmSchedulerThrottled, VllmEngineStalled and the running-requests panels",
    "requests_waiting": "VllmQueueDepthHigh, VllmSchedulerThrottled, VllmEngineStalled and the queue panels",
    "kv_cache_usage": "VllmKVCachePressure, VllmKVCacheFillingUp, VllmSchedulerThrottled and the KV-cache panels",
    "preemptions": "VllmPreemptions and the preemption panels",
    "generation_tokens": "VllmEngineStalled and the throughput panels",
    "prompt_tokens": "the prompt-throughput panels",
    "request_success": "the finished-by-reason panel",
    "http_requests": 'VllmRequestErrors{source="http"} and the HTTP panels',
    "prefix_cache_hits": "the prefix-cache hit-rate panel",
    "request_prompt_tokens": "the prompt-length line of the request-length panel",
    "request_generation_tokens": "the generation-length line of the request-length panel",
    "iteration_tokens": "the tokens-per-step panel",
}


@dataclass(frozen=True)
class Bundle:
    files: dict[str, str]  # relative path -> content
    warnings: list[str]
    summary: str


def build_bundle(source: MetricSource, catalog: Catalog, cfg: BundleConfig) -> Bundle:
    res = resolve(source, catalog)
    header = [f"Source: {source.summary}."]
    recording = recording_groups(res, cfg)
    alerts = alert_groups(res, cfg)
    files: dict[str, str] = {
        "prometheus/prometheus.yml": dump(
            prometheus_config(cfg, [f"../{RECORDING_FILE}", f"../{ALERTS_FILE}"]), header
        ),
        RECORDING_FILE: rule_file(recording, cfg, header),
        ALERTS_FILE: rule_file(alerts, cfg, header),
        "alerts/alertmanager.yml": dump(alertmanager_config(cfg), header),
        "alerts/runbooks.md": runbook(alerts, res, cfg),
        "grafana/provisioning/datasources/vllm-obs.yml": dump(datasources(cfg), header),
        "grafana/provisioning/dashboards/vllm-obs.yml": dump(dashboard_provider(cfg), header),
    }
    for dash in dashboards(res, cfg):
        files[f"dashboards/vllm-{dash.key.replace('_', '-')}.json"] = render_dashboard(
            dash, cfg, source.summary
        )
    files["kubernetes/generated/prometheusrule.yaml"] = prometheus_rule(
        {k: files[k] for k in (RECORDING_FILE, ALERTS_FILE)}, header
    )
    files["kubernetes/generated/grafana-dashboards.yaml"] = dashboards_config_map(
        {k: v for k, v in files.items() if k.startswith("dashboards/")}, header
    )
    files["kubernetes/generated/alertmanagerconfig.yaml"] = alertmanager_config_resource(
        alertmanager_config(cfg), header
    )
    # The same rules and dashboards as a jsonnet mixin, its thresholds and names left to _config.
    dashboard_files = {
        k.removeprefix("dashboards/"): v for k, v in files.items() if k.startswith("dashboards/")
    }
    files.update(
        mixin_files(
            res, cfg, source.summary, files[ALERTS_FILE], files[RECORDING_FILE], dashboard_files, header
        )
    )
    tests = test_files(
        alerts, res, cfg, [f"../../{RECORDING_FILE}", f"../../{ALERTS_FILE}"], [g.name for g in recording]
    )
    for group, doc in tests.items():
        files[f"tests/rules/{group.removeprefix('vllm-obs.')}.test.yml"] = dump(
            doc, [*header, "Run with: promtool test rules tests/rules/*.test.yml"]
        )
    files[MANIFEST] = (
        json.dumps({"generated_by": "vllm-obs", "source": source.summary, "files": sorted(files)}, indent=2)
        + "\n"
    )
    return Bundle(files=files, warnings=_warnings(res) + gpu_warnings(res, cfg), summary=source.summary)


def _warnings(res: Resolution) -> list[str]:
    out = []
    for key in res.missing:
        if key == "prefix_cache_hits" and "prefix_cache_hit_rate" in res.signals:
            continue  # the V0 engine reports the rate as a gauge; its panel uses that
        if key in DEPENDENTS:
            out.append(f"{res.source.origin} has no {key} series; skipped {DEPENDENTS[key]}.")
    if "request_success" in res.signals and not res.reports_engine_errors:
        out.append(
            f'{res.source.origin} has no finished_reason="error" (vLLM 0.13+); '
            'skipped VllmRequestErrors{source="engine"} and the engine error-ratio panels.'
        )
    return out
