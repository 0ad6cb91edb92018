"""Check 4: the label plumbing alerts depend on. The log exporter's and probe's series carry the
watched server's `instance` (else joins `on (instance)` match nothing), vLLM series carry
`model_name`, and every range in a rule spans at least four scrapes or evaluations of its input.
"""

from __future__ import annotations

import math

import yaml

from ...promql import seconds
from ..bundle_view import JobReads
from ..clients import ApiError
from ..context import Context
from ..findings import FAIL, OK, WARN
from ..selectors import PromQLSyntaxError, duration_seconds, selectors

FAMILY = "labels"
SHOWN = 5
MIN_SCRAPES = 4


def run(ctx: Context) -> None:
    vllm = ctx.view.reads_of_role("vLLM")
    if vllm is None:
        return
    vllm_instances = _instances(ctx, f"up{{{vllm.selector}}}")
    for role in ("log exporter", "canary probe"):
        scope = ctx.view.reads_of_role(role)
        if scope is not None and vllm_instances is not None:
            _check_instances(ctx, scope, vllm, vllm_instances)
    _check_model_name(ctx, vllm)
    _check_windows(ctx)


def _instances(ctx: Context, expr: str) -> set[str] | None:
    try:
        result = ctx.prom.query(f"group by (instance) ({expr})")
    except ApiError as exc:
        ctx.unchecked(FAMILY, "instance labels", "read the instance labels", exc)
        return None
    return {s["metric"].get("instance", "") for s in result}


def _check_instances(ctx: Context, scope: JobReads, vllm: JobReads, vllm_instances: set[str]) -> None:
    name = next((n for n in sorted(scope.names) if (scope.job, n) in ctx.presence), None)
    if name is None:
        return  # nothing of the job exists: Targets and Series already say so
    theirs = _instances(ctx, f'{{__name__="{name}", {scope.selector}}}')
    if theirs is None:
        return
    unmatched = sorted(theirs - vllm_instances)
    breaks = _joins(ctx, scope, vllm)
    if unmatched:
        shown = ", ".join(unmatched[:SHOWN]) + (
            f" and {len(unmatched) - SHOWN} more" if len(unmatched) > SHOWN else ""
        )
        ctx.add(
            FAMILY,
            FAIL,
            f"{scope.role} instance",
            f"{len(unmatched)} of {len(theirs)} {scope.role} instance label(s) match no vLLM target ({shown}); "
            f"so these silently do nothing for them: {'; '.join(breaks) or 'every join on instance'}",
            f"give the {scope.role}'s series the instance label of the vLLM server it watches, as Prometheus "
            f"labels that server (e.g. {_example(vllm_instances)}), and regenerate the bundle with that",
            unmatched,
        )
        return
    ctx.add(
        FAMILY,
        OK,
        f"{scope.role} instance",
        f"all {len(theirs)} {scope.role} instance label(s) match a vLLM target, so {len(breaks)} inhibition(s) "
        "and joins on instance work",
    )
    uncovered = len(vllm_instances - theirs)
    if uncovered and scope.role == "log exporter":
        ctx.add(
            FAMILY,
            WARN,
            "log exporter coverage",
            f"{uncovered} of {len(vllm_instances)} vLLM targets have no log exporter: their engine deaths, OOMs and "
            "failed starts do not alert",
            "run a vllm-log-exporter next to each vLLM server and scrape it",
        )


def _joins(ctx: Context, scope: JobReads, vllm: JobReads) -> list[str]:
    """The inhibitions and alert rules that join this job's alerts or series to vLLM's by instance."""
    theirs = {r.name for r in ctx.view.rules if r.kind == "alert" and _reads(r.expr, scope.job)}
    out = []
    for rule in ctx.view.inhibit_rules:
        sources = _alertnames(rule.get("source_matchers") or [])
        if "instance" in (rule.get("equal") or []) and sources & theirs:
            targets = _alertnames(rule.get("target_matchers") or [])
            out.append(
                f"the inhibition of {', '.join(sorted(targets)) or 'its targets'} by "
                f"{', '.join(sorted(sources & theirs))}"
            )
    joined = sorted(
        {
            r.name
            for r in ctx.view.rules
            if r.kind == "alert" and _reads(r.expr, scope.job) and _reads(r.expr, vllm.job)
        }
    )
    if joined:
        out.append(f"the join of the {scope.role}'s series to vLLM's in {', '.join(joined)}")
    return out


def _reads(expr: str, job: str) -> bool:
    try:
        return any(s.equalities().get("job") == job for s in selectors(expr))
    except PromQLSyntaxError:
        return False


def _alertnames(matchers: list[str]) -> set[str]:
    """Alert names an Alertmanager matcher list names (alertname="A" or alertname=~"A|B")."""
    out: set[str] = set()
    for matcher in matchers:
        label, _, value = str(matcher).partition("=")
        if label.strip() != "alertname":
            continue
        value = value.lstrip("~").strip().strip('"')
        out |= {v for v in value.split("|") if v}
    return out


def _example(instances: set[str]) -> str:
    return sorted(instances)[0] if instances else "host:port"


def _check_model_name(ctx: Context, vllm: JobReads) -> None:
    labelled = [
        n
        for n in sorted(vllm.names)
        if (vllm.job, n) in ctx.presence
        and "model_name" in _catalog_labels(ctx, n)
        and not n.endswith("_bucket")
    ]
    if not labelled:
        return
    name = labelled[0]
    sel = f'{{__name__="{name}", {vllm.selector}}}'
    results = ctx.prom.query_many(
        [f"count by (model_name) ({sel})", f'count({{__name__="{name}", {vllm.selector}, model_name=""}})']
    )
    errors = [r for r in results if isinstance(r, ApiError)]
    if errors:
        ctx.unchecked(FAMILY, "model_name", "read the model_name values", errors[0])
        return
    values = sorted(s["metric"].get("model_name", "") for s in results[0] if s["metric"].get("model_name"))
    lacking = int(float(results[1][0]["value"][1])) if results[1] else 0
    if lacking or not values:
        ctx.add(
            FAMILY,
            FAIL,
            "model_name",
            f"{lacking} series of {name} carry no model_name: per-model rules, alerts and the dashboards' model "
            "variable leave them out",
            "keep the model_name label vLLM sets (a relabel rule or a proxy drops it)",
        )
        return
    shown = ", ".join(values[:SHOWN]) + (f" and {len(values) - SHOWN} more" if len(values) > SHOWN else "")
    ctx.add(FAMILY, OK, "model_name", f"every {name} series carries model_name ({shown})")


def _catalog_labels(ctx: Context, name: str) -> set[str]:
    from ..bundle_view import base_name

    metric = ctx.catalog.metrics.get(base_name(name, ctx.catalog))
    return {label for v in metric.variants for label in v.labels} if metric else set()


def _check_windows(ctx: Context) -> None:
    scraped = _scrape_intervals(ctx)
    evaluated = _evaluation_intervals(ctx)
    short: dict[tuple[str, str, float], list[str]] = {}
    checked = 0
    for rule in ctx.view.rules:
        try:
            found = selectors(rule.expr)
        except PromQLSyntaxError:
            continue
        for sel in found:
            if not sel.window or not sel.name:
                continue
            job = sel.equalities().get("job")
            if sel.name in evaluated:
                source, every = f"recording rule {sel.name}", evaluated[sel.name]
            elif job in scraped:
                source, every = f"job {job}", scraped[job]
            else:
                continue
            checked += 1
            if duration_seconds(sel.window) < MIN_SCRAPES * every:
                short.setdefault((source, sel.window, every), []).append(rule.name)
    if not checked:
        return
    if not short:
        ctx.add(
            FAMILY,
            OK,
            "rate windows",
            f"every range in the rules spans at least {MIN_SCRAPES} scrapes or evaluations",
        )
        return
    for (source, window, every), rules in sorted(short.items()):
        names = sorted(set(rules))
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        ctx.add(
            FAMILY,
            FAIL,
            f"[{window}] over {source}",
            f"{len(names)} rule(s) ({shown}) use [{window}] over {source}, which gets a sample every {every:g} s: "
            f"a range needs {MIN_SCRAPES} samples ({MIN_SCRAPES * every:g} s) or rates come out empty or jumpy",
            f"scrape (or evaluate) at most every {math.floor(duration_seconds(window) / MIN_SCRAPES):g} s, or raise "
            "the window in your config (alerts.rate_window and the *_window knobs) and regenerate",
            names,
        )


def _scrape_intervals(ctx: Context) -> dict[str, float]:
    """job -> scrape interval: the targets' own, else the running configuration's."""
    out = dict(ctx.scrape_intervals)
    missing = [s.job for s in ctx.view.job_reads.values() if s.job not in out]
    if not missing:
        return out
    try:
        config = yaml.safe_load((ctx.prom.get("/api/v1/status/config") or {}).get("yaml", "")) or {}
    except (ApiError, yaml.YAMLError, AttributeError):
        return out
    default = (config.get("global") or {}).get("scrape_interval", "1m")
    for job in config.get("scrape_configs") or []:
        if job.get("job_name") in missing:
            out[job["job_name"]] = seconds(str(job.get("scrape_interval") or default))
    return out


def _evaluation_intervals(ctx: Context) -> dict[str, float]:
    """recorded series -> how often its group evaluates (loaded interval, else the bundle's)."""
    out = {}
    for group in ctx.view.groups:
        live = (ctx.loaded_groups or {}).get(group.name)
        every = float(live[0].get("interval") or 0) if live else 0.0
        every = every or seconds(group.interval or ctx.view.evaluation_interval)
        for rule in group.rules:
            if rule.kind == "record":
                out[rule.name] = every
    return out
