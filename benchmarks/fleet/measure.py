"""What the benchmark measures on a running Prometheus: rule evaluation, dashboard cost,
head series and memory, and which alerts fire."""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from .machine import CpuMeter, loadavg
from .panels import PanelQuery, metric_names, recorded_names_in
from .prometheus import Prometheus

# Rule evaluation ----------------------------------------------------------------------


@dataclass
class Evaluation:
    at: float  # epoch seconds of the evaluation
    seconds: float
    rules: dict[str, float]


@dataclass
class Evaluations:
    """Every evaluation of every rule group seen while polling /api/v1/rules, once each."""

    groups: dict[str, dict[str, Evaluation]] = field(default_factory=dict)  # group -> lastEvaluation -> it
    interval: dict[str, float] = field(default_factory=dict)

    def poll(self, prom: Prometheus, since: float) -> None:
        for group in prom.rules():
            name = group["name"]
            stamp = group.get("lastEvaluation", "")
            if not stamp or stamp.startswith("0001") or _epoch(stamp) < since:
                continue
            seen = self.groups.setdefault(name, {})
            if stamp in seen:
                continue
            rules: dict[str, float] = {}
            for rule in group["rules"]:
                key = rule.get("name", "")
                while key in rules:  # an alert with a warning and a critical rule
                    key += "'"
                rules[key] = rule.get("evaluationTime", 0.0)
            seen[stamp] = Evaluation(_epoch(stamp), group["evaluationTime"], rules)
            self.interval[name] = group["interval"]

    def summary(self, quiet=None) -> dict:
        """Statistics over every evaluation, and over the quiet ones (`quiet(at)` true: the
        machine's other work left this benchmark the CPU at that moment)."""
        out = {"all": self._summary(lambda at: True)}
        if quiet is not None:
            out["quiet"] = self._summary(quiet)
        return out

    def _summary(self, keep) -> dict:
        groups = {}
        per_rule: dict[tuple[str, str], list[float]] = {}
        for name, evaluations in self.groups.items():
            kept = [e for e in evaluations.values() if keep(e.at)]
            groups[name] = {
                "evaluations": len(kept),
                "rules": len(kept[0].rules) if kept else 0,
                "interval_s": self.interval.get(name),
                **stats([e.seconds for e in kept]),
            }
            for e in kept:
                for rule, seconds in e.rules.items():
                    per_rule.setdefault((name, rule), []).append(seconds)
        rows = [{"group": g, "rule": r, **stats(v)} for (g, r), v in per_rule.items()]
        rows.sort(key=lambda r: r["median_s"], reverse=True)
        medians = [g["median_s"] for g in groups.values() if g["evaluations"]]
        p90s = [g["p90_s"] for g in groups.values() if g["evaluations"]]
        return {
            "groups": groups,
            "sum_of_medians_s": sum(medians),
            "sum_of_p90_s": sum(p90s),
            "slowest_rules": rows,
        }


def quiet_at(timeline: list[Sample], max_other_cores: float):
    """A predicate: at this moment, did other work use less than `max_other_cores`?"""
    windows = [(a.t, b.t, b.busy_cores - b.ours_cores) for a, b in zip(timeline, timeline[1:], strict=False)]

    def quiet(at: float) -> bool:
        return any(start <= at <= end and other < max_other_cores for start, end, other in windows)

    return quiet


def _epoch(stamp: str) -> float:
    # "2026-11-30T16:52:01.123456789Z" (or with an offset): Python parses at most microseconds.
    head, _, rest = stamp.partition(".")
    frac = re.match(r"\d*", rest).group() or "0"
    when = datetime.strptime(head.rstrip("Z")[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    return when.timestamp() + float("0." + frac)


def stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "median_s": math.nan, "p90_s": math.nan, "max_s": math.nan, "min_s": math.nan}
    ordered = sorted(values)
    return {
        "n": len(values),
        "median_s": statistics.median(ordered),
        "p90_s": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max_s": ordered[-1],
        "min_s": ordered[0],
    }


# Timeline -------------------------------------------------------------------------------


@dataclass
class Sample:
    t: float
    age_s: float
    load1: float
    rss_bytes: int
    heap_inuse_bytes: float
    head_series: float
    prometheus_cpu_s: float
    busy_cores: float  # whole machine, since the previous sample
    ours_cores: float  # Prometheus + simulator + this runner
    group_last_duration_s: dict[str, float]
    missed_iterations: float


def sample(prom: Prometheus, meter: CpuMeter, started: float) -> Sample:
    own = prom.own_metrics()
    busy, ours = meter.reading()
    durations = {
        key.split('rule_group="', 1)[1].rstrip('"}'): value
        for key, value in own.items()
        if key.startswith("prometheus_rule_group_last_duration_seconds{")
    }
    return Sample(
        t=time.time(),
        age_s=time.time() - started,
        load1=loadavg()[0],
        rss_bytes=prom.rss_bytes(),
        heap_inuse_bytes=own.get("go_memstats_heap_inuse_bytes", math.nan),
        head_series=own.get("prometheus_tsdb_head_series", math.nan),
        prometheus_cpu_s=prom.cpu_seconds(),
        busy_cores=busy,
        ours_cores=ours,
        group_last_duration_s=durations,
        missed_iterations=sum(
            v for k, v in own.items() if k.startswith("prometheus_rule_group_iterations_missed_total")
        ),
    )


def watch(
    prom: Prometheus,
    meter: CpuMeter,
    seconds: float,
    timeline: list[Sample],
    evaluations: Evaluations | None,
    evaluations_from: float,
    started: float,
    log=print,
) -> None:
    """Sample every 15 s and poll every rule evaluation (every 5 s) for `seconds`."""
    end = time.time() + seconds
    meter.reading()  # CPU is counted from here
    next_sample = time.time() + 15
    while time.time() < end:
        if evaluations is not None:
            evaluations.poll(prom, since=evaluations_from)
        if time.time() >= next_sample:
            s = sample(prom, meter, started)
            timeline.append(s)
            next_sample += 15
            if len(timeline) % 8 == 1:
                groups = ", ".join(
                    f"{k.split(';')[-1]} {v:.3f}s" for k, v in sorted(s.group_last_duration_s.items())
                )
                log(
                    f"  t+{s.age_s / 60:5.1f} min  load {s.load1:.2f}  cores busy {s.busy_cores:.2f} (ours {s.ours_cores:.2f})"
                    f"  rss {s.rss_bytes / 2**20:.0f} MiB  head {s.head_series:.0f}  {groups}"
                )
        time.sleep(max(0.0, min(5.0, end - time.time())))


# Dashboards -----------------------------------------------------------------------------


def time_panels(
    prom: Prometheus,
    queries: list[PanelQuery],
    range_s: float,
    step_s: float,
    repeats: int,
    meter: CpuMeter,
    quiet_cores: float,
    max_wait_s: float,
    budget_s: float,
    log=print,
    raw: bool = True,
    until: float | None = None,
) -> list[dict]:
    """query_range of every panel query over the `range_s` before `until` (now), recorded and raw (`raw`
    False: recorded only), `repeats` times back to back; each repeat first waits (`max_wait_s`, `budget_s`
    in all) for quiet CPU (< `quiet_cores`). Medians over the quiet repeats, else over all, flagged."""
    budget_ends = time.monotonic() + budget_s
    end = math.floor((until or time.time()) / step_s) * step_s  # Grafana aligns the range to the step
    start = end - range_s
    rows = []
    for q in queries:
        runs = []  # (recorded timing, raw timing, other cores during the pair)
        try:
            for _ in range(repeats):
                left = budget_ends - time.monotonic()
                if left > 0:
                    meter.wait_quiet(quiet_cores, min(max_wait_s, left))
                meter.reading()
                recorded = _timed(prom, q.expr, q.instant, start, end, step_s)
                unrecorded = recorded
                if raw and q.uses_recording_rules:
                    unrecorded = _timed(prom, q.raw, q.instant, start, end, step_s)
                runs.append((recorded, unrecorded, meter.others()))
        except (RuntimeError, OSError) as exc:
            log(f"  {q.dashboard} / {q.panel}: FAILED {exc}")
            rows.append(
                {
                    "source": q.source,
                    "dashboard": q.dashboard,
                    "panel": q.panel,
                    "ref": q.ref,
                    "expr": q.expr,
                    "error": str(exc),
                }
            )
            continue
        quiet = [r for r in runs if r[2] < quiet_cores]
        kept = quiet or runs
        row = {
            "source": q.source,
            "dashboard": q.dashboard,
            "panel": q.panel,
            "ref": q.ref,
            "instant": q.instant,
            "expr": q.expr,
            "raw": q.raw,
            "uses_recording_rules": q.uses_recording_rules,
            "quiet_repeats": len(quiet),
            "other_cores": [r[2] for r in runs],
            "recorded_s": statistics.median(r[0].wall_s for r in kept),
            "raw_s": statistics.median(r[1].wall_s for r in kept) if raw else math.nan,
            "recorded_exec_s": statistics.median(_exec(r[0].stats) for r in kept),
            "raw_exec_s": statistics.median(_exec(r[1].stats) for r in kept) if raw else math.nan,
            "recorded_samples": runs[0][0].stats.get("samples", {}).get("totalQueryableSamples"),
            "raw_samples": runs[0][1].stats.get("samples", {}).get("totalQueryableSamples") if raw else None,
            "series": runs[0][0].series,
            "bytes": runs[0][0].bytes,
        }
        rows.append(row)
        if q.source == "bundle":
            timing = f"recorded {row['recorded_s']:.3f}s, raw {row['raw_s']:.3f}s"
        else:
            timing = f"{row['recorded_s']:.3f}s"
        kind = " (instant)" if q.instant else ""
        log(f"  {q.source}: {q.dashboard} / {q.panel}{kind}: {timing} ({len(quiet)}/{len(runs)} quiet)")
    return rows


def _timed(prom: Prometheus, expr: str, instant: bool, start: float, end: float, step_s: float):
    # A table's instant query is asked once, at the end of the range, as Grafana does.
    return prom.timed_instant(expr, end) if instant else prom.timed_range(expr, start, end, step_s)


def interleave(first: list, second: list) -> list:
    """One of each in turn, the rest of the longer list spread between: both lists meet the same
    moments of a machine whose load drifts."""
    if len(first) < len(second):
        first, second = second, first
    if not second:
        return list(first)
    out, every = [], len(first) / len(second)
    taken = 0
    for i, item in enumerate(first):
        out.append(item)
        while taken < len(second) and (taken + 1) * every <= i + 1:
            out.append(second[taken])
            taken += 1
    return out + second[taken:]


def unexposed(queries: list[PanelQuery], names: set[str]) -> list[dict]:
    """The queries that read a metric the server does not hold (`names`: every metric name it
    has), each with the names missing: timing them would time empty answers."""
    out = []
    for q in queries:
        missing = sorted(metric_names(q.expr) - names)
        if missing:
            out.append(
                {
                    "source": q.source,
                    "dashboard": q.dashboard,
                    "panel": q.panel,
                    "ref": q.ref,
                    "expr": q.expr,
                    "missing": missing,
                }
            )
    return out


def comparison(panels: list[dict], skipped: list[dict]) -> dict:
    """Per dashboard and per side ("bundle", "vllm"): the query cost (wall time of each panel query
    as written) over the queries whose metrics all exist, its mean and median, the full refresh
    (their sum), the queries left out; and the verdict: the bundle's mean no higher than vLLM's."""
    left_out = {(s["source"], s["dashboard"], s["panel"], s["ref"], s["expr"]) for s in skipped}
    sides: dict[str, dict] = {}
    for source in ("bundle", "vllm"):
        rows = [p for p in panels if p.get("source", "bundle") == source and "error" not in p]
        kept = [p for p in rows if (source, p["dashboard"], p["panel"], p["ref"], p["expr"]) not in left_out]
        dashboards = {}
        for name in dict.fromkeys(p["dashboard"] for p in rows):
            costs = [p["recorded_s"] for p in kept if p["dashboard"] == name]
            dashboards[name] = {
                **_costs(costs),
                "skipped": sum(1 for s in skipped if s["source"] == source and s["dashboard"] == name),
                "errors": sum(
                    1
                    for p in panels
                    if p.get("source", "bundle") == source and p["dashboard"] == name and "error" in p
                ),
            }
        skipped_here = [s for s in skipped if s["source"] == source]
        sides[source] = {
            "dashboards": dashboards,
            "all": {**_costs([p["recorded_s"] for p in kept]), "skipped": len(skipped_here)},
            "missing_metrics": sorted({n for s in skipped_here for n in s["missing"]}),
        }
    ours, theirs = sides["bundle"]["all"]["mean_s"], sides["vllm"]["all"]["mean_s"]
    return {
        **sides,
        "verdict": {
            "bundle_mean_s": ours,
            "vllm_mean_s": theirs,
            "met": (not math.isnan(ours)) and (not math.isnan(theirs)) and ours <= theirs,
        },
    }


def _costs(values: list[float]) -> dict:
    return {
        "queries": len(values),
        "mean_s": statistics.mean(values) if values else math.nan,
        "median_s": statistics.median(values) if values else math.nan,
        "refresh_s": sum(values),
    }


def _exec(stats_: dict) -> float:
    return stats_.get("timings", {}).get("execTotalTime", math.nan)


def dashboard_totals(rows: list[dict]) -> dict:
    out = {}
    for row in rows:
        if row.get("source", "bundle") != "bundle":
            continue
        d = out.setdefault(
            row["dashboard"],
            {
                "queries": 0,
                "recorded_s": 0.0,
                "raw_s": 0.0,
                "recorded_exec_s": 0.0,
                "raw_exec_s": 0.0,
                "errors": [],
            },
        )
        if "error" in row:
            d["errors"].append(row["panel"])
            continue
        d["queries"] += 1
        for key in ("recorded_s", "raw_s", "recorded_exec_s", "raw_exec_s"):
            d[key] += row[key]
    for d in out.values():
        d["ratio_wall"] = d["raw_s"] / d["recorded_s"] if d["recorded_s"] else math.nan
        d["ratio_exec"] = d["raw_exec_s"] / d["recorded_exec_s"] if d["recorded_exec_s"] else math.nan
    return out


def check_equivalence(
    prom: Prometheus, queries: list[PanelQuery], rules: dict[str, str], evaluation: int = 0
) -> list[dict]:
    """Recorded and raw panel queries at one rule evaluation's timestamp (the latest, or the
    `evaluation`-th before it): the same series and values (or both NaN); windowed queries the same
    series, with the largest difference (tests/benchmarks checks those on backfilled history)."""
    out = []
    for q in queries:
        if not q.uses_recording_rules:
            continue
        # The evaluations of the first record read that has series: a query may read several
        # with `or`, and one of them may have no series on this fleet.
        evaluations = (_evaluations(prom, name) for name in recorded_names_in(q.expr, rules))
        stamps = next((found for found in evaluations if found), [])
        if len(stamps) <= evaluation:
            out.append(
                {
                    "dashboard": q.dashboard,
                    "panel": q.panel,
                    "expr": q.expr,
                    "series": 0,
                    "raw_series": 0,
                    "matching": 0,
                }
            )
            continue
        at = stamps[evaluation]
        recorded = {_key(r["metric"]): float(r["value"][1]) for r in prom.query(unranked(q.expr), at=at)}
        raw = {_key(r["metric"]): float(r["value"][1]) for r in prom.query(unranked(q.raw), at=at)}
        same = (lambda a, b: True) if q.windowed else _same  # windowed: the same series suffice
        matching = sum(1 for k, v in recorded.items() if k in raw and same(v, raw[k]))
        worst = max(
            (abs(v - raw[k]) for k, v in recorded.items() if k in raw and not _same(v, raw[k])), default=0.0
        )
        out.append(
            {
                "dashboard": q.dashboard,
                "panel": q.panel,
                "expr": q.expr,
                "series": len(recorded),
                "raw_series": len(raw),
                "matching": matching,
                "largest_difference": worst,
                "windowed": q.windowed,
            }
        )
    return out


_RANKED = re.compile(r"(?:topk|bottomk)\(\s*\d+\s*,(.*)\)", re.S)


def unranked(expr: str) -> str:
    """The expression under an outer topk or bottomk: among equal values they pick series in
    evaluation order, which differs between a record and its inlined expression."""
    found = _RANKED.fullmatch(expr.strip())
    if not found:
        return expr
    depth = 0
    for char in found.group(1):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:  # the outer call closes before the end: `topk(...) / x`
            return expr
    return found.group(1) if depth == 0 else expr


def _evaluations(prom: Prometheus, name: str) -> list[float]:
    """The timestamps of a record's samples in the last minute, newest first."""
    return sorted({float(t) for r in prom.query(f"{name}[1m]") for t, _ in r["values"]}, reverse=True)


def _key(metric: dict) -> str:
    return json.dumps({k: v for k, v in metric.items() if k != "__name__"}, sort_keys=True)


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# Head series ----------------------------------------------------------------------------

RECORDED = '{__name__=~"[^:]+:[^:]+:.+"}'


def head_breakdown(prom: Prometheus) -> dict:
    """Live series (a sample within the lookback) by kind, and the head's own count."""
    total = prom.scalar('count({__name__=~".+"})')
    recorded = prom.query(f"count by (__name__) ({RECORDED})")
    by_name = {r["metric"]["__name__"]: int(float(r["value"][1])) for r in recorded}
    alerts = prom.scalar('count({__name__=~"ALERTS|ALERTS_FOR_STATE"})')
    # Recorded series and ALERTS carry job="vllm" too: scraped is what is neither.
    scraped = prom.scalar('count({__name__=~".+", __name__!~"[^:]+:[^:]+:.+|ALERTS|ALERTS_FOR_STATE"})')
    own = prom.own_metrics()
    return {
        "live_series": total,
        "scraped_series": scraped,
        "recorded_series": sum(by_name.values()),
        "alert_series": alerts,
        "recorded_by_name": dict(sorted(by_name.items(), key=lambda kv: -kv[1])),
        "head_series": own.get("prometheus_tsdb_head_series"),
        "recorded_over_scraped": sum(by_name.values()) / scraped if scraped else math.nan,
    }


# Alerts ---------------------------------------------------------------------------------


def check_alerts(prom: Prometheus, expected: list[dict], settled: bool) -> dict:
    """Which alerts are pending or firing, against the unhealthy engines' expected alerts. `settled`:
    the run was long enough for every `for` to elapse, so every expected alert must be firing; else
    pending counts too."""
    seen = prom.query("ALERTS")
    want = {(e["alertname"], e["severity"], e["instance"]) for e in expected} | {
        ("WatchdogVllmObs", "info", "")
    }

    def key(m: dict) -> tuple[str, str, str]:
        return (m["alertname"], m.get("severity", ""), m.get("instance", ""))

    firing = {key(r["metric"]) for r in seen if r["metric"]["alertstate"] == "firing"}
    pending = {key(r["metric"]) for r in seen if r["metric"]["alertstate"] == "pending"}
    raised = firing if settled else firing | pending
    return {
        "settled": settled,
        "expected": sorted(want),
        "firing": sorted(firing),
        "pending": sorted(pending),
        "missing": sorted(want - raised),
        "unexpected": sorted((firing | pending) - want),
        "ok": raised == want and not ((firing | pending) - want),
        "all": [r["metric"] for r in seen],
    }


def as_dicts(samples: list[Sample]) -> list[dict]:
    return [asdict(s) for s in samples]
