"""URLs put into alert annotations: runbook sections and dashboards."""

from __future__ import annotations

from .config import BundleConfig

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
    params = "".join(
        f"{{{{ if $labels.{label} }}}}&var-{label}={{{{ $labels.{label} | urlquery }}}}{{{{ end }}}}"
        for label in ("job", "instance", "model_name")
    )
    return f"{base}?orgId=1{params}"
