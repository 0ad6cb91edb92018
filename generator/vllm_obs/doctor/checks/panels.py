"""Check 6: every panel query of the bundle's dashboards returns data, or says why not. Variables and
$__range, $__interval, $__rate_interval are resolved as Grafana does on load (docs/design.md); an
empty panel is explained with the causes earlier checks found for the series it reads.
"""

from __future__ import annotations

import math
import re

from ..bundle_view import Dashboard, label_values_expr, label_values_label
from ..clients import ApiError
from ..context import Cause, Context
from ..findings import FAIL, INFO, OK, WARN
from ..grafana_vars import builtins, expand, regex_alternatives
from ..selectors import PromQLSyntaxError, selectors

FAMILY = "dashboards"
ALL = "$__all"
# Functions over a range whose result is empty or zero when nothing was counted in it.
_COUNTING = frozenset({"rate", "irate", "increase"})
# A template variable left in a query after expansion: one the dashboard does not define.
_LEFT_OVER = re.compile(r"\$\{?([A-Za-z_]\w*)")
SHOWN = 4
DATA, EMPTY, NAN = "data", "empty", "nan"


def run(ctx: Context) -> None:
    scrape = _scrape_interval(ctx)
    expanded = []
    for dash in ctx.view.dashboards:
        subs = {**builtins(dash.time_from, scrape), **_variables(ctx, dash)}
        expanded.append([expand(q.expr, subs) for q in dash.queries])
    answers = _answers(ctx, [e for exprs in expanded for e in exprs])
    for dash, exprs in zip(ctx.view.dashboards, expanded, strict=True):
        empty: dict[str, list[tuple[str, Cause]]] = {}
        with_data = 0
        for query, expr in zip(dash.queries, exprs, strict=True):
            answer = answers[expr]
            if isinstance(answer, ApiError):
                ctx.add(
                    FAMILY,
                    FAIL,
                    query.where,
                    f"the query fails ({answer.describe})",
                    "raise --timeout if it timed out (the query is heavy for this Prometheus); otherwise "
                    f"Prometheus refuses it as written, which is a bug to report: {' '.join(expr.split())}",
                )
                continue
            if answer == DATA:
                with_data += 1
                continue
            cause = _why(ctx, expr) or _probe(ctx, expr, answer == NAN)
            empty.setdefault(query.panel, []).append((query.ref_id, cause))
        total = len(dash.queries)
        ctx.add(
            FAMILY,
            OK if with_data == total else INFO,
            dash.title,
            f"{with_data} of {total} panel queries return data",
        )
        by_cause: dict[Cause, dict[str, list[str]]] = {}
        for panel, problems in empty.items():
            for ref, cause in problems:
                by_cause.setdefault(cause, {}).setdefault(panel, []).append(ref)
        for cause, panels in sorted(by_cause.items(), key=lambda kv: kv[0].status != FAIL):
            named = [f"{panel} ({', '.join(refs)})" for panel, refs in panels.items()]
            shown = "; ".join(named[:SHOWN]) + (
                f"; and {len(named) - SHOWN} more" if len(named) > SHOWN else ""
            )
            ctx.add(
                FAMILY,
                cause.status,
                dash.title,
                f"{len(named)} panel{'s' if len(named) != 1 else ''} empty ({shown}): {cause.text}",
                cause.action
                or (
                    "fix that cause (its own line above says how)"
                    if cause.status == FAIL
                    else "nothing is broken; they fill in when that happens"
                ),
                named,
            )


def _answers(ctx: Context, exprs: list[str]) -> dict[str, str | ApiError]:
    """data, empty or NaN (only NaN samples) for each distinct query. Each is asked first as
    `count((Q) > -Inf)`: one number instead of a series per target, NaN dropped; only those that
    come back empty (or cannot be wrapped) are asked as written.
    """
    distinct = list(dict.fromkeys(exprs))
    wrapped = ctx.prom.query_many([f"count(({e}) > -Inf)" for e in distinct])
    out: dict[str, str | ApiError] = {}
    again = []
    for expr, answer in zip(distinct, wrapped, strict=True):
        if not isinstance(answer, ApiError) and answer:
            out[expr] = DATA
        else:
            again.append(expr)
    for expr, answer in zip(again, ctx.prom.query_many(again), strict=True):
        if isinstance(answer, ApiError):
            out[expr] = answer
        else:
            out[expr] = DATA if _has_data(answer) else (NAN if answer else EMPTY)
    return out


def _scrape_interval(ctx: Context) -> str:
    """The data source's scrape interval, which Grafana's $__rate_interval is built from."""
    if ctx.view.grafana_scrape_interval:
        return ctx.view.grafana_scrape_interval
    scope = ctx.view.reads_of_role("vLLM")
    if scope and scope.job in ctx.scrape_intervals:
        return f"{ctx.scrape_intervals[scope.job]:g}s"
    return ctx.view.scrape_interval


def _variables(ctx: Context, dash: Dashboard) -> dict[str, str]:
    values: dict[str, str] = {}
    for var in dash.variables:
        if var.kind == "datasource":
            continue
        label, expr = label_values_label(var.query), label_values_expr(var.query)
        if var.kind != "query" or not label or not expr:
            if var.current and var.current != ALL:
                values[var.name] = var.current
            elif var.all_value is not None:
                values[var.name] = var.all_value
            continue
        expanded = expand(expr, values)
        try:
            result = ctx.prom.query(f"group by ({label}) ({expanded})")
        except ApiError as exc:
            ctx.add(
                FAMILY,
                FAIL,
                f"{dash.title} / ${var.name}",
                f"the variable's query fails ({exc.describe}), so the panels that filter on it are empty",
                f"fix the variable's query in the dashboard; it ran as: group by ({label}) ({expanded})",
            )
            result = []
        live = sorted({s["metric"].get(label, "") for s in result} - {""})
        if not live:
            cause = _why(ctx, expanded)
            ctx.add(
                FAMILY,
                cause.status if cause else FAIL,
                f"{dash.title} / ${var.name}",
                "the variable has no values, so every panel that filters on it is empty"
                + (f": {cause.text}" if cause else f"; its query reads nothing: {expanded}"),
                (cause.action or "fix the cause named above") if cause else "check the series and labels it reads",
            )
        if var.include_all and (var.current in (None, ALL)):
            values[var.name] = (
                var.all_value if var.all_value is not None else regex_alternatives(live or [""])
            )
        elif var.current in live:
            values[var.name] = var.current  # type: ignore[assignment]
        else:
            values[var.name] = live[0] if live else ""
    return values


def _why(ctx: Context, expr: str) -> Cause | None:
    """The worst known cause among the series and recorded rules expr reads."""
    try:
        names = [s for s in selectors(expr) if s.name]
    except PromQLSyntaxError:
        return None
    causes = []
    for sel in names:
        if sel.name in ctx.causes:
            causes.append(ctx.causes[sel.name])
        elif sel.name == "up":
            job = sel.equalities().get("job")
            if job and ctx.job_is_down(job):
                causes.append(ctx.job_down(job))
        elif sel.name == "ALERTS":
            # Alerts come from the bundle's alert rules: whatever keeps those from running.
            causes += [
                ctx.causes[r.name] for r in ctx.view.rules if r.kind == "alert" and r.name in ctx.causes
            ][:1]
    if not causes:
        jobs = {sel.equalities().get("job") for sel in names} - {None}
        causes = [c for c in map(ctx.scrape_failed_lately, sorted(jobs)) if c]  # type: ignore[arg-type]
    if not causes:
        return None
    return next((c for c in causes if c.status == FAIL), causes[0])


def _probe(ctx: Context, expr: str, nan_only: bool) -> Cause:
    """Ask Prometheus about each selector of an empty query: which part is empty, and why."""
    unresolved = sorted(set(_LEFT_OVER.findall(expr)))
    if unresolved:
        return Cause(
            FAIL,
            f"it uses ${', $'.join(unresolved)}, which the dashboard does not define, so it matches nothing",
            "define the variable in the dashboard or drop it from the query (a vllm-obs bug if the dashboard is "
            "generated: report it)",
        )
    try:
        parts = [s for s in selectors(expr) if s.name]
    except PromQLSyntaxError:
        parts = []
    asks = [f"count({s.text})" for s in parts]
    moving = [s for s in parts if s.window and s.function in _COUNTING]
    asks += [f"count({s.function}({s.text}[{s.window}]) > 0)" for s in moving]
    answers = ctx.prom.query_many(asks) if asks else []
    counts, moves = answers[: len(parts)], answers[len(parts) :]
    for sel, answer in zip(parts, counts, strict=True):
        if not isinstance(answer, ApiError) and not answer:
            return Cause(
                FAIL,
                f"{sel.text} matches no series (its label filters select nothing that exists)",
                "compare its label filters with the labels the series really has (Prometheus's graph page shows them)",
            )
    still = [
        s for s, answer in zip(moving, moves, strict=True) if not isinstance(answer, ApiError) and not answer
    ]
    if still:
        sel = still[0]
        try:
            ever = bool(ctx.prom.query(f"count({sel.text} > 0)"))
        except ApiError:
            ever = True
        if not ever:
            return Cause(
                WARN,
                f"{sel.name} has counted nothing since the server started: what it counts has not happened "
                "(no such requests, or the cache or feature it measures is not in use)",
            )
        return Cause(WARN, f"{sel.name} did not move in the last {sel.window}: no traffic in the window yet")
    if nan_only:
        return Cause(
            WARN, "only NaN: the histograms it reads saw no observation in the window (no traffic yet)"
        )
    return Cause(
        FAIL,
        "every series it reads exists and moves, yet the query is empty: a join or filter in it matches nothing",
        f"run it in Prometheus part by part to see which: {' '.join(expr.split())}",
    )


def _has_data(result: list[dict]) -> bool:
    for sample in result:
        value = sample.get("value") or (sample.get("values") or [[0, "NaN"]])[-1]
        try:
            if math.isfinite(float(value[1])):
                return True
        except (TypeError, ValueError, IndexError):
            continue
    return False
