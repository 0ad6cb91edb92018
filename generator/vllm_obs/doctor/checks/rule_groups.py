"""Check 3: the bundle's rule groups are loaded, current (the same rules as on disk, compared as
normalised PromQL), evaluating, and feed the dashboards: an empty recording rule the dashboards
read is traced back to its input series.
"""

from __future__ import annotations

import time
from datetime import datetime

from ...promql import seconds
from ..bundle_view import Rule, RuleGroup, all_selectors
from ..clients import ApiError
from ..context import Cause, Context
from ..findings import FAIL, OK, WARN
from ..selectors import PromQLSyntaxError, canonical, selectors
from .presence import present

FAMILY = "rules"
STALE_AFTER_INTERVALS = 3  # a group not evaluated for this many intervals is stuck
SHOWN = 5


def run(ctx: Context) -> None:
    try:
        data = ctx.prom.get("/api/v1/rules", {"exclude_alerts": "true"})
    except ApiError as exc:
        ctx.unchecked(FAMILY, "loaded rules", "read /api/v1/rules", exc)
        return
    loaded: dict[str, list[dict]] = {}
    for group in data.get("groups") or []:
        loaded.setdefault(group.get("name", ""), []).append(group)
    ctx.loaded_groups = loaded
    by_file: dict[str, list[RuleGroup]] = {}
    for group in ctx.view.groups:
        by_file.setdefault(group.file, []).append(group)
    for file, groups in by_file.items():
        absent = [g for g in groups if g.name not in loaded]
        if len(absent) == len(groups):
            ctx.add(
                FAMILY,
                FAIL,
                file,
                f"not loaded: none of its {len(groups)} rule groups ({_names(groups)}) is in Prometheus, so "
                f"{_count(groups)} rules never run",
                f"add {file} to rule_files of the running Prometheus (prometheus/prometheus.yml lists it) and "
                "reload it, or apply kubernetes/generated/prometheusrule.yaml",
            )
            _mark_unloaded(ctx, groups)
            continue
        for group in absent:
            ctx.add(
                FAMILY,
                FAIL,
                group.name,
                f"not loaded, though other groups of {file} are: the running file is another version",
                f"load {file} of this bundle into the running Prometheus and reload it",
            )
        _mark_unloaded(ctx, absent)
        for group in groups:
            if group.name in loaded:
                _check_group(ctx, group, loaded[group.name])
    _check_recorded_for_dashboards(ctx)


def _check_group(ctx: Context, group: RuleGroup, copies: list[dict]) -> None:
    live = copies[0]
    problems = 0
    if len(copies) > 1:
        problems += 1
        files = ", ".join(sorted({c.get("file", "?") for c in copies}))
        ctx.add(
            FAMILY,
            WARN,
            group.name,
            f"loaded {len(copies)} times (from {files}): each of its alerts fires {len(copies)} times",
            "load the bundle's rules once (a rule file or a PrometheusRule, not both)",
        )
    difference = _difference(group, live.get("rules") or [])
    if difference:
        problems += 1
        ctx.add(
            FAMILY,
            FAIL,
            group.name,
            f"stale: the loaded group differs from the bundle on disk ({difference})",
            f"load {group.file} of this bundle into the running Prometheus and reload it, or point --bundle "
            "at the bundle it runs",
        )
    for rule in live.get("rules") or []:
        if rule.get("health") == "err" or rule.get("lastError"):
            problems += 1
            name = rule.get("name", "?")
            ctx.add(
                FAMILY,
                FAIL,
                f"{group.name} / {name}",
                f"fails to evaluate: {rule.get('lastError') or 'health err'}",
                "fix the rule (or what it reads) in the bundle's config and regenerate; Prometheus logs the same error",
            )
            ctx.fail_cause(name, f"rule {name} fails to evaluate ({rule.get('lastError', '')})")
    problems += _check_evaluation(ctx, group, live)
    if not problems:
        ago = _age(live.get("lastEvaluation"))
        ctx.add(
            FAMILY,
            OK,
            group.name,
            f"loaded, same {len(group.rules)} rule{'s' if len(group.rules) != 1 else ''} as the bundle, no errors, "
            f"last evaluated {ago:.0f} s ago",
        )


def _check_evaluation(ctx: Context, group: RuleGroup, live: dict) -> int:
    interval = float(live.get("interval") or seconds(group.interval or ctx.view.evaluation_interval))
    age = _age(live.get("lastEvaluation"))
    if age == float("inf"):
        ctx.add(
            FAMILY,
            WARN,
            group.name,
            "loaded but not evaluated yet",
            f"run the doctor again after {interval:g} s (one evaluation interval)",
        )
        return 1
    if age > max(STALE_AFTER_INTERVALS * interval, 60):
        ctx.add(
            FAMILY,
            FAIL,
            group.name,
            f"last evaluated {age:.0f} s ago, though its interval is {interval:g} s: its evaluations stopped",
            "check the Prometheus log and prometheus_rule_group_iterations_missed_total; restart or unload it",
        )
        for rule in group.rules:
            ctx.fail_cause(rule.name, f"its rule group {group.name} stopped evaluating {age:.0f} s ago")
        return 1
    took = float(live.get("evaluationTime") or 0)
    if took > interval:
        ctx.add(
            FAMILY,
            FAIL,
            group.name,
            f"one evaluation takes {took:.1f} s, longer than its {interval:g} s interval, so evaluations are skipped",
            "give Prometheus more CPU, lengthen evaluation_interval, or split the group",
        )
        return 1
    return 0


def _difference(group: RuleGroup, live_rules: list[dict]) -> str:
    if len(live_rules) != len(group.rules):
        return f"{len(live_rules)} rules loaded, {len(group.rules)} in the bundle"
    for index, (mine, theirs) in enumerate(zip(group.rules, live_rules, strict=True)):
        name = theirs.get("name", "")
        if name != mine.name:
            return f"rule {index + 1} is {name} in Prometheus, {mine.name} in the bundle"
        if not _same_expr(mine.expr, str(theirs.get("query", ""))):
            return f"the expression of {mine.name} (rule {index + 1}) differs"
        if mine.kind == "alert":
            if float(theirs.get("duration") or 0) != (seconds(mine.for_) if mine.for_ else 0):
                return f"the `for` of {mine.name} (rule {index + 1}) differs"
            kept = seconds(mine.keep_firing_for) if mine.keep_firing_for else 0
            if float(theirs.get("keepFiringFor") or 0) != kept:
                return f"the `keep_firing_for` of {mine.name} (rule {index + 1}) differs"
            if (theirs.get("labels") or {}) != mine.labels:
                return f"the labels of {mine.name} (rule {index + 1}) differ"
    return ""


def _same_expr(ours: str, theirs: str) -> bool:
    try:
        return canonical(ours) == canonical(theirs)
    except PromQLSyntaxError:
        return " ".join(ours.split()) == " ".join(theirs.split())


def _mark_unloaded(ctx: Context, groups: list[RuleGroup]) -> None:
    for group in groups:
        for rule in group.rules:
            ctx.fail_cause(rule.name, f"its rule group {group.name} is not loaded")


def _check_recorded_for_dashboards(ctx: Context) -> None:
    """Recording rules the dashboards read must have samples; say why when one has none."""
    recorded = ctx.view.recorded
    read = sorted(
        {
            s.name
            for where, s in all_selectors(ctx.view)
            if not where.startswith("rule ") and s.name in recorded
        }
    )
    if not read:
        return
    try:
        found = present(ctx.prom, "", read)
    except ApiError as exc:
        ctx.unchecked(FAMILY, "recording rules", "ask which recording rules have samples", exc)
        return
    rules = {r.name: r for r in ctx.view.rules if r.kind == "record"}
    empty = [name for name in read if name not in found]
    if not empty:
        ctx.add(
            FAMILY, OK, "recording rules", f"all {len(read)} recording rules the dashboards read have samples"
        )
        return
    by_cause: dict[Cause, list[str]] = {}
    for name in empty:
        cause = ctx.causes.get(name) or _trace(ctx, name, rules, set())
        ctx.causes.setdefault(name, cause)
        by_cause.setdefault(cause, []).append(name)
    for cause, names in by_cause.items():
        if cause.text.startswith("its rule group"):
            continue  # the line of its rule file or group says so, and the dashboards name the panels
        shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
        if cause.status == FAIL:
            ctx.add(
                FAMILY,
                FAIL,
                "recording rules",
                f"{len(names)} the dashboards read have no samples ({shown}): {cause.text}",
                "fix that cause (its own line says how); these rules then fill in",
                names,
            )
        else:
            ctx.add(
                FAMILY,
                WARN,
                "recording rules",
                f"{len(names)} the dashboards read have no samples yet ({shown}), though what they read exists: "
                "nothing happened in their windows (no traffic, no errors, no probe)",
                "nothing is broken; they fill in with traffic",
                names,
            )


def _trace(ctx: Context, name: str, rules: dict[str, Rule], seen: set[str]) -> Cause:
    """Why recording rule `name` is empty: the first input that is missing, else no activity."""
    if name in ctx.causes:
        return ctx.causes[name]
    rule = rules.get(name)
    if rule is None or name in seen:
        return Cause(WARN, "nothing to record yet")
    seen.add(name)
    try:
        inputs = [s.name for s in selectors(rule.expr) if s.name]
    except PromQLSyntaxError:
        inputs = []
    for input_name in inputs:
        if input_name in rules:
            cause = _trace(ctx, input_name, rules, seen)
            if cause.status == FAIL:
                return cause
        elif input_name in ctx.causes and ctx.causes[input_name].status == FAIL:
            return ctx.causes[input_name]
    return Cause(WARN, "no samples yet: nothing happened in its window (no traffic yet)")


def _age(text: object) -> float:
    """Seconds since an RFC 3339 time from the API; inf for Go's zero time (never)."""
    if not text or str(text).startswith("0001-01-01"):
        return float("inf")
    value = str(text)
    head, _, rest = value.partition(".")
    zone = ""
    if rest:
        digits = rest.rstrip("Z")
        for sign in "+-":
            if sign in digits:
                digits, zone_rest = digits.split(sign, 1)
                zone = sign + zone_rest
        value = f"{head}.{digits[:6]}{zone or 'Z'}"
    when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return max(0.0, time.time() - when.timestamp())


def _names(groups: list[RuleGroup]) -> str:
    names = [g.name for g in groups]
    return ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _count(groups: list[RuleGroup]) -> int:
    return sum(len(g.rules) for g in groups)
