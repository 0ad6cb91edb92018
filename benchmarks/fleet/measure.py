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
from .panels import PanelQuery, recorded_names_in
from .prometheus import Prometheus

# Rule evaluation ----------------------------------------------------------------------


@dataclass
class Evaluations:
    """Every evaluation of every rule group seen while polling /api/v1/rules, once each."""

    groups: dict[str, dict[str, float]] = field(default_factory=dict)  # group -> {lastEvaluation: seconds}
    rules: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # group -> rule -> [seconds]
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
            seen[stamp] = group["evaluationTime"]
            self.interval[name] = group["interval"]
            per_rule = self.rules.setdefault(name, {})
            for rule in group["rules"]:
                key = rule.get("name", "")
                per_rule.setdefault(key, []).append(rule.get("evaluationTime", 0.0))

    def summary(self) -> dict:
        groups = {}
        for name, evaluations in self.groups.items():
            durations = list(evaluations.values())
            groups[name] = {
                "evaluations": len(durations),
                "rules": len(self.rules.get(name, {})),
                "interval_s": self.interval.get(name),
                **stats(durations),
            }
        return {
            "groups": groups,
            "sum_of_medians_s": sum(g["median_s"] for g in groups.values()),
            "sum_of_p90_s": sum(g["p90_s"] for g in groups.values()),
            "slowest_rules": self.slowest_rules(),
        }

    def slowest_rules(self, top: int = 200) -> list[dict]:
        rows = []
        for group, rules in self.rules.items():
            for rule, durations in rules.items():
                rows.append({"group": group, "rule": rule, **stats(durations)})
        rows.sort(key=lambda r: r["median_s"], reverse=True)
        return rows[:top]


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


def sample(prom: Prometheus, meter: CpuMeter, started: float, last: float) -> Sample:
    own = prom.own_metrics()
    busy, ours = meter.reading()
    elapsed = max(time.time() - last, 1e-6)
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
        busy_cores=busy / elapsed,
        ours_cores=ours / elapsed,
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
    last_sample = time.time()
    meter.reading()  # CPU is counted from here
    next_sample = time.time() + 15
    while time.time() < end:
        if evaluations is not None:
            evaluations.poll(prom, since=evaluations_from)
        if time.time() >= next_sample:
            s = sample(prom, meter, started, last_sample)
            last_sample = s.t
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
    prom: Prometheus, queries: list[PanelQuery], range_s: float, step_s: float, repeats: int, log=print
) -> list[dict]:
    """query_range of every panel query over the last `range_s`, recorded and raw, `repeats`
    times each, interleaved so that drift of the machine's load hits both alike."""
    end = math.floor(time.time() / step_s) * step_s  # Grafana aligns the range to the step
    start = end - range_s
    rows = []
    for q in queries:
        recorded, raw = [], []
        try:
            for _ in range(repeats):
                recorded.append(prom.timed_range(q.expr, start, end, step_s))
                if q.uses_recording_rules:
                    raw.append(prom.timed_range(q.raw, start, end, step_s))
        except (RuntimeError, OSError) as exc:
            log(f"  {q.dashboard} / {q.panel}: FAILED {exc}")
            rows.append(
                {"dashboard": q.dashboard, "panel": q.panel, "ref": q.ref, "expr": q.expr, "error": str(exc)}
            )
            continue
        if not q.uses_recording_rules:
            raw = recorded
        row = {
            "dashboard": q.dashboard,
            "panel": q.panel,
            "ref": q.ref,
            "expr": q.expr,
            "raw": q.raw,
            "uses_recording_rules": q.uses_recording_rules,
            "recorded_s": statistics.median(t.wall_s for t in recorded),
            "raw_s": statistics.median(t.wall_s for t in raw),
            "recorded_exec_s": statistics.median(_exec(t.stats) for t in recorded),
            "raw_exec_s": statistics.median(_exec(t.stats) for t in raw),
            "recorded_samples": recorded[0].stats.get("samples", {}).get("totalQueryableSamples"),
            "raw_samples": raw[0].stats.get("samples", {}).get("totalQueryableSamples"),
            "series": recorded[0].series,
            "bytes": recorded[0].bytes,
        }
        rows.append(row)
        log(f"  {q.dashboard} / {q.panel}: recorded {row['recorded_s']:.3f}s, raw {row['raw_s']:.3f}s")
    return rows


def _exec(stats_: dict) -> float:
    return stats_.get("timings", {}).get("execTotalTime", math.nan)


def dashboard_totals(rows: list[dict]) -> dict:
    out = {}
    for row in rows:
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


def check_equivalence(prom: Prometheus, queries: list[PanelQuery], rules: dict[str, str]) -> list[dict]:
    """Recorded and raw panel queries evaluated at one rule evaluation's timestamp: the same
    series, the same values (or both NaN)."""
    out = []
    for q in queries:
        if not q.uses_recording_rules:
            continue
        names = recorded_names_in(q.expr, rules)
        stamps = prom.query(f"max(timestamp({names[0]}))")
        if not stamps:
            out.append(
                {"dashboard": q.dashboard, "panel": q.panel, "expr": q.expr, "series": 0, "matching": 0}
            )
            continue
        at = float(stamps[0]["value"][1])
        recorded = {_key(r["metric"]): float(r["value"][1]) for r in prom.query(q.expr, at=at)}
        raw = {_key(r["metric"]): float(r["value"][1]) for r in prom.query(q.raw, at=at)}
        matching = sum(1 for k, v in recorded.items() if k in raw and _same(v, raw[k]))
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
            }
        )
    return out


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
    """Which alerts are pending or firing, against the unhealthy engines' expected alerts.

    settled: the run was long enough for every `for` to elapse, so every expected alert
    must be firing; else pending counts too."""
    seen = prom.query("ALERTS")
    want = {(e["alertname"], e["severity"], e["instance"]) for e in expected} | {("Watchdog", "info", "")}

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
