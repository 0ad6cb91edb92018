"""URLs put into alert annotations: runbook sections and dashboards."""

from __future__ import annotations

from .config import BundleConfig
from .rules.names import scope_of

DASHBOARDS = {
    "overview": "Overview",
    "instance": "Instance and model",
    "kv_cache": "KV cache and scheduler",
    "failures": "Failures",
}


def dashboard_uid(cfg: BundleConfig, key: str) -> str:
    return f"{cfg.dashboards.uid_prefix}-{key.replace('_', '-')}"


def runbook_anchor(alert: str) -> str:
    # GitHub-style heading anchors: the runbook's headings are the bare alert names.
    return alert.lower()


def runbook_url(cfg: BundleConfig, alert: str) -> str:
    return f"{cfg.links.runbook_url}#{runbook_anchor(alert)}"


def dashboard_url(cfg: BundleConfig, key: str) -> str:
    """A link that opens the dashboard on the alert's own job, instance and model."""
    base = f"{cfg.links.grafana_url.rstrip('/')}/d/{dashboard_uid(cfg, key)}"
    # Each dashboard variable the alert carries: the link opens on its cluster, job, replica
    # and model. Variable names stay job/instance/model_name whatever the labels are called.
    sc = scope_of(cfg)
    pairs = [("job", "job"), (sc.replica, "instance"), ("model_name", "model_name")]
    if sc.cluster:
        pairs.insert(0, (sc.cluster, "cluster"))
    params = "".join(
        f"{{{{ if $labels.{label} }}}}&var-{var}={{{{ $labels.{label} | urlquery }}}}{{{{ end }}}}"
        for label, var in pairs
    )
    return f"{base}?orgId=1{params}"
