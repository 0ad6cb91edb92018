"""Kubernetes autoscaling on the requests waiting and KV-cache usage the bundle records per replica:
a KEDA ScaledObject, or prometheus-adapter rules and an autoscaling/v2 HPA, both wanting
ceil(sum over the model's replicas / threshold) replicas (docs/autoscaling.md says when and why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from . import layout
from .config import AutoscalingSection, BundleConfig
from .errors import BundleError
from .promql import number, quote, seconds, selector
from .vocabulary import Names
from .yamlfmt import dump

SIGNALS = ("queue", "kv_cache")
ADAPTER_CONFIG_MAP = "vllm-obs-prometheus-adapter"
"""The ConfigMap holding the adapter's config.yaml (the Helm chart's rules.existing names it)."""

_PART_OF = {"app.kubernetes.io/part-of": "vllm-obs"}
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")  # a Deployment's (DNS subdomain)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # a namespace's
# A Deployment's pods are named <deployment>-<pod-template-hash>-<random suffix>.
_POD_OF_DEPLOYMENT = "-[a-z0-9]+-[a-z0-9]+"
# Failed polls in a row before KEDA stops trusting the triggers and holds the replicas.
FALLBACK_AFTER = 3


@dataclass(frozen=True)
class Signal:
    key: str  # as autoscaling.signals names it
    series: str  # the recorded series, one per replica and model
    per_pod: str  # how the adapter folds a pod's series (one per model it serves) into one value
    metric: str  # its name on the custom metrics API (pods/<metric>)
    trigger: str  # the KEDA trigger's name
    target: float


def signals(cfg: BundleConfig) -> list[Signal]:
    """The chosen signals, in a fixed order, with their per-replica targets."""
    a = cfg.autoscaling
    names = Names(cfg.alerts.rate_window)
    every = {
        "queue": Signal(
            "queue",
            names.requests_waiting,
            "sum",
            "vllm_requests_waiting",
            "requests-waiting",
            a.waiting_per_replica,
        ),
        "kv_cache": Signal(
            "kv_cache",
            names.kv_cache_usage,
            "max",
            "vllm_kv_cache_usage",
            "kv-cache-usage",
            a.kv_usage_per_replica,
        ),
    }
    return [every[key] for key in SIGNALS if key in a.signals]


def keda_query(cfg: BundleConfig, signal: Signal) -> str:
    """The signal summed over the model's replicas of the Deployment: one sample, as KEDA needs."""
    a = cfg.autoscaling
    pods = a.deployment.replace(".", "\\.") + _POD_OF_DEPLOYMENT
    matchers = (
        f"job={quote(cfg.prometheus.vllm_job)}",
        f"namespace={quote(a.namespace)}",
        f"model_name={quote(a.model_name)}",
        f"pod=~{quote(pods)}",
    )
    return f"sum({selector(signal.series, *matchers)})"


def adapter_rules(cfg: BundleConfig) -> list[dict[str, Any]]:
    """prometheus-adapter rules (its config.yaml `rules:`) serving each signal per pod."""
    job = f"job={quote(cfg.prometheus.vllm_job)}"
    return [
        {
            "seriesQuery": f'{s.series}{{{job},namespace!="",pod!=""}}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
            "name": {"matches": f"^{s.series}$", "as": s.metric},
            "metricsQuery": f"{s.per_pod} by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>,{job}}})",
        }
        for s in signals(cfg)
    ]


def autoscaling_files(cfg: BundleConfig, header: list[str]) -> dict[str, str]:
    """Layout path -> YAML text: the KEDA ScaledObject, the adapter's rules, the HPA."""
    a = _checked(cfg.autoscaling)
    chosen = signals(cfg)
    return {
        layout.KEDA_SCALED_OBJECT: dump(_scaled_object(cfg, chosen), [*header, *_KEDA_NOTES]),
        layout.PROMETHEUS_ADAPTER_RULES: dump(_adapter_config_map(cfg), [*header, *_ADAPTER_NOTES]),
        layout.HORIZONTAL_POD_AUTOSCALER: dump(_hpa(a, chosen), [*header, *_HPA_NOTES]),
    }


_ONE_OF_TWO = [
    "Pick keda-scaledobject.yaml or hpa.yaml (with prometheus-adapter-rules.yaml), never both: two",
    "autoscalers on one Deployment undo each other's changes (KEDA's webhook refuses a target another",
    "HPA owns). Neither is in kubernetes/kustomization.yaml; docs/autoscaling.md says how to choose.",
]
_KEDA_NOTES = [
    "KEDA (2.17+ for fallback.behavior) scaling the Deployment on the bundle's recorded series.",
    "Apply it in the Deployment's namespace (autoscaling.namespace), which its queries select.",
    *_ONE_OF_TWO,
    "Each query sums a signal over the model's replicas of this Deployment: KEDA takes exactly one",
    "sample. metricType AverageValue makes the HPA KEDA creates want ceil(sum / threshold) replicas.",
    "For KV-cache usage that is the sum of the replicas' usage against a usage per replica, not their",
    "average against a Value target. Both want ceil(total usage / target) replicas while every",
    "replica that reports is ready, but for Value the HPA multiplies the average by its count of ready",
    "pods, and a replica its readiness probe took out of service (a hung engine) still reports: it is",
    "averaged in and not multiplied. The sum needs no replica count, reads like the queue trigger, and",
    "KEDA's fallback covers AverageValue triggers on every release that has fallback.behavior (Value",
    "ones only from 2.18).",
    "ignoreNullValues false: no series (vLLM no longer scraped, rules not evaluated) is an error, not",
    f"0; after {FALLBACK_AFTER} failed polls the fallback keeps the current replicas (never fewer than the",
    "minimum) instead of scaling down on a lost signal. No activationThreshold: with minReplicaCount",
    "at least 1 there is no activation (0 <-> 1) to decide.",
]
_ADAPTER_NOTES = [
    "prometheus-adapter rules serving the recorded series per pod on the custom metrics API, for",
    "hpa.yaml. Apply it in the adapter's namespace, as its config file (config.yaml):",
    f"- Helm chart prometheus-community/prometheus-adapter: --set rules.existing={ADAPTER_CONFIG_MAP}",
    "  mounts it instead of the chart's own rules (or copy the rules into rules.custom);",
    "- kube-prometheus: its adapter-config holds the resource rules that serve kubectl top and",
    "  CPU-based HPAs: append these rules to it (values.prometheusAdapter.config.rules) rather than",
    "  replacing it, and register custom.metrics.k8s.io (addons/custom-metrics.libsonnet).",
    "One adapter serves custom.metrics.k8s.io per cluster. The Prometheus it reads must evaluate",
    "this bundle's rules. A pod's series (one per model it serves) are summed (waiting) or maxed",
    "(KV-cache usage) into one value per pod; the HPA asks for its own namespace and pods only.",
    *_ONE_OF_TWO,
]
_HPA_NOTES = [
    "autoscaling/v2 HPA on the per-pod metrics of prometheus-adapter-rules.yaml (load those rules",
    "into the adapter first). Apply it in the Deployment's namespace.",
    *_ONE_OF_TWO,
    "type Pods with an AverageValue target: the HPA wants ceil(sum over the pods / target)",
    "replicas; a pod without the metric yet (still loading its model) counts as 0 when scaling up",
    "and as at the target when scaling down, so a starting replica neither adds nor removes one.",
]


def _scaled_object(cfg: BundleConfig, chosen: list[Signal]) -> dict[str, Any]:
    a = cfg.autoscaling
    triggers = [
        {
            "type": "prometheus",
            "name": s.trigger,
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": a.prometheus_url,
                "query": keda_query(cfg, s),
                "threshold": number(s.target),
                "ignoreNullValues": "false",
            },
        }
        for s in chosen
    ]
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": a.deployment, "labels": dict(_PART_OF)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": a.deployment},
            "pollingInterval": _whole_seconds(a.polling_interval),
            "cooldownPeriod": _whole_seconds(a.cooldown_period),
            "minReplicaCount": int(a.min_replicas),
            "maxReplicaCount": int(a.max_replicas),
            "fallback": {
                "failureThreshold": FALLBACK_AFTER,
                "replicas": int(a.min_replicas),
                "behavior": "currentReplicasIfHigher",
            },
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(a)}},
            "triggers": triggers,
        },
    }


def _adapter_config_map(cfg: BundleConfig) -> dict[str, Any]:
    config = yaml.safe_dump({"rules": adapter_rules(cfg)}, sort_keys=False, width=4096)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": ADAPTER_CONFIG_MAP, "labels": dict(_PART_OF)},
        "data": {"config.yaml": config},
    }


def _hpa(a: AutoscalingSection, chosen: list[Signal]) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": a.deployment, "labels": dict(_PART_OF)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": a.deployment},
            "minReplicas": int(a.min_replicas),
            "maxReplicas": int(a.max_replicas),
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": s.metric},
                        "target": {"type": "AverageValue", "averageValue": number(s.target)},
                    },
                }
                for s in chosen
            ],
            "behavior": _behavior(a),
        },
    }


def _behavior(a: AutoscalingSection) -> dict[str, Any]:
    """Scale down slowly: to the highest count wanted within the window, one pod per period.
    Scaling up keeps the HPA's default (no stabilisation: a queue is served as soon as it can)."""
    return {
        "scaleDown": {
            "stabilizationWindowSeconds": _whole_seconds(a.scale_down_window),
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": _whole_seconds(a.cooldown_period)}],
        }
    }


def _whole_seconds(duration: str) -> int:
    return int(seconds(duration))


def _checked(a: AutoscalingSection) -> AutoscalingSection:
    """What the objects' schemas or their controllers would refuse, refused here with the knob."""

    def fail(key: str, what: str) -> BundleError:
        return BundleError(f"config key 'autoscaling.{key}' {what}.")

    for key, form, longest in (("deployment", _DNS_NAME, 253), ("namespace", _DNS_LABEL, 63)):
        value = getattr(a, key)
        if not (form.match(value) and len(value) <= longest):
            raise fail(
                key, f"must be a Kubernetes object name (lower case letters, digits, '-'), got '{value}'"
            )
    if not a.model_name:
        raise fail("model_name", "must name the served model (--served-model-name)")
    unknown = [s for s in a.signals if s not in SIGNALS]
    if unknown or not a.signals or len(set(a.signals)) != len(a.signals):
        raise fail("signals", f"must list queue, kv_cache or both, once each, got {a.signals}")
    for key in ("min_replicas", "max_replicas"):
        if getattr(a, key) != int(getattr(a, key)):
            raise fail(key, "must be a whole number")
    if a.min_replicas < 1:
        raise fail(
            "min_replicas",
            "must be at least 1: with no replica there is no queue or KV-cache series to scale back up on",
        )
    if a.max_replicas < a.min_replicas:
        raise fail("max_replicas", "must not be below autoscaling.min_replicas")
    if a.waiting_per_replica <= 0:
        raise fail("waiting_per_replica", "must be above 0")
    if not a.prometheus_url.startswith(("http://", "https://")):
        raise fail("prometheus_url", "must be the http(s) URL of the Prometheus KEDA queries")
    limits = {"polling_interval": 1, "cooldown_period": 1, "scale_down_window": 0}
    for key, least in limits.items():
        try:
            value = seconds(getattr(a, key))
        except BundleError:
            raise fail(key, f"must be a duration like 5m, got '{getattr(a, key)}'") from None
        if value != int(value) or value < least:
            raise fail(key, f"must be whole seconds, at least {least}s")
    if seconds(a.cooldown_period) > 1800:
        raise fail("cooldown_period", "must not exceed 30m (the HPA's longest policy period)")
    if seconds(a.scale_down_window) > 3600:
        raise fail("scale_down_window", "must not exceed 1h (the HPA's longest stabilization window)")
    return a
