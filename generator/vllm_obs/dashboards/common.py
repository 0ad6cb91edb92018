"""Panels several dashboards share."""

from __future__ import annotations

from ..config import BundleConfig
from ..rules.names import Names
from ..signals import Resolution
from .spec import Panel, Query

WARN, CRIT = "orange", "red"


def latency_panel(
    res: Resolution,
    cfg: BundleConfig,
    key: str,
    title: str,
    level: str,
    selector: str,
    legend: str,
    warn: float | None = None,
    crit: float | None = None,
) -> Panel | None:
    if key not in res.signals:
        return None
    n = Names(cfg.alerts.rate_window)
    queries = tuple(
        Query(f"{n.quantile(key, q, level)}{selector}", f"{q} {legend}") for q in ("p50", "p95", "p99")
    )
    thresholds = tuple((v, c) for v, c in ((warn, WARN), (crit, CRIT)) if v is not None)
    series = res[key].name
    return Panel(
        title=title,
        description=(
            f"p50, p95 and p99 over {cfg.alerts.rate_window}, from {series}. "
            + ("Dashed lines: the warning and critical alert thresholds (p95)." if thresholds else "")
        ).strip(),
        unit="s",
        queries=queries,
        thresholds=thresholds,
        min=0,
    )


def error_panel(res: Resolution, cfg: BundleConfig, replica: str, target: str) -> Panel | None:
    """Share of requests failing, from the engine (finished_reason="error") and from HTTP 5xx."""
    n = Names(cfg.alerts.rate_window)
    queries = []
    if res.reports_engine_errors:
        queries.append(Query(f"{n.request_errors}{replica}", "engine errors {{instance}} {{model_name}}"))
    if "http_requests" in res.signals:
        queries.append(Query(f"{n.http_errors}{target}", "HTTP 5xx {{instance}}"))
    if not queries:
        return None
    return Panel(
        title="Error ratio",
        description="Share of requests failing (VllmRequestErrors). Dashed: the warning and critical alert thresholds.",
        unit="percentunit",
        queries=tuple(queries),
        thresholds=((cfg.alerts.error_ratio_warning, WARN), (cfg.alerts.error_ratio_critical, CRIT)),
        min=0,
    )


def keep(*panels: Panel | None) -> tuple[Panel, ...]:
    """Panels for signals the source has; a missing signal loses its panel, never shows an empty one."""
    return tuple(p for p in panels if p is not None)
