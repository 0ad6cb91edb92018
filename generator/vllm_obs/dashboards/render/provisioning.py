"""Grafana provisioning: the Prometheus datasource and the dashboard folder."""

from __future__ import annotations

from typing import Any

from ...config import BundleConfig

# Where the compose stack and the Kubernetes manifests mount the dashboards.
DASHBOARD_PATH = "/var/lib/grafana/dashboards/vllm-obs"


def datasources(cfg: BundleConfig) -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": cfg.dashboards.datasource_name,
                "type": "prometheus",
                "uid": "vllm-obs-prometheus",
                "access": "proxy",
                "url": cfg.dashboards.prometheus_url,
                "isDefault": True,
                # $__rate_interval must cover four scrapes, so Grafana must know the interval.
                "jsonData": {"timeInterval": cfg.prometheus.scrape_interval},
            }
        ],
    }


def dashboard_provider(cfg: BundleConfig) -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "vllm-obs",
                "folder": cfg.dashboards.folder,
                "type": "file",
                "disableDeletion": False,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 30,
                "options": {"path": DASHBOARD_PATH, "foldersFromFilesStructure": False},
            }
        ],
    }
