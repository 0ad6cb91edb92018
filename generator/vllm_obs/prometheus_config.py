"""prometheus.yml: scrape jobs for vLLM and the log exporters, rule files, Alertmanager."""

from __future__ import annotations

from typing import Any

from .config import BundleConfig


def prometheus_config(cfg: BundleConfig, rule_files: list[str]) -> dict[str, Any]:
    p = cfg.prometheus
    vllm: dict[str, Any] = {
        "job_name": p.vllm_job,
        "metrics_path": p.metrics_path,
        "scheme": p.scheme,
        "static_configs": [{"targets": list(p.vllm_targets)}],
    }
    if p.bearer_token_file:
        vllm["authorization"] = {"type": "Bearer", "credentials_file": p.bearer_token_file}
    if p.tls_insecure_skip_verify:
        vllm["tls_config"] = {"insecure_skip_verify": True}
    scrape = [vllm]
    if p.log_exporters:
        scrape.append(
            {
                "job_name": p.log_exporter_job,
                "static_configs": [
                    # The exporter's series take the instance label of the vLLM server it
                    # watches, so its alerts line up with (and inhibit) that server's.
                    {"targets": [e.target], "labels": {"__vllm_instance": e.vllm_instance}}
                    for e in p.log_exporters
                ],
                "relabel_configs": [
                    {"source_labels": ["__address__"], "target_label": "exporter_address"},
                    {"source_labels": ["__vllm_instance"], "target_label": "instance"},
                ],
            }
        )
    if p.probes:
        scrape.append(
            {
                "job_name": p.probe_job,
                "static_configs": [{"targets": list(p.probes)}],
                "relabel_configs": [{"source_labels": ["__address__"], "target_label": "probe_address"}],
                # The probe labels each series with the vLLM server it probed (`target`); that
                # becomes `instance`, so probe alerts line up with, and inhibit, that server's.
                "metric_relabel_configs": [
                    {"source_labels": ["target"], "regex": "(.+)", "target_label": "instance"},
                    {"regex": "target", "action": "labeldrop"},
                ],
            }
        )
    scrape += _gpu_jobs(cfg)  # dcgm-exporter, with gpu.enabled and gpu.join: instance
    # The pipeline itself: failed rule evaluations, notifications and reloads page.
    if p.prometheus_targets:
        scrape.append(
            {"job_name": p.prometheus_job, "static_configs": [{"targets": list(p.prometheus_targets)}]}
        )
    if p.scrape_alertmanagers and p.alertmanagers:
        scrape.append(
            {"job_name": p.alertmanager_job, "static_configs": [{"targets": list(p.alertmanagers)}]}
        )
    global_: dict[str, Any] = {
        "scrape_interval": p.scrape_interval,
        "scrape_timeout": p.scrape_timeout,
        "evaluation_interval": p.evaluation_interval,
    }
    if p.external_labels:
        global_["external_labels"] = dict(sorted(p.external_labels.items()))
    return {
        "global": global_,
        "rule_files": rule_files,
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": list(p.alertmanagers)}]}]},
        "scrape_configs": scrape,
    }


def _gpu_jobs(cfg: BundleConfig) -> list[dict[str, Any]]:
    """The dcgm-exporter job of `join: instance`; `join: pod` leaves scraping to a ServiceMonitor."""
    g = cfg.gpu
    if not (g.enabled and g.join == "instance" and g.exporters):
        return []
    return [
        {
            "job_name": g.job,
            "static_configs": [
                # The exporter's series take the instance label of the vLLM server on its host,
                # so GPU alerts and panels line up with (and inhibit) that server's.
                {"targets": [e.target], "labels": {"__vllm_instance": e.vllm_instance}}
                for e in g.exporters
            ],
            "relabel_configs": [
                {"source_labels": ["__address__"], "target_label": "exporter_address"},
                {"source_labels": ["__vllm_instance"], "target_label": "instance"},
            ],
        }
    ]
