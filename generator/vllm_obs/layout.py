"""Where each artefact of a bundle is written, relative to the bundle's root. The generator writes
these paths and the doctor reads them back, both from here, so a file never moves for one only.
"""

from __future__ import annotations

PROMETHEUS_CONFIG = "prometheus/prometheus.yml"
RECORDING_RULES = "alerts/vllm-recording.rules.yml"
ALERT_RULES = "alerts/vllm-alerts.rules.yml"
ALERTMANAGER_CONFIG = "alerts/alertmanager.yml"
RUNBOOKS = "alerts/runbooks.md"
DATASOURCES = "grafana/provisioning/datasources/vllm-obs.yml"
DASHBOARD_PROVIDER = "grafana/provisioning/dashboards/vllm-obs.yml"
DASHBOARDS_DIR = "dashboards/"
RULE_TESTS_DIR = "tests/rules/"
PROMETHEUS_RULE = "kubernetes/generated/prometheusrule.yaml"
DASHBOARDS_CONFIG_MAP = "kubernetes/generated/grafana-dashboards.yaml"
ALERTMANAGER_CONFIG_RESOURCE = "kubernetes/generated/alertmanagerconfig.yaml"
MIXIN_DIR = "mixin/"
MANIFEST = ".vllm-obs-manifest.json"
AUTOSCALING_DIR = "kubernetes/generated/autoscaling/"
KEDA_SCALED_OBJECT = f"{AUTOSCALING_DIR}keda-scaledobject.yaml"
PROMETHEUS_ADAPTER_RULES = f"{AUTOSCALING_DIR}prometheus-adapter-rules.yaml"
HORIZONTAL_POD_AUTOSCALER = f"{AUTOSCALING_DIR}hpa.yaml"


def dashboard_file(key: str) -> str:
    return f"{DASHBOARDS_DIR}vllm-{key.replace('_', '-')}.json"


def rule_test_file(group: str) -> str:
    return f"{RULE_TESTS_DIR}{group.removeprefix('vllm-obs.')}.test.yml"


def from_prometheus_dir(path: str) -> str:
    """A bundle path as prometheus/prometheus.yml refers to it."""
    return f"../{path}"


def from_rule_tests_dir(path: str) -> str:
    """A bundle path as a promtool test file in tests/rules/ refers to it."""
    return f"../../{path}"
