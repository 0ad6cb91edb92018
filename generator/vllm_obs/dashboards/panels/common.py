"""Panels and panel shapes several dashboards share."""

from __future__ import annotations

from ...signals import Signal
from ...source import Family
from ..spec import Panel, Query
from .queries import TOP, Filters

WARN, CRIT = "orange", "red"
LEGEND = "{{instance}} {{model_name}}"
PERCENTILES = ((0.5, "p50"), (0.95, "p95"), (0.99, "p99"))


def latency_panel(
    f: Filters,
    key: str,
    title: str,
    legend: str,
    warn: float | None = None,
    crit: float | None = None,
    drill: str | None = None,
    per_model: bool = False,
) -> Panel | None:
    """p50/p95/p99 per replica (or `per_model`, from the recording rules), with the alert
    thresholds (p95) dashed."""
    res, cfg = f.res, f.cfg
    if key not in res.signals:
        return None
    quantiles = ("p50", "p95", "p99")
    if per_model:
        exprs, window = tuple(f"{f.names.quantile(key, q, 'job_model')}{f.model}" for q in quantiles), None
    else:
        exprs, window = f.replica_statistics(key, quantiles)
    queries = tuple(Query(e, f"{q} {legend}") for e, q in zip(exprs, quantiles, strict=True))
    thresholds = tuple((v, c) for v, c in ((warn, WARN), (crit, CRIT)) if v is not None)
    series = res[key].name
    return Panel(
        title=title,
        description=(
            f"p50, p95 and p99 over {window or cfg.alerts.rate_window}, from {series}. "
            + (
                f"Dashed: the replica warning's threshold, on the p95 over {cfg.alerts.rate_window}; the SLO "
                "burn alerts page."
                if thresholds
                else ""
            )
        ).strip(),
        unit="s",
        queries=queries,
        thresholds=thresholds,
        min=0,
        drill=drill,
    )


def raw_percentiles(
    f: Filters,
    sig: Signal | Family,
    title: str,
    description: str,
    unit: str,
    group: str,
    legend: str,
    width: int = 8,
) -> Panel:
    """p50/p95/p99 and the mean straight from a histogram's buckets, for series no rule records."""
    queries = tuple(Query(f.quantile(sig, q, group), f"{label} {legend}") for q, label in PERCENTILES)
    return Panel(
        title=title,
        description=description,
        unit=unit,
        queries=queries + (Query(f.mean(sig, group), f"mean {legend}"),),
        min=0,
        width=width,
    )


def replica_percentiles(
    f: Filters,
    sig: Signal,
    title: str,
    description: str,
    unit: str,
    quantiles: tuple[str, ...] = ("p50", "p95", "p99"),
    width: int = 8,
) -> Panel:
    """A histogram's per-replica quantiles (recorded on a fleet dashboard: Filters.replica_statistics) and
    its mean from the raw sums. On a fleet dashboard: the highest quantile's worst replicas and spread,
    the others' worst replicas, and the mean per model."""
    exprs, window = f.replica_statistics(sig.key, quantiles)
    recorded = dict(zip(quantiles, exprs, strict=True))
    if f.fleet:
        *lower, top = quantiles
        queries = tuple(Query(f.worst(recorded[q]), f"{q} {LEGEND}") for q in lower)
        queries += fleet_queries(f, recorded[top], LEGEND, label=top)
        description = f"{description} {FLEET_LINES}"
    else:
        queries = tuple(Query(recorded[q], f"{q} {LEGEND}") for q in quantiles)
    return Panel(
        title=title,
        description=f"{description} {'/'.join(quantiles)} over {window}; mean over the panel's rate interval.",
        unit=unit,
        queries=queries + (Query(f.mean(sig, f.per_model), f"mean {f.legend}"),),
        min=0,
        width=width,
    )


FLEET_LINES = (
    f"Lines: the {TOP} highest at each moment (each shows while it is among them), and the median "
    "and 90th percentile of all those selected (per model where the line names one)."
)
LOWEST_LINES = (
    f"Lines: the {TOP} lowest at each moment (each shows while it is among them), and the median "
    "and 10th percentile of all those selected (per model where the line names one)."
)


def fleet_queries(
    f: Filters, expr: str, legend: str, lowest: bool = False, label: str = "", per: str = "model_name"
) -> tuple[Query, ...]:
    """A per-replica (or per-engine) statistic at any fleet size: the worst few by name and the
    spread of all (FLEET_LINES), never a line each. `lowest`: low is bad (a hit rate, steps/s)."""
    named = f"{label} " if label else ""
    return (Query(f.worst(expr, lowest), f"{named}{legend}"),) + tuple(
        Query(e, f"{named}{name}") for e, name in f.spread(expr, lowest, per)
    )


def queue_queries(f: Filters) -> tuple[Query, ...]:
    """Waiting requests per replica as fleet lines, and the busiest replicas' running requests
    (QUEUE_LINES says so)."""
    n = f.names
    return fleet_queries(f, f"{n.requests_waiting}{f.replica}", LEGEND, label="waiting") + (
        Query(f.worst(f"{n.requests_running}{f.replica}"), f"running {LEGEND}"),
    )


QUEUE_LINES = f"{FLEET_LINES} Running: the {TOP} busiest."


def heatmap(
    f: Filters, sig: Signal | Family, title: str, what: str, unit: str, recorded: bool = False
) -> Panel:
    """A histogram's distribution over time from its buckets, showing what percentiles hide (two
    populations, a passing tail). `recorded`: from the per-model bucket rate the rules record, since
    a whole fleet's raw buckets cost seconds per refresh."""
    if recorded:
        rule = f.names.bucket_rate(sig.key, "job_model")
        expr = f"sum by (le) ({rule}{f.model})"
        source = f"{rule}, every replica of the models selected, over {f.cfg.alerts.rate_window}"
    else:
        expr, source = f.buckets(sig), sig.name
    return Panel(
        title=title,
        description=(
            f"How {what} are distributed over time (requests per second in each bucket of {source}); "
            "a second band or a wide spread is what the percentile lines average away."
        ),
        unit=unit,
        queries=(Query(expr, "{{le}}", format="heatmap"),),
        kind="heatmap",
    )


def error_panel(f: Filters, replica: str, target: str, drill: str | None = None) -> Panel | None:
    """Share of requests failing: what VllmRequestErrors judges (vLLM's count or HTTP 5xx of the
    inference handlers, the larger), and each of the two. On a fleet dashboard: the worst replicas
    of each, and the spread of the first."""
    res, cfg, n = f.res, f.cfg, f.names
    if not f.v.counts_failures:
        return None
    failing = f"{n.request_failures}{replica}"
    if f.fleet:
        queries = list(fleet_queries(f, failing, LEGEND, label="failing"))
    else:
        queries = [Query(failing, "failing {{instance}} {{model_name}}")]
    top = f.worst if f.fleet else (lambda expr: expr)
    if res.reports_engine_errors:
        queries.append(Query(top(f"{n.request_errors}{replica}"), "vLLM errors {{instance}} {{model_name}}"))
    if "http_requests" in res.signals:
        queries.append(Query(top(f"{n.http_errors}{target}"), "HTTP 5xx {{instance}}"))
    return Panel(
        title="Error ratio",
        description=(
            "Share of requests failing, the canary's left out: vLLM's own errors, HTTP 5xx of the "
            "inference handlers, and the larger of the two (VllmRequestErrors). Dashed: its threshold."
            + (f" {FLEET_LINES}" if f.fleet else "")
        ),
        unit="percentunit",
        queries=tuple(queries),
        thresholds=((cfg.alerts.error_ratio_warning, WARN),),
        min=0,
        drill=drill,
    )


def stat(title: str, description: str, unit: str, expr: str, **kw) -> Panel:
    """A single number for the top of a dashboard."""
    return Panel(
        title=title,
        description=description,
        unit=unit,
        kind="stat",
        queries=(Query(expr, title),),
        width=kw.pop("width", 4),
        height=kw.pop("height", 4),
        **kw,
    )


def keep(*panels: Panel | None) -> tuple[Panel, ...]:
    """Panels for signals the source has; a missing signal loses its panel, never shows an empty one."""
    return tuple(p for p in panels if p is not None)
