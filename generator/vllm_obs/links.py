"""URLs put into alert annotations: runbook sections and dashboards."""

from __future__ import annotations

import zlib
from urllib.parse import urlparse

from .config import BundleConfig
from .vocabulary import Vocabulary


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


def dashboard_url(v: Vocabulary, key: str, panel: str | None = None) -> str:
    """A link that opens the dashboard on the alert's own instance and model, and on the panel
    (by title) that explains the alert, full screen, where it has one."""
    base = f"{v.cfg.links.grafana_url.rstrip('/')}/d/{dashboard_uid(v.cfg, key)}"
    # Each dashboard variable the alert carries: the link opens on its cluster, replica and
    # model. Not its job: "All" already means the vLLM job, and the log exporter's, the probe's
    # and the GPU exporter's alerts carry their own job, which would blank every vLLM panel.
    sc = v.targets
    pairs = [*sc.partitions, (sc.replica, "instance"), ("model_name", "model_name")]
    params = "".join(
        f"{{{{ if $labels.{label} }}}}&var-{var}={{{{ $labels.{label} | urlquery }}}}{{{{ end }}}}"
        for label, var in pairs
    )
    view = f"&viewPanel={panel_id(panel)}" if panel else ""
    return f"{base}?orgId=1{view}{params}"


LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def link_warnings(cfg: BundleConfig) -> list[str]:
    """Links in the alerts that a pager or a chat cannot open, or none at all: unset, a runbook
    path with no host, a Grafana on the machine that runs it. Said at generation, not refused."""
    out = []
    if not cfg.links.runbook_url:
        out.append(
            "links.runbook_url is unset: pages carry no runbook link; set it to the URL where "
            "alerts/runbooks.md is published."
        )
    elif not urlparse(cfg.links.runbook_url).scheme:
        out.append(
            f"links.runbook_url is the path {cfg.links.runbook_url}, which a pager or a chat cannot open; "
            "set it to the URL where alerts/runbooks.md is published."
        )
    if not cfg.links.grafana_url:
        out.append(
            "links.grafana_url is unset: pages carry no dashboard link; set it to the Grafana URL your "
            "on-call reaches."
        )
    elif urlparse(cfg.links.grafana_url).hostname in LOCAL_HOSTS:
        out.append(
            f"links.grafana_url is {cfg.links.grafana_url}, which opens only on the machine running Grafana; "
            "set it to the Grafana URL your on-call reaches."
        )
    return out
