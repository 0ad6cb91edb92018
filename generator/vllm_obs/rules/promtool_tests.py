"""promtool unit tests for every alert, generated from the same config as the rules.

Each alert gets a case where it fires (asserting its full labels and annotations), a
case where it must stay silent, and a check of the `for` boundary: nothing one
evaluation before the condition has held for `for`, the alert exactly at it. The fire
and silent inputs sit just above and just below the configured thresholds, so a user
who changes a threshold gets tests that still pin it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..config import BundleConfig
from ..promql import bucket_text, equality_labels, number, seconds
from ..signals import Resolution, Signal
from .alerts import BURN_TIERS, EXPORTER_EVENTS
from .files import alert_annotations, alert_labels
from .gotemplate import render
from .model import Alert, Group
from .names import scope_of

MODEL = "llama-3-8b"
REPLICA = "vllm-0:8000"
NEIGHBOUR = "vllm-1:8000"
# A server behind the neighbour's target (differs from NEIGHBOUR only where servers share targets).
ELSEWHERE = "elsewhere"
EXPORTER = "vllm-log-exporter-0:9400"
PROBE = "vllm-probe-0:9401"
SERVER_STATES = ("unknown", "starting", "loading", "ready", "stopping", "stopped", "failed_start", "dead")
PROBE_REASONS = ("timeout", "refused", "http_4xx", "http_5xx", "bad_body", "error")


@dataclass
class Expect:
    rule: Alert
    labels: dict[str, str]  # the labels of the query result
    value: float


@dataclass
class Check:
    minute: int
    alertname: str
    expected: list[Expect]


@dataclass
class Case:
    name: str
    series: dict[str, str] = field(default_factory=dict)  # series text -> values
    checks: list[Check] = field(default_factory=list)

    def add(self, series: str, values: str) -> None:
        self.series[series] = values

    @property
    def minutes(self) -> int:
        return max(c.minute for c in self.checks) + 1


def minutes(duration: str | None) -> int:
    return int(seconds(duration) // 60) if duration else 0


def series_text(name: str, labels: dict[str, str]) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


class Inputs:
    """Builds input series with the labels a real scrape of this source would carry."""

    def __init__(self, res: Resolution, cfg: BundleConfig) -> None:
        self.res = res
        self.cfg = cfg
        self.base = {"job": cfg.prometheus.vllm_job, **equality_labels(cfg.prometheus.extra_selector)}
        self.scope = scope_of(cfg, res)

    def at_target(self, who: str = REPLICA) -> dict[str, str]:
        """Labels of a scrape target (REPLICA or NEIGHBOUR).

        With multi-cluster on, the neighbour is the replica's namesake in another cluster, so
        every case that checks one replica against its neighbour also proves that an
        aggregation or a join never merges two clusters' servers of the same name.
        """
        sc = self.scope
        who = NEIGHBOUR if who == ELSEWHERE else who
        if sc.cluster:
            return {sc.cluster: "east" if who == REPLICA else "west", sc.replica: REPLICA}
        return {sc.replica: who}

    def at(self, who: str = REPLICA) -> dict[str, str]:
        """Labels of a server. Where servers share a target (Ray: one node's metrics port for
        all its replicas), the neighbour is another server behind the same target, so the
        cases prove the identity label is never aggregated away."""
        sc = self.scope
        if not sc.identity:
            return self.at_target(who)
        out = self.at_target(ELSEWHERE if who == ELSEWHERE else REPLICA)
        if sc.cluster:
            out[sc.cluster] = self.at_target(who)[sc.cluster]
        for label in sc.identity:
            out[label] = "replica-0" if who == REPLICA else "replica-1"
        return out

    def labels(
        self, instance: str = REPLICA, signal: Signal | None = None, engine: str = "0", **extra: str
    ) -> dict:
        out = {**self.base, **self.at(instance), "model_name": MODEL, **extra}
        if signal is not None and signal.has_label("engine"):
            out["engine"] = engine
        return out

    def fleet_result(self) -> dict[str, str]:
        """Labels of an alert aggregated by job and model_name (and the replica's cluster)."""
        cluster = {self.scope.cluster: self.at(REPLICA)[self.scope.cluster]} if self.scope.cluster else {}
        return {**cluster, "job": self.cfg.prometheus.vllm_job, "model_name": MODEL}

    def result(self, instance: str = REPLICA) -> dict[str, str]:
        """Labels of an alert aggregated by job, instance and model_name."""
        return {"job": self.cfg.prometheus.vllm_job, **self.at(instance), "model_name": MODEL}

    def probe_labels(self, who: str = REPLICA, model: bool = True) -> dict[str, str]:
        """A canary probe's series about one server, as the probe scrape job relabels them."""
        out = {"job": self.cfg.prometheus.probe_job, "probe_address": PROBE, **self.at_target(who)}
        if model:
            out["model_name"] = MODEL
        return out

    def probe(
        self, case: Case, span: int, who: str = REPLICA, per_min: float = 4, failing: str | None = None
    ) -> None:
        """`per_min` probes a minute; all answered, or all failing for the reason `failing`."""
        labels = self.probe_labels(who)
        case.add(series_text("vllm_probe_success", labels), f"{0 if failing else 1}+0x{span}")
        case.add(series_text("vllm_probe_requests_total", labels), f"0+{number(per_min)}x{span}")
        for reason in PROBE_REASONS:
            rate = per_min if reason == failing else 0
            case.add(
                series_text("vllm_probe_failures_total", {**labels, "reason": reason}),
                f"0+{number(rate)}x{span}",
            )

    def probe_health(self, case: Case, span: int, up: int, who: str = REPLICA) -> None:
        case.add(series_text("vllm_probe_health_up", self.probe_labels(who, model=False)), f"{up}+0x{span}")

    def exporter_labels(self, who: str = REPLICA) -> dict[str, str]:
        """A log exporter's series, as its scrape job relabels them to the server's instance."""
        out = {
            "job": self.cfg.prometheus.log_exporter_job,
            "exporter_address": EXPORTER,
            **self.at_target(who),
        }
        return out

    def server_state(self, case: Case, span: int, since: str, states: list[str], who: str = REPLICA) -> None:
        """The exporter's state gauge: states[0] at minute 0, states[i] from minute i on (the last holds).

        `since` is the values string of the time of the last transition.
        """
        labels = self.exporter_labels(who)
        for state in SERVER_STATES:
            values = " ".join("1" if s == state else "0" for s in states)
            case.add(
                series_text("vllm_log_server_state", {**labels, "state": state}),
                f"{values} {values[-1]}+0x{span}",
            )
        case.add(
            series_text("vllm_log_server_state_since_timestamp_seconds", labels),
            f"{since} {since.split()[-1]}+0x{span}",
        )

    # -- series shapes ---------------------------------------------------------

    def counter(
        self, case: Case, signal: Signal, per_min: float, span: int, name: str | None = None, **extra: str
    ) -> None:
        case.add(
            series_text(name or signal.name, self.labels(signal=signal, **extra)),
            f"0+{number(per_min)}x{span}",
        )

    def gauge(
        self, case: Case, signal: Signal, value: float, span: int, instance: str = REPLICA, **extra: str
    ) -> None:
        case.add(
            series_text(signal.name, self.labels(instance, signal, **extra)), f"{number(value)}+0x{span}"
        )

    def ramp(self, case: Case, signal: Signal, start: float, step: float, span: int, **extra: str) -> None:
        sign = "+" if step >= 0 else "-"
        case.add(
            series_text(signal.name, self.labels(signal=signal, **extra)),
            f"{number(start)}{sign}{number(abs(step))}x{span}",
        )

    def histogram(
        self, case: Case, signal: Signal, hot: int, per_min: float, span: int, instance: str = REPLICA
    ) -> None:
        """All observations in bucket number `hot` (0-based over the finite bounds)."""
        labels = self.labels(instance, signal)
        bounds = signal.buckets
        for i, bound in enumerate(bounds):
            rate = per_min if i >= hot else 0
            case.add(
                series_text(signal.bucket, {**labels, "le": bucket_text(bound)}), f"0+{number(rate)}x{span}"
            )
        case.add(series_text(signal.bucket, {**labels, "le": "+Inf"}), f"0+{number(per_min)}x{span}")
        case.add(series_text(signal.count, labels), f"0+{number(per_min)}x{span}")
        case.add(series_text(signal.sum, labels), f"0+{number(per_min * bounds[hot])}x{span}")

    def traffic(
        self, case: Case, per_min: float, span: int, instance: str = REPLICA, **reasons: float
    ) -> None:
        """Finished requests, through whichever series the requests_finished rule reads."""
        res = self.res
        if "request_success" in res.signals:
            sig = res["request_success"]
            shares = reasons or {"stop": per_min}
            for reason, rate in shares.items():
                case.add(
                    series_text(sig.name, self.labels(instance, sig, finished_reason=reason)),
                    f"0+{number(rate)}x{span}",
                )
        else:
            sig = (
                res["e2e_request_latency"]
                if "e2e_request_latency" in res.signals
                else res["time_to_first_token"]
            )
            case.add(series_text(sig.count, self.labels(instance, sig)), f"0+{number(per_min)}x{span}")


def p95_in_bucket(bounds: tuple[float, ...], hot: int) -> float:
    lower = bounds[hot - 1] if hot > 0 else 0.0
    return lower + (bounds[hot] - lower) * 0.95


def fire_bucket(bounds: tuple[float, ...], threshold: float) -> int | None:
    """The lowest bucket whose p95 (all observations in it) exceeds the threshold."""
    return next((i for i in range(len(bounds)) if p95_in_bucket(bounds, i) > threshold), None)


def silent_bucket(bounds: tuple[float, ...], threshold: float) -> int | None:
    """The highest bucket whose p95 stays at or below the threshold."""
    found = [i for i in range(len(bounds)) if p95_in_bucket(bounds, i) <= threshold]
    return found[-1] if found else None


def boundary(alertname: str, start: int, for_: str | None, expected: list[Expect]) -> list[Check]:
    """Silent one evaluation before the condition has held for `for`; firing at it."""
    fire_at = start + minutes(for_)
    return [Check(fire_at - 1, alertname, []), Check(fire_at, alertname, expected)]


# -- scenarios, one builder per alert name ----------------------------------------------

Builder = Callable[[list[Alert], Inputs], list[Case]]


def _latency(key: str) -> Builder:
    def build(rules: list[Alert], io: Inputs) -> list[Case]:
        sig = io.res[key]
        warn, crit = sorted(rules, key=lambda r: r.severity != "warning")
        thresholds = {r.severity: r.threshold for r in rules}
        span = minutes(warn.for_) + 10
        cases = []
        for severity in ("warning", "critical"):
            hot = fire_bucket(sig.buckets, thresholds[severity])
            if hot is None:
                continue
            value = p95_in_bucket(sig.buckets, hot)
            firing = [r for r in rules if value > thresholds[r.severity]]
            case = Case(
                f"{warn.name} {severity}: p95 {value:g}s > {thresholds[severity]:g}s fires after {warn.for_}"
            )
            io.histogram(case, sig, hot, 60, span)
            io.histogram(case, sig, 0, 60, span, instance=NEIGHBOUR)
            io.traffic(case, 60, span)
            io.traffic(case, 60, span, instance=NEIGHBOUR)
            case.checks = boundary(warn.name, 1, warn.for_, [Expect(r, io.result(), value) for r in firing])
            cases.append(case)
        hot = silent_bucket(sig.buckets, thresholds["warning"])
        if hot is not None:
            value = p95_in_bucket(sig.buckets, hot)
            case = Case(f"{warn.name} stays silent at p95 {value:g}s <= {thresholds['warning']:g}s")
            io.histogram(case, sig, hot, 60, span)
            io.traffic(case, 60, span)
            case.checks = [Check(span - 1, warn.name, [])]
            cases.append(case)
        if io.cfg.prometheus.probes:
            # The canary probe's own requests are slow here, and numerous enough to pass the
            # traffic floor; they are not served traffic, so the replica stays unjudged.
            probe_only = Case(f"{warn.name} stays silent when the only traffic is the canary probe")
            hot = fire_bucket(sig.buckets, thresholds["warning"])
            if hot is not None:
                per_min = 4.0
                io.histogram(probe_only, sig, hot, per_min, span)
                io.traffic(probe_only, per_min, span)
                io.probe(probe_only, span, per_min=per_min)
                probe_only.checks = [Check(span - 1, warn.name, [])]
                cases.append(probe_only)
        # Too little traffic to judge: one slow request on an idle replica stays silent.
        idle = Case(f"{warn.name} stays silent below the traffic floor")
        hot = fire_bucket(sig.buckets, thresholds["critical"]) or fire_bucket(
            sig.buckets, thresholds["warning"]
        )
        if hot is not None:
            rate = float(io.cfg.alerts.min_request_rate) * 60 / 2
            io.histogram(idle, sig, hot, rate, span)
            io.traffic(idle, rate, span)
            idle.checks = [Check(span - 1, warn.name, [])]
            cases.append(idle)
        return cases

    return build


def _queue(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    threshold = io.cfg.alerts.queue_waiting_threshold
    sig = io.res["requests_waiting"]
    span = minutes(rule.for_) + 5
    fire = Case(f"VllmQueueDepthHigh fires after {rule.for_} with {threshold + 1:g} waiting")
    # Two engines (data-parallel ranks) of one replica: their queues add up.
    if sig.has_label("engine"):
        io.gauge(fire, sig, (threshold + 1) / 2, span, engine="0")
        io.gauge(fire, sig, (threshold + 1) / 2, span, engine="1")
    else:
        io.gauge(fire, sig, threshold + 1, span)
    io.gauge(fire, sig, 0, span, instance=NEIGHBOUR)
    fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, io.result(), threshold + 1)])
    silent = Case(f"VllmQueueDepthHigh stays silent at exactly {threshold:g} waiting")
    io.gauge(silent, sig, threshold, span)
    silent.checks = [Check(span - 1, rule.name, [])]
    return [fire, silent]


def _throttled(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    a = io.cfg.alerts
    span = minutes(rule.for_) + 15
    waiting, running, kv = io.res["requests_waiting"], io.res["requests_running"], io.res["kv_cache_usage"]
    low, high = a.throttled_kv_usage_below * 0.5, min(1.0, a.throttled_kv_usage_below + 0.1)
    fire = Case(f"VllmSchedulerThrottled fires when the queue grows for {rule.for_} while KV usage is low")
    io.ramp(fire, waiting, 1, 1, span)
    io.gauge(fire, running, 4, span)
    io.gauge(fire, kv, low, span)
    start, fire_at = 1, 1 + minutes(rule.for_)
    fire.checks = boundary(rule.name, start, rule.for_, [Expect(rule, io.result(), 1 + fire_at)])
    memory = Case("VllmSchedulerThrottled stays silent when the KV cache, not the scheduler, is the limit")
    io.ramp(memory, waiting, 1, 1, span)
    io.gauge(memory, running, 4, span)
    io.gauge(memory, kv, high, span)
    memory.checks = [Check(span - 1, rule.name, [])]
    flat = Case("VllmSchedulerThrottled stays silent while the queue holds steady")
    io.gauge(flat, waiting, 5, span)
    io.gauge(flat, running, 4, span)
    io.gauge(flat, kv, low, span)
    flat.checks = [Check(span - 1, rule.name, [])]
    return [fire, memory, flat]


def _kv_pressure(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    threshold = io.cfg.alerts.kv_usage_threshold
    sig = io.res["kv_cache_usage"]
    span = minutes(rule.for_) + 5
    hot = round(threshold + (1 - threshold) / 2, 6)
    fire = Case(f"VllmKVCachePressure fires after {rule.for_} at {hot:g}, for the engine that fills")
    io.gauge(fire, sig, hot, span, engine="0")
    if sig.has_label("engine"):
        # Max, not sum or average: the second engine's 0.1 must not hide the first.
        io.gauge(fire, sig, 0.1, span, engine="1")
    io.gauge(fire, sig, 0.1, span, instance=NEIGHBOUR)
    # Per engine where the source has engines: the alert names the one that fills.
    labels = {**io.result(), "engine": "0"} if sig.has_label("engine") else io.result()
    fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, labels, hot)])
    cool = threshold  # exactly at the threshold: `>` must not fire
    silent = Case(f"VllmKVCachePressure stays silent at exactly {cool:g}")
    io.gauge(silent, sig, cool, span, engine="0")
    if sig.has_label("engine"):
        io.gauge(silent, sig, cool, span, engine="1")
    silent.checks = [Check(span - 1, rule.name, [])]
    return [fire, silent]


def _kv_filling(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    a = io.cfg.alerts
    sig = io.res["kv_cache_usage"]
    horizon = seconds(a.kv_predict_horizon) / 60
    # Rise so that the prediction crosses 1 as soon as usage passes the floor.
    step = round(max(0.005, (1 - a.kv_predict_floor) / horizon * 1.25), 4)
    # Start half a step off the floor so no sample lands on it exactly (float noise).
    start = round(max(0.0, a.kv_predict_floor - step * (minutes(a.kv_predict_window) + 2.5)), 4)
    crossing = next(m for m in range(1000) if start + step * m > a.kv_predict_floor + 1e-9)
    span = crossing + minutes(rule.for_) + 3
    fire = Case(f"VllmKVCacheFillingUp fires when usage above {a.kv_predict_floor:g} rises toward full")
    io.ramp(fire, sig, start, step, span)
    fire_at = crossing + minutes(rule.for_)
    value = start + step * fire_at
    fire.checks = boundary(rule.name, crossing, rule.for_, [Expect(rule, io.result(), value)])
    steady = Case("VllmKVCacheFillingUp stays silent while high usage holds steady")
    io.gauge(steady, sig, round((a.kv_predict_floor + 1) / 2, 6), span)
    steady.checks = [Check(span - 1, rule.name, [])]
    return [fire, steady]


def _preemptions(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    limit = io.cfg.alerts.preemptions_per_request
    sig = io.res["preemptions"]
    span = minutes(rule.for_) + 5
    cases = []
    for label, factor in (("fires", 1.1), ("stays silent", 0.9)):
        ratio = limit * factor
        case = Case(f"VllmPreemptions {label} at {ratio:g} preemptions per request")
        io.traffic(case, 1000, span)
        io.counter(case, sig, round(1000 * ratio, 6), span)
        if factor > 1:
            case.checks = boundary(
                rule.name, 1, rule.for_, [Expect(rule, io.result(), round(1000 * ratio, 6) / 1000)]
            )
        else:
            case.checks = [Check(span - 1, rule.name, [])]
        cases.append(case)
    return cases


def _errors(rules: list[Alert], io: Inputs) -> list[Case]:
    by_source: dict[str, list[Alert]] = {}
    for r in rules:
        by_source.setdefault(r.labels["source"], []).append(r)
    a = io.cfg.alerts
    span = minutes(a.errors_for) + 5
    name = rules[0].name
    cases = []
    for source, tier in by_source.items():
        limits = {"warning": a.error_ratio_warning, "critical": a.error_ratio_critical}
        scenarios = [(f"{source} errors just above the warning ratio", limits["warning"] * 1.1)]
        scenarios.append(
            (f"{source} errors just above the critical ratio", min(1.0, limits["critical"] * 1.1))
        )
        scenarios.append((f"{source} errors just below the warning ratio", limits["warning"] * 0.9))
        for title, ratio in scenarios:
            failed = round(1000 * ratio, 6)
            case = Case(f"{name}: {title} ({ratio:g})")
            firing = [r for r in tier if ratio > limits[r.severity]]
            if source == "engine":
                io.traffic(case, 1000, span, stop=1000 - failed, error=failed)
                labels = io.result()
            else:
                http = io.res["http_requests"]
                base = {**io.base, **io.at_target(REPLICA), "handler": "/v1/completions", "method": "POST"}
                case.add(
                    series_text(http.name, {**base, "status": "2xx"}), f"0+{number(1000 - failed)}x{span}"
                )
                case.add(series_text(http.name, {**base, "status": "5xx"}), f"0+{number(failed)}x{span}")
                labels = {"job": io.cfg.prometheus.vllm_job, **io.at_target(REPLICA)}
            value = failed / 1000
            if firing:
                case.checks = boundary(name, 1, a.errors_for, [Expect(r, labels, value) for r in firing])
            else:
                case.checks = [Check(span - 1, name, [])]
            cases.append(case)
    return cases


def _stalled(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    a = io.cfg.alerts
    waiting, running, tokens = (
        io.res["requests_waiting"],
        io.res["requests_running"],
        io.res["generation_tokens"],
    )
    span = minutes(a.stall_window) + minutes(rule.for_) + 5
    stuck = Case(f"VllmEngineStalled fires when requests wait and no token comes out for {a.stall_window}")
    io.gauge(stuck, waiting, 3, span)
    io.gauge(stuck, running, 2, span)
    stuck.add(series_text(tokens.name, io.labels(signal=tokens)), f"500+0x{span}")
    # increase() needs two samples, so the condition starts at the second minute.
    stuck.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, io.result(), 5)])
    busy = Case("VllmEngineStalled stays silent while tokens keep coming")
    io.gauge(busy, waiting, 3, span)
    io.gauge(busy, running, 2, span)
    io.counter(busy, tokens, 600, span)
    busy.checks = [Check(span - 1, rule.name, [])]
    idle = Case("VllmEngineStalled stays silent on an idle server")
    io.gauge(idle, waiting, 0, span)
    io.gauge(idle, running, 0, span)
    idle.add(series_text(tokens.name, io.labels(signal=tokens)), f"500+0x{span}")
    idle.checks = [Check(span - 1, rule.name, [])]
    return [stuck, busy, idle]


def _target_down(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    span = minutes(rule.for_) + 5
    down = Case(f"VllmTargetDown fires after {rule.for_} of failed scrapes, for that instance only")
    down.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), f"0+0x{span}")
    down.add(series_text("up", {**io.base, **io.at_target(NEIGHBOUR)}), f"1+0x{span}")
    labels = {**io.base, **io.at_target(REPLICA)}
    down.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, labels, 0)])
    up = Case("VllmTargetDown stays silent while scrapes succeed")
    up.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), f"1+0x{span}")
    up.checks = [Check(span - 1, rule.name, [])]
    cases = [down, up]
    if io.cfg.prometheus.log_exporters:
        cases += _target_down_lifecycle(rule, io, labels)
    return cases


def _target_down_lifecycle(rule: Alert, io: Inputs, labels: dict[str, str]) -> list[Case]:
    """A server loading its model, or stopped on purpose, does not page; past the grace it does."""
    a = io.cfg.alerts
    span = minutes(rule.for_) + 5
    starting = Case("VllmTargetDown stays silent while the log shows the server starting")
    starting.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), f"0+0x{span}")
    io.server_state(starting, span, "0 60", ["unknown", "loading"])
    starting.checks = [Check(span - 1, rule.name, [])]
    grace = minutes(a.planned_stop_grace)
    long = grace + minutes(rule.for_) + 3
    stopped = Case(f"VllmTargetDown stays silent for {a.planned_stop_grace} after a planned stop, then fires")
    stopped.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), f"1 0+0x{long}")
    # Stopped at t=60 s: quiet while time() - 60 < grace, so the condition returns at 1 + grace.
    io.server_state(stopped, long, "0 60", ["ready", "stopped"])
    stopped.checks = [Check(grace, rule.name, [])] + boundary(
        rule.name, 1 + grace, rule.for_, [Expect(rule, labels, 0)]
    )
    return [starting, stopped]


def _absent(rules: list[Alert], io: Inputs) -> list[Case]:
    cases = []
    running = io.res.signals.get("requests_running")
    for rule in rules:
        span = minutes(rule.for_) + 5
        if rule.labels["scope"] == "job":
            gone = Case(f"VllmMetricsAbsent (job) fires when no target of the job is scraped for {rule.for_}")
            gone.add(series_text("up", {"job": "some-other-job", "instance": "x:1"}), f"1+0x{span}")
            gone.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, dict(io.base), 1)])
            there = Case("VllmMetricsAbsent (job) stays silent while the job's targets are scraped")
            there.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), f"1+0x{span}")
            if running is not None:
                io.gauge(there, running, 1, span)
            there.checks = [Check(span - 1, rule.name, [])]
            cases += [gone, there]
        elif running is not None:
            empty = Case(
                f"VllmMetricsAbsent (target) fires when a scraped target has no vLLM series for {rule.for_}"
            )
            empty.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), f"1+0x{span}")
            empty.add(series_text("up", {**io.base, **io.at_target(NEIGHBOUR)}), f"1+0x{span}")
            io.gauge(empty, running, 1, span, instance=ELSEWHERE)
            labels = {**io.base, **io.at_target(REPLICA)}
            empty.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, labels, 1)])
            cases.append(empty)
    # Both rules share the alert name: a case must expect every firing one.
    merged = []
    for case in cases:
        for check in case.checks:
            check.alertname = rules[0].name
        merged.append(case)
    return merged


def _log_event(event: str) -> Builder:
    def build(rules: list[Alert], io: Inputs) -> list[Case]:
        (rule,) = rules
        job = io.cfg.prometheus.log_exporter_job
        labels = {"job": job, **io.at_target(REPLICA), "exporter_address": EXPORTER}
        fire = Case(f"{rule.name} fires on the first evaluation after an {event} event, without waiting")
        for other in ("oom", "engine_dead", "startup_failed", "request_error"):
            values = "0 0 0 1 1 1 1 1" if other == event else "0+0x7"
            fire.add(series_text("vllm_log_events_total", {**labels, "event": other}), values)
        fire.checks = [
            Check(2, rule.name, []),
            Check(3, rule.name, [Expect(rule, {**labels, "event": event}, 1)]),
        ]
        quiet = Case(f"{rule.name} stays silent when only other events happen")
        for other in ("oom", "engine_dead", "startup_failed", "request_error"):
            values = "0+0x7" if other == event else "0 0 0 1 1 1 1 1"
            quiet.add(series_text("vllm_log_events_total", {**labels, "event": other}), values)
        quiet.checks = [Check(5, rule.name, [])]
        return [fire, quiet]

    return build


def _exporter_down(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    labels = {
        "job": io.cfg.prometheus.log_exporter_job,
        **io.at_target(REPLICA),
        "exporter_address": EXPORTER,
    }
    span = minutes(rule.for_) + 5
    down = Case(f"VllmLogExporterDown fires after {rule.for_} of failed scrapes")
    down.add(series_text("up", labels), f"0+0x{span}")
    down.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, labels, 0)])
    up = Case("VllmLogExporterDown stays silent while the exporter answers")
    up.add(series_text("up", labels), f"1+0x{span}")
    up.checks = [Check(span - 1, rule.name, [])]
    return [down, up]


def _hung(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    a = io.cfg.alerts
    span = minutes(rule.for_) + minutes(a.hung_window) + 5
    labels = io.probe_labels()
    labels.pop("job"), labels.pop("probe_address")
    hung = Case(f"VllmEngineHung fires when probes time out for {rule.for_} while /health answers 200")
    io.probe(hung, span, failing="timeout")
    io.probe_health(hung, span, 1)
    io.probe(hung, span, who=NEIGHBOUR)
    io.probe_health(hung, span, 1, who=NEIGHBOUR)
    # increase() needs two samples: the failures show from the second minute.
    hung.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, labels, 0)])
    dead = Case("VllmEngineHung stays silent when /health fails too: the engine is dead, not hung")
    io.probe(dead, span, failing="timeout")
    io.probe_health(dead, span, 0)
    dead.checks = [Check(span - 1, rule.name, [])]
    refused = Case("VllmEngineHung stays silent when the probe is turned away (4xx), not hung")
    io.probe(refused, span, failing="http_4xx")
    io.probe_health(refused, span, 1)
    refused.checks = [Check(span - 1, rule.name, [])]
    fine = Case("VllmEngineHung stays silent while probes succeed")
    io.probe(fine, span)
    io.probe_health(fine, span, 1)
    fine.checks = [Check(span - 1, rule.name, [])]
    cases = [hung, dead, refused, fine]
    if io.res.has("generation_tokens"):
        tokens = io.res["generation_tokens"]
        # A hung engine's counters freeze where they stood.
        hung.add(series_text(tokens.name, io.labels(signal=tokens)), f"500+0x{span}")
        saturated = Case(
            "VllmEngineHung stays silent on a saturated server: the probe times out in the queue "
            "while tokens keep coming"
        )
        io.probe(saturated, span, failing="timeout")
        io.probe_health(saturated, span, 1)
        io.counter(saturated, tokens, 600, span)
        saturated.checks = [Check(span - 1, rule.name, [])]
        cases.append(saturated)
    return cases


def _probe_down(rules: list[Alert], io: Inputs) -> list[Case]:
    by_cause = {r.labels["cause"]: r for r in rules}
    down_rule, rejected_rule = by_cause["down"], by_cause["rejected"]
    span = minutes(down_rule.for_) + minutes(io.cfg.alerts.hung_window) + 5
    up = {"job": io.cfg.prometheus.probe_job, "instance": PROBE, "probe_address": PROBE}
    if io.scope.cluster:
        up[io.scope.cluster] = io.at_target(REPLICA)[io.scope.cluster]
    down = Case(f"VllmProbeDown fires after {down_rule.for_} of failed scrapes of the probe")
    down.add(series_text("up", up), f"0+0x{span}")
    down.checks = boundary(down_rule.name, 0, down_rule.for_, [Expect(down_rule, up, 0)])
    rejected = Case(f"VllmProbeDown fires when vLLM answers the probe with 4xx for {rejected_rule.for_}")
    rejected.add(series_text("up", up), f"1+0x{span}")
    io.probe(rejected, span, failing="http_4xx")
    io.probe_health(rejected, span, 1)
    labels = io.probe_labels()
    labels.pop("job"), labels.pop("probe_address")
    rejected.checks = boundary(rejected_rule.name, 1, rejected_rule.for_, [Expect(rejected_rule, labels, 0)])
    fine = Case("VllmProbeDown stays silent while the probe is scraped and answered")
    fine.add(series_text("up", up), f"1+0x{span}")
    io.probe(fine, span)
    fine.checks = [Check(span - 1, down_rule.name, [])]
    return [down, rejected, fine]


def _startup_slow(rules: list[Alert], io: Inputs) -> list[Case]:
    warn, crit = sorted(rules, key=lambda r: r.severity != "warning")
    labels = io.exporter_labels()
    labels.pop("job"), labels.pop("exporter_address")
    began = 60  # the start marker is read at t=60 s
    # No `for`: the first minute whose time() - 60 exceeds a limit fires.
    warn_at = int((began + warn.threshold) // 60) + 1
    crit_at = int((began + crit.threshold) // 60) + 1
    span = crit_at + 3
    slow = Case("VllmStartupSlow warns past the expected start-up time and pages past twice it")
    io.server_state(slow, span, f"0 {began}", ["unknown", "starting", "starting", "loading"])
    slow.add(
        series_text(
            "vllm_log_last_event_timestamp_seconds", {**io.exporter_labels(), "event": "startup_begin"}
        ),
        f"0 {began}+0x{span}",
    )
    slow.checks = [
        Check(warn_at - 1, warn.name, []),
        Check(warn_at, warn.name, [Expect(warn, labels, warn_at * 60 - began)]),
        Check(crit_at - 1, warn.name, [Expect(warn, labels, (crit_at - 1) * 60 - began)]),
        Check(
            crit_at,
            warn.name,
            [Expect(warn, labels, crit_at * 60 - began), Expect(crit, labels, crit_at * 60 - began)],
        ),
    ]
    ready = Case("VllmStartupSlow stays silent once the server is ready")
    io.server_state(ready, span, f"0 {began} {began} 180", ["unknown", "starting", "loading", "ready"])
    ready.add(
        series_text(
            "vllm_log_last_event_timestamp_seconds", {**io.exporter_labels(), "event": "startup_begin"}
        ),
        f"0 {began}+0x{span}",
    )
    ready.checks = [Check(span - 1, warn.name, [])]
    return [slow, ready]


def _restart_loop(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    starts = int(rule.threshold)
    labels = io.exporter_labels()
    labels.pop("job"), labels.pop("exporter_address")
    span = 2 * starts + 6
    # One start every two minutes, each failing; the n-th start lands at minute 2n - 1.
    counts = [min(starts, (m + 1) // 2) for m in range(span)]
    states = ["unknown"] + ["starting" if m % 2 else "failed_start" for m in range(1, span)]
    loop = Case(f"VllmRestartLoop fires at start number {starts} without a ready period")
    loop.add(
        series_text("vllm_log_events_total", {**io.exporter_labels(), "event": "startup_begin"}),
        " ".join(str(c) for c in counts),
    )
    io.server_state(loop, span, "0", states)
    at = 2 * starts - 1
    loop.checks = [Check(at - 1, rule.name, []), Check(at, rule.name, [Expect(rule, labels, starts)])]
    healed = Case("VllmRestartLoop stays silent when a start in the window became ready")
    healed.add(
        series_text("vllm_log_events_total", {**io.exporter_labels(), "event": "startup_begin"}),
        " ".join(str(c) for c in counts),
    )
    io.server_state(healed, span, "0", [*states[:2], "ready", *states[3:]])
    healed.checks = [Check(at, rule.name, [])]
    return [loop, healed]


def _version_drift(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    newest = io.res.source.release_versions[-1]
    major, minor = (int(p) for p in newest.split(".")[:2])
    other = f"{major}.{minor + 1}.0"
    drift = Case(f"VllmVersionDrift fires when the log announces vLLM {other}")
    drift.add(series_text("vllm_log_vllm_version_info", {**io.exporter_labels(), "version": other}), "1+0x3")
    labels = io.exporter_labels()
    labels.pop("job"), labels.pop("exporter_address")
    drift.checks = [Check(1, rule.name, [Expect(rule, {**labels, "version": other}, 1)])]
    same = Case(f"VllmVersionDrift stays silent on a patch release of {newest}")
    same.add(
        series_text("vllm_log_vllm_version_info", {**io.exporter_labels(), "version": f"{newest}.9"}), "1+0x3"
    )
    same.checks = [Check(1, rule.name, [])]
    return [drift, same]


def _burn(key: str, objective: float) -> Builder:
    def build(rules: list[Alert], io: Inputs) -> list[Case]:
        sig = io.res[key]
        threshold = (
            io.cfg.slo.ttft_threshold_seconds
            if key == "time_to_first_token"
            else io.cfg.slo.itl_threshold_seconds
        )
        budget = 1 - objective
        tiers = {(r.labels["long"], r.labels["short"]): r for r in rules}
        factors = {(long, short): factor for _, _, long, short, factor in BURN_TIERS}
        fastest = max(factors.values())
        slowest = min(factors.values())
        cases = []
        for title, miss in (
            ("just above the fastest burn rate", min(1.0, fastest * budget * 1.1)),
            ("just below the fastest burn rate", fastest * budget * 0.9),
            ("just below the slowest burn rate", slowest * budget * 0.9),
        ):
            per_min = 10000
            bad = round(per_min * miss)
            case = Case(f"{rules[0].name}: misses {bad / per_min:.4%} of the SLO, {title}")
            labels = io.labels(signal=sig)
            case.add(
                series_text(sig.bucket, {**labels, "le": bucket_text(threshold)}),
                f"0+{per_min - bad}x{{span}}",
            )
            case.add(series_text(sig.count, labels), f"0+{per_min}x{{span}}")
            value = 1 - (per_min - bad) / per_min
            result = io.fleet_result()
            checks = []
            firing_tiers = [t for t, f in factors.items() if value > f * budget]
            for tier in firing_tiers:
                at = 1 + minutes(tiers[tier].for_)
                checks += [at - 1, at]
            checks = sorted(set(checks)) or [1 + max(minutes(r.for_) for r in rules)]
            for minute in checks:
                expected = [
                    Expect(tiers[t], result, value)
                    for t in firing_tiers
                    if minute >= 1 + minutes(tiers[t].for_)
                ]
                case.checks.append(Check(minute, rules[0].name, expected))
            span = max(c.minute for c in case.checks) + 1
            case.series = {k: v.replace("{span}", str(span)) for k, v in case.series.items()}
            cases.append(case)
        return cases

    return build


def _watchdog(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    case = Case("Watchdog always fires")
    case.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), "1+0x3")
    case.checks = [Check(0, rule.name, [Expect(rule, {}, 1)]), Check(2, rule.name, [Expect(rule, {}, 1)])]
    return [case]


def builders(res: Resolution, cfg: BundleConfig) -> dict[str, Builder]:
    out: dict[str, Builder] = {
        "VllmHighTimeToFirstToken": _latency("time_to_first_token"),
        "VllmHighTimePerOutputToken": _latency("inter_token_latency"),
        "VllmQueueDepthHigh": _queue,
        "VllmSchedulerThrottled": _throttled,
        "VllmKVCachePressure": _kv_pressure,
        "VllmKVCacheFillingUp": _kv_filling,
        "VllmPreemptions": _preemptions,
        "VllmRequestErrors": _errors,
        "VllmEngineStalled": _stalled,
        "VllmTargetDown": _target_down,
        "VllmMetricsAbsent": _absent,
        "VllmLogExporterDown": _exporter_down,
        "VllmEngineHung": _hung,
        "VllmProbeDown": _probe_down,
        "VllmStartupSlow": _startup_slow,
        "VllmRestartLoop": _restart_loop,
        "VllmVersionDrift": _version_drift,
        "VllmTimeToFirstTokenBudgetBurn": _burn("time_to_first_token", cfg.slo.ttft_objective),
        "VllmTimePerOutputTokenBudgetBurn": _burn("inter_token_latency", cfg.slo.itl_objective),
        "Watchdog": _watchdog,
    }
    for event, name in EXPORTER_EVENTS.items():
        out[name] = _log_event(event)
    # Imported here: these modules build on this one.
    from .feature_tests import builders as feature_builders
    from .gpu_tests import builders as gpu_builders

    out.update(feature_builders())
    out.update(gpu_builders())
    return out


def test_files(
    groups: list[Group], res: Resolution, cfg: BundleConfig, rule_files: list[str], recording: list[str]
) -> dict[str, dict]:
    """One promtool test document per alert group, keyed by group name."""
    io = Inputs(res, cfg)
    table = builders(res, cfg)
    out = {}
    for group in groups:
        by_name: dict[str, list[Alert]] = {}
        for rule in group.rules:
            if isinstance(rule, Alert):
                by_name.setdefault(rule.name, []).append(rule)
        if not by_name:
            continue
        tests = []
        for name, rules in by_name.items():
            if name not in table:
                raise KeyError(f"alert {name} has no promtool test scenario")
            for case in table[name](rules, io):
                tests.append(_test(case, cfg))
        out[group.name] = {
            "rule_files": rule_files,
            "evaluation_interval": "1m",
            # Recording groups first, as a settled Prometheus sees them; promtool's
            # default order would let alerts read a recorded series one step late.
            "group_eval_order": [*recording, group.name],
            "tests": tests,
        }
    return out


def _test(case: Case, cfg: BundleConfig) -> dict:
    span = case.minutes
    series = [{"series": s, "values": v} for s, v in case.series.items()]
    for item in series:
        # Make every series long enough for the last check.
        values = item["values"]
        if "x" in values and values.split("x")[-1].isdigit() and int(values.split("x")[-1]) < span:
            item["values"] = values.rsplit("x", 1)[0] + f"x{span}"
    return {
        "name": case.name,
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {
                "eval_time": f"{check.minute}m",
                "alertname": check.alertname,
                "exp_alerts": [_expected(e, cfg) for e in check.expected],
            }
            for check in case.checks
        ],
    }


def _expected(e: Expect, cfg: BundleConfig) -> dict:
    labels = {**e.labels, **alert_labels(e.rule)}
    full = {**labels, "alertname": e.rule.name}
    annotations = {k: render(v, full, e.value) for k, v in alert_annotations(e.rule, cfg).items()}
    return {"exp_labels": labels, "exp_annotations": annotations}
