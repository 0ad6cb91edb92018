"""Check 1: every job the bundle reads (its rules' `job="..."` matchers) has targets, and they are up.
Health and last scrape error come from /api/v1/targets, or from `up` where a Prometheus-compatible
service does not serve it (Thanos Query, Mimir).
"""

from __future__ import annotations

from ...errors import BundleError
from ...promql import seconds
from ..clients import ApiError
from ..context import Context, Target
from ..findings import FAIL, OK, WARN

FAMILY = "targets"
SHOWN = 5  # targets named in one line; the rest are counted


def run(ctx: Context) -> None:
    ctx.targets = {}
    sources = {}
    for scope in ctx.view.job_reads.values():
        try:
            targets, sources[scope.job] = _targets_of(ctx, scope.job, scope.selector)
        except ApiError as exc:
            # Unknown, not absent: later checks must not blame a down job for what they find.
            ctx.unchecked(FAMILY, scope.title, f"read the targets of job {scope.job}", exc)
            continue
        ctx.targets[scope.job] = targets
        known = [t.interval_s for t in targets if t.interval_s]
        if known:
            ctx.scrape_intervals[scope.job] = max(known)
        _check_job(ctx, scope.job, scope.title, sources[scope.job], ctx.is_pipeline(scope.job))
    if ctx.config is not None:
        _check_config_jobs(ctx)


def _targets_of(ctx: Context, job: str, selector: str) -> tuple[list[Target], str]:
    """A job's targets from its scrape pool, or from the job's `up` series (no scrape error) where the
    pool is named otherwise (Prometheus Operator) or the API is missing (Thanos Query, Mimir).
    Raises ApiError when neither answers."""
    try:
        found = [t for t in (_target(raw) for raw in ctx.prom.targets(job)) if t.job == job]
    except ApiError as exc:
        if exc.status == 0:
            raise  # a timeout: asking again another way would only wait as long
        found = []
    if found:
        return found, "targets"
    result = ctx.prom.query(f"up{{{selector}}}")
    return [
        Target(
            job=job,
            instance=s["metric"].get("instance", ""),
            health="up" if float(s["value"][1]) == 1 else "down",
            error="",
            scrape_url="",
            interval_s=None,
        )
        for s in result
    ], "up"


def _check_job(ctx: Context, job: str, title: str, source: str, pipeline: bool = False) -> None:
    """A job the vLLM alerts read must be up (FAIL otherwise); one only the pipeline's own
    alerts read (Prometheus', Alertmanager's) warns: those alerts alone go blind."""
    targets = (ctx.targets or {}).get(job, [])
    bad = WARN if pipeline else FAIL
    blind = " (the VllmObs* pipeline alerts cannot fire)" if pipeline else ""
    if not targets:
        similar = sorted(j for j in _all_jobs(ctx) if job in j and j not in ctx.view.job_reads)
        hint = (
            f"; Prometheus has job(s) {', '.join(similar[:SHOWN])}: if that is it, set its name in your "
            "config (prometheus.*_job) and regenerate"
            if similar
            else ""
        )
        in_bundle = ctx.view.job(job) is not None
        ctx.add(
            FAMILY,
            bad,
            title,
            f'Prometheus has no target with job="{job}", so nothing the bundle reads from it exists{blind}',
            (
                f"load the bundle's `{job}` scrape job (prometheus/prometheus.yml) into the running Prometheus"
                if in_bundle
                else f'scrape it under job="{job}" (a scrape job, PodMonitor or ServiceMonitor)'
            )
            + hint,
        )
        return
    down = [t for t in targets if t.health == "down"]
    pending = [t for t in targets if t.health not in ("up", "down")]
    up = len(targets) - len(down) - len(pending)
    if down:
        shown = "; ".join(f"{t.instance} ({t.error or 'down'})" for t in down[:SHOWN])
        more = f"; and {len(down) - SHOWN} more" if len(down) > SHOWN else ""
        ctx.add(
            FAMILY,
            bad,
            title,
            f"{len(down)} of {len(targets)} targets down: {shown}{more}{blind}",
            "start the server or fix the address, port, scheme or credentials Prometheus scrapes it with",
            [t.instance for t in down],
        )
    if pending:
        ctx.add(
            FAMILY,
            WARN,
            title,
            f"{len(pending)} of {len(targets)} targets not scraped yet (Prometheus just found them)",
            "run the doctor again after one scrape interval",
            [t.instance for t in pending],
        )
    if not down and not pending:
        interval = ctx.scrape_intervals.get(job)
        every = f", scraped every {_seconds_text(interval)}" if interval else ""
        ctx.add(FAMILY, OK, title, f"{up} target{'s' if up != 1 else ''}, all up{every} (from {source})")


def _check_config_jobs(ctx: Context) -> None:
    """--config names the jobs the bundle was generated with; a different set means another bundle."""
    p = ctx.config.prometheus  # type: ignore[union-attr]
    wanted = {p.vllm_job}
    if p.log_exporters:
        wanted.add(p.log_exporter_job)
    if p.probes:
        wanted.add(p.probe_job)
    missing = sorted(wanted - set(ctx.view.job_reads))
    if missing:
        ctx.add(
            FAMILY,
            FAIL,
            "--config",
            f"the config names job(s) {', '.join(missing)} that the bundle's rules do not read, so the bundle "
            "was not generated from this config",
            "regenerate the bundle with this --config, or pass the config it was generated with",
        )


def _target(raw: dict) -> Target:
    labels = raw.get("labels") or {}
    interval = raw.get("scrapeInterval") or (raw.get("discoveredLabels") or {}).get("__scrape_interval__")
    return Target(
        job=str(labels.get("job", raw.get("scrapePool", ""))),
        instance=str(labels.get("instance", "")),
        health=str(raw.get("health", "unknown")),
        error=str(raw.get("lastError", "")),
        scrape_url=str(raw.get("scrapeUrl", "")),
        interval_s=_interval(interval),
    )


def _all_jobs(ctx: Context) -> list[str]:
    try:
        return [s["metric"].get("job", "") for s in ctx.prom.query("count by (job) (up)")]
    except ApiError:
        return []


def _interval(text: object) -> float | None:
    try:
        return seconds(str(text)) if text else None
    except BundleError:  # an unexpected format: the interval stays unknown
        return None


def _seconds_text(value: float) -> str:
    whole = int(value)
    if whole % 60 == 0 and whole:
        return f"{whole // 60}m"
    return f"{value:g}s"
