"""URLs put into alert annotations: runbook sections and dashboards."""

from __future__ import annotations

import zlib

from .config import BundleConfig
from .dashboards.alert_panels import ALERT_PANELS
from .rules.names import scope_of

DASHBOARDS = {
    "overview": "Overview",
    "instance": "Instance and model",
    "kv_cache": "KV cache and scheduler",
    "failures": "Failures",
}


def dashboard_uid(cfg: BundleConfig, key: str) -> str:
    return f"{cfg.dashboards.uid_prefix}-{key.replace('_', '-')}"


def panel_id(title: str) -> int:
    """A panel's id, from its title: stable across releases and configurations, so an alert's
    link to the panel that explains it (`viewPanel`) keeps working when panels come and go."""
    return zlib.crc32(title.encode("utf-8")) % 10_000_000 + 1


def runbook_anchor(alert: str) -> str:
    # GitHub-style heading anchors: the runbook's headings are the bare alert names.
    return alert.lower()


def runbook_url(cfg: BundleConfig, alert: str) -> str:
    return f"{cfg.links.runbook_url}#{runbook_anchor(alert)}"


def dashboard_url(cfg: BundleConfig, key: str, alert: str | None = None) -> str:
    """A link that opens the dashboard on the alert's own instance and model, and on the panel
    that explains the alert (full screen) where it has one."""
    base = f"{cfg.links.grafana_url.rstrip('/')}/d/{dashboard_uid(cfg, key)}"
    # Each dashboard variable the alert carries: the link opens on its cluster, replica and
    # model. Not its job: "All" already means the vLLM job, and the log exporter's, the probe's
    # and the GPU exporter's alerts carry their own job, which would blank every vLLM panel.
    sc = scope_of(cfg)
    pairs = [(sc.replica, "instance"), ("model_name", "model_name")]
    if sc.cluster:
        pairs.insert(0, (sc.cluster, "cluster"))
    params = "".join(
        f"{{{{ if $labels.{label} }}}}&var-{var}={{{{ $labels.{label} | urlquery }}}}{{{{ end }}}}"
        for label, var in pairs
    )
    panel = ALERT_PANELS.get(alert or "")
    view = f"&viewPanel={panel_id(panel)}" if panel else ""
    return f"{base}?orgId=1{view}{params}"
