"""One row per replica and model: which one is overloaded, slow, failing or freshly restarted."""

from __future__ import annotations

from ...config import BundleConfig
from ...signals import Resolution
from ...vocabulary import by
from ..spec import Panel, Query
from .queries import Filters


def replicas_table(res: Resolution, cfg: BundleConfig, f: Filters) -> Panel | None:
    n = f.names
    r = f.replica
    # (header, unit, query) for each column the source can fill, all from recording rules.
    columns: list[tuple[str, str, str]] = []
    if "requests_running" in res.signals:
        columns.append(("Running", "none", f"{n.requests_running}{r}"))
    if "requests_waiting" in res.signals:
        columns.append(("Waiting", "none", f"{n.requests_waiting}{r}"))
    if "kv_cache_usage" in res.signals:
        columns.append(("KV cache", "percentunit", f"{n.kv_cache_usage}{r}"))
    columns.append(("Requests / s", "reqps", f"{n.requests_finished}{r}"))
    if "generation_tokens" in res.signals:
        columns.append(("Tokens / s", "none", f"{n.generation_tokens}{r}"))
    for key, header in (("time_to_first_token", "TTFT p95"), ("inter_token_latency", "ITL p95")):
        if key in res.signals:
            columns.append((header, "s", f"{n.quantile(key, 'p95')}{r}"))
    if res.reports_engine_errors:
        columns.append(("Errors", "percentunit", f"{n.request_errors}{r}"))
    if "preemptions" in res.signals:
        columns.append(("Preemptions / request", "none", f"{n.preemptions_per_request}{r}"))
    started = f.family("process_start_time_seconds")
    if started is not None and "requests_running" in res.signals:
        # The process series have no model: take each (replica, model) of the running gauge.
        columns.append(
            (
                "Up for",
                "s",
                f"(time() - {started.name}{f.raw(started)})\n"
                f"* on ({by(f.scope.instance)}) group_right ()\n(0 * {n.requests_running}{r} + 1)",
            )
        )
    if not columns:
        return None
    refs = [chr(ord("A") + i) for i in range(len(columns))]
    labels = [(label, label, "") for label in (*f.scope.server, "model_name")]
    value = "Value" if len(columns) == 1 else "Value #{}"
    return Panel(
        title="Replicas",
        description=(
            "Every replica and model now: load, KV cache, traffic, latency, errors and time since its API "
            f"server started (rates and percentiles over {cfg.alerts.rate_window}). Sort by a column to find "
            "the outlier; click a row to open that replica."
        ),
        unit="none",
        kind="table",
        queries=tuple(Query(expr, header, instant=True) for header, _, expr in columns),
        columns=tuple(labels)
        + tuple(
            (value.format(ref), header, unit) for ref, (header, unit, _) in zip(refs, columns, strict=True)
        ),
        width=24,
        height=8,
        drill="instance",
    )
