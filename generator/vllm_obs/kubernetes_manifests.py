"""Kubernetes objects for fleets on the Prometheus Operator: the rules as a PrometheusRule,
the dashboards as a ConfigMap for Grafana's dashboard sidecar."""

from __future__ import annotations

from typing import Any

import yaml

from .yamlfmt import dump


def prometheus_rule(rule_files: dict[str, str], header: list[str]) -> str:
    groups: list[Any] = []
    for text in rule_files.values():
        groups += yaml.safe_load(text)["groups"]
    return dump(
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {
                "name": "vllm-obs",
                "labels": {
                    "app.kubernetes.io/part-of": "vllm-obs",
                    "prometheus": "k8s",
                    "role": "alert-rules",
                },
            },
            "spec": {"groups": groups},
        },
        header,
    )


def dashboards_config_map(dashboards: dict[str, str], header: list[str]) -> str:
    return dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "vllm-obs-dashboards",
                # Picked up by the Grafana dashboard sidecar (kube-prometheus-stack's default label).
                "labels": {"app.kubernetes.io/part-of": "vllm-obs", "grafana_dashboard": "1"},
                "annotations": {"grafana_folder": "vLLM"},
            },
            "data": {name.split("/")[-1]: text for name, text in sorted(dashboards.items())},
        },
        header,
    )
