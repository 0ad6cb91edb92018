"""The kit promtool scenarios are written with: inputs shaped like a real scrape of the source,
cases, checks and expected alerts. Fire and silent inputs sit just either side of the configured
thresholds, so a changed threshold still gets tests that pin it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import vllm_obs_contract

from ..promql import bucket_text, equality_labels, number, seconds
from ..signals import FOUNDATIONS, Signal
from ..vocabulary import Vocabulary
from .model import Alert

MODEL = "llama-3-8b"
REPLICA = "vllm-0:8000"
NEIGHBOUR = "vllm-1:8000"
# A server behind the neighbour's target (differs from NEIGHBOUR only where servers share targets).
ELSEWHERE = "elsewhere"
EXPORTER_ADDRESS = "vllm-log-exporter-0:9400"
PROBE_ADDRESS = "vllm-probe-0:9401"


def pod_of(server: str) -> str:
    """The pod a server runs in, where pod labels are kept (a Deployment's pod name)."""
    return f"{server.rsplit(':', 1)[0]}-7d9f8c6b5-{'abcde' if server == REPLICA else 'fghij'}"


# The exporters' closed label sets, from their contract: a case sets every one.
SERVER_STATES = vllm_obs_contract.log_exporter()["vllm_log_server_state"].values("state")
PROBE_REASONS = vllm_obs_contract.probe()["vllm_probe_failures"].values("reason")
EXPORTER_EVENTS = vllm_obs_contract.log_exporter()["vllm_log_events"].values("event")
PROBE_BUCKETS = vllm_obs_contract.probe()["vllm_probe_duration_seconds"].buckets


@dataclass
class Expect:
    rule: Alert
    labels: dict[str, str]  # the labels of the query result
    value: float
    # What each series the description queries holds for the alert (looked_up): (labels, value).
    lookups: dict[str, list[tuple[dict, float]]] = field(default_factory=dict)


@dataclass
class Check:
    minute: float
    alertname: str
    expected: list[Expect]


@dataclass
class QueryCheck:
    """An expression's result at a minute: (labels, value) of every sample, or none at all."""

    minute: int
    expr: str
    samples: list[tuple[dict[str, str], float]]


@dataclass
class Case:
    name: str
    series: dict[str, str] = field(default_factory=dict)  # series text -> values
    checks: list[Check] = field(default_factory=list)
    queries: list[QueryCheck] = field(default_factory=list)  # what a recorded series holds
    # The rules' evaluation interval: a case judged over days may evaluate every 5 minutes.
    every: str = "1m"
    # The input series' sample interval; a check's minute may then be a fraction (0.75: 45 s).
    interval: str = "1m"

    def add(self, series: str, values: str) -> None:
        self.series[series] = values

    @property
    def minutes(self) -> int:
        return int(max(c.minute for c in [*self.checks, *self.queries])) + 1

    @property
    def samples(self) -> int:
        """Input samples a series needs to reach the last check."""
        return int(self.minutes * 60 // seconds(self.interval))


# A bound judged from both sides, a fifth away: one 1.5x or 0.67x the value written fails one.
NEAR_SIDES = (("just above", 1.2), ("just below", 0.8))


# A failure recorded only every few minutes (a probe of a costly model, notification retries
# with a backoff): each must stay in the alert's window until the next.
SPARSE_EVERY = 3


def sparse_counter(span: int) -> str:
    """A counter that goes up by one every SPARSE_EVERY minutes, the first at SPARSE_EVERY."""
    return " ".join(number(m // SPARSE_EVERY) for m in range(span + 1))


# The minute one event lands in a counter (between samples 2 and 3), in held_event cases.
EVENT_AT = 3


def held_event(window: int) -> str:
    """A counter that counts one event at EVENT_AT and no more."""
    return f"0 0 0 1+0x{window + 2}"


def held_checks(alertname: str, window: int, expected: list[Expect], after: int = 0) -> list[Check]:
    """An alert on increase() over `window` minutes of a held_event counter: silent until `after`
    minutes past the event, firing then, still at the last minute the event is in the window, then not."""
    last = EVENT_AT - 2 + window
    return [
        Check(EVENT_AT + after - 1, alertname, []),
        Check(EVENT_AT + after, alertname, expected),
        *([Check(last, alertname, expected)] if last > EVENT_AT + after else []),
        Check(EVENT_AT + window, alertname, []),
    ]


def minutes(duration: str | None) -> int:
    return int(seconds(duration) // 60) if duration else 0


def series_text(name: str, labels: dict[str, str]) -> str:
    _check_exporter_series(name, labels)
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


class Inputs:
    """Builds input series with the labels a real scrape of this source would carry."""

    def __init__(self, v: Vocabulary) -> None:
        self.v = v
        self.res = v.res
        self.cfg = v.cfg
        self.base = {"job": v.cfg.prometheus.vllm_job, **equality_labels(v.cfg.prometheus.extra_selector)}
        self.scope = v.scope
        self.model = MODEL  # the model every series is of (with_model: another)

    def with_model(self, model: str) -> Inputs:
        """The same inputs, for the series of another model."""
        other = copy.copy(self)
        other.model = model
        return other

    def at_target(self, who: str = REPLICA) -> dict[str, str]:
        """Labels of a scrape target (REPLICA or NEIGHBOUR). The neighbour is the replica's namesake in
        another cluster (multi-cluster on) or namespace (pod labels on), so every replica-versus-neighbour
        case proves no aggregation or join merges them (docs/design.md).
        """
        sc = self.scope
        who = NEIGHBOUR if who == ELSEWHERE else who
        # Any other server: beside the replica, in its cluster and namespace.
        target = REPLICA if sc.partitions and who in (REPLICA, NEIGHBOUR) else who
        out = {**self.partition(who), sc.replica: target}
        if sc.pod:
            out[sc.pod] = pod_of(target)
        return out

    def partition(self, who: str = REPLICA) -> dict[str, str]:
        """The labels that split the fleet (cluster, namespace; each when kept) of a server:
        the replica's side, or for the neighbour (and what is behind its target) the other."""
        sc = self.scope
        other = who in (NEIGHBOUR, ELSEWHERE)
        out = {sc.cluster: "west" if other else "east"} if sc.cluster else {}
        if sc.namespace:
            out[sc.namespace] = "team-b" if other else "team-a"
        return out

    def at(self, who: str = REPLICA) -> dict[str, str]:
        """Labels of a server. Where servers share a target (Ray: one node's metrics port for
        all its replicas), the neighbour is another server behind the same target, so the
        cases prove the identity label is never aggregated away."""
        sc = self.scope
        if not sc.identity:
            return self.at_target(who)
        if who not in (REPLICA, NEIGHBOUR, ELSEWHERE):  # any other server: a target of its own
            return {**self.at_target(who), **dict.fromkeys(sc.identity, "replica-0")}
        out = {**self.at_target(ELSEWHERE if who == ELSEWHERE else REPLICA), **self.partition(who)}
        for label in sc.identity:
            out[label] = "replica-0" if who == REPLICA else "replica-1"
        return out

    def labels(
        self, instance: str = REPLICA, signal: Signal | None = None, engine: str = "0", **extra: str
    ) -> dict:
        out = {**self.base, **self.at(instance), "model_name": self.model, **extra}
        if signal is not None and signal.has_label("engine"):
            out["engine"] = engine
        return out

    def fleet_result(self) -> dict[str, str]:
        """Labels of an alert aggregated by job and model_name (and the replica's partition)."""
        return {**self.partition(REPLICA), "job": self.cfg.prometheus.vllm_job, "model_name": self.model}

    def result(self, instance: str = REPLICA) -> dict[str, str]:
        """Labels of an alert aggregated by job, instance and model_name."""
        return {"job": self.cfg.prometheus.vllm_job, **self.at(instance), "model_name": self.model}

    def probe_labels(self, who: str = REPLICA, model: bool = True) -> dict[str, str]:
        """A canary probe's series about one server, as the probe scrape job relabels them."""
        out = {"job": self.cfg.prometheus.probe_job, "probe_address": PROBE_ADDRESS, **self.at_target(who)}
        if model:
            out["model_name"] = self.model
        return out

    def probe(
        self,
        case: Case,
        span: int,
        who: str = REPLICA,
        per_min: float = 4,
        failing: str | None = None,
        failing_from: int = 0,
        latency: float = 0.05,
    ) -> None:
        """`per_min` probes a minute; all answered in `latency` seconds, or all failing for the
        reason `failing` from minute `failing_from` on (answered before it)."""
        labels = self.probe_labels(who)
        answered = 0 if failing and not failing_from else per_min
        for bound in (*PROBE_BUCKETS, float("inf")):
            rate = answered if latency <= bound else 0
            le = "+Inf" if bound == float("inf") else bucket_text(bound)
            case.add(
                series_text("vllm_probe_duration_seconds_bucket", {**labels, "le": le}),
                f"0+{number(rate)}x{span}",
            )
        case.add(series_text("vllm_probe_duration_seconds_count", labels), f"0+{number(answered)}x{span}")
        ok = failing_from if failing else span + 1
        case.add(series_text("vllm_probe_success", labels), _steps([(0, 1), (ok, 0)], span))
        case.add(series_text("vllm_probe_requests_total", labels), f"0+{number(per_min)}x{span}")
        for reason in PROBE_REASONS:
            rate = per_min if reason == failing else 0
            history = (
                f"0+{number(rate)}x{span}"
                if not failing_from or not rate
                else _ramp_from(failing_from, rate, span)
            )
            case.add(series_text("vllm_probe_failures_total", {**labels, "reason": reason}), history)

    def probe_health(self, case: Case, span: int, up: int, who: str = REPLICA) -> None:
        case.add(series_text("vllm_probe_health_up", self.probe_labels(who, model=False)), f"{up}+0x{span}")

    def exporter_labels(self, who: str = REPLICA) -> dict[str, str]:
        """A log exporter's series, as its scrape job relabels them to the server's instance."""
        out = {
            "job": self.cfg.prometheus.log_exporter_job,
            "exporter_address": EXPORTER_ADDRESS,
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

    def event_times(self, case: Case, span: int, who: str = REPLICA, **times: str) -> None:
        """The exporter's last-event times: each event of `times` as a values string (seconds),
        every other event 0 (not seen), as the exporter exports them from its start."""
        labels = self.exporter_labels(who)
        for event in EXPORTER_EVENTS:
            values = times.get(event, "0")
            case.add(
                series_text("vllm_log_last_event_timestamp_seconds", {**labels, "event": event}),
                f"{values} {values.split()[-1]}+0x{span}",
            )

    # -- series shapes ---------------------------------------------------------

    def counter(
        self, case: Case, signal: Signal, per_min: float, span: int, name: str | None = None, **extra: str
    ) -> None:
        case.add(
            series_text(name or signal.name, self.labels(signal=signal, **extra)),
            f"0+{number(per_min)}x{span}",
        )

    def tokens(self, case: Case, span: int, prompt: float = 0, generated: float = 0) -> None:
        """The engine's token counters the source has, from where they stood (500): prompt and
        generated tokens a minute. Both 0: a frozen engine; prompt only: a pooling model."""
        for key, per_min in (("prompt_tokens", prompt), ("generation_tokens", generated)):
            if self.res.has(key):
                sig = self.res[key]
                case.add(series_text(sig.name, self.labels(signal=sig)), f"500+{number(per_min)}x{span}")

    def gauge(
        self, case: Case, signal: Signal, value: float, span: int, instance: str = REPLICA, **extra: str
    ) -> None:
        case.add(
            series_text(signal.name, self.labels(instance, signal, **extra)), f"{number(value)}+0x{span}"
        )

    def sleep_state(self, case: Case, span: int, awake: int) -> bool:
        """The engine awake (1) or put to sleep (0, sleep level 1) throughout, where the source has
        the sleep state; False when it has not."""
        if not self.res.has("engine_sleep_state"):
            return False
        sig = self.res["engine_sleep_state"]
        for state, value in (("awake", awake), ("weights_offloaded", 1 - awake), ("discard_all", 0)):
            self.gauge(case, sig, value, span, sleep_state=state)
        return True

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
        self.spread_histogram(case, signal, {hot: per_min}, span, instance)

    def spread_histogram(
        self, case: Case, signal: Signal, per_bucket: dict[int, float], span: int, instance: str = REPLICA
    ) -> None:
        """Observations a minute in each bucket number (0-based over the finite bounds)."""
        labels = self.labels(instance, signal)
        bounds = signal.buckets
        total = sum(per_bucket.values())
        for i, bound in enumerate(bounds):
            rate = sum(r for b, r in per_bucket.items() if b <= i)
            case.add(
                series_text(signal.bucket, {**labels, "le": bucket_text(bound)}), f"0+{number(rate)}x{span}"
            )
        case.add(series_text(signal.bucket, {**labels, "le": "+Inf"}), f"0+{number(total)}x{span}")
        case.add(series_text(signal.count, labels), f"0+{number(total)}x{span}")
        observed = sum(r * bounds[b] for b, r in per_bucket.items())
        case.add(series_text(signal.sum, labels), f"0+{number(observed)}x{span}")

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

    def serving(self, case: Case, span: int, who: str = REPLICA, running: float = 0) -> None:
        """The gauge a replica serving the model always has (how a bundle ties a server to its
        model, and sees it), at `running` requests."""
        key = next(k for k in FOUNDATIONS[0] if k in self.res.signals)
        self.gauge(case, self.res[key], running, span, instance=who)

    def http(self, case: Case, span: int, status: dict[str, float], who: str = REPLICA) -> None:
        """Requests per minute on an inference handler, by status class (2xx, 5xx...)."""
        http = self.res["http_requests"]
        base = {**self.base, **self.at_target(who), "handler": "/v1/completions", "method": "POST"}
        for code, per_min in status.items():
            case.add(series_text(http.name, {**base, "status": code}), f"0+{number(per_min)}x{span}")

    def outcomes(self, case: Case, span: int, ok: float, failed: float, who: str = REPLICA) -> str:
        """`ok` requests a minute that finished well and `failed` that failed, through the series
        this source tells failures by (vLLM's count, else HTTP 5xx, else the canary's timeouts);
        returns which one."""
        res = self.res
        self.serving(case, span, who)
        if res.reports_engine_errors:
            reasons = {"stop": ok, "error": failed} if failed else {"stop": ok}
            self.traffic(case, ok + failed, span, instance=who, **reasons)
            return "engine"
        self.traffic(case, ok, span, instance=who)
        if "http_requests" in res.signals:
            self.http(case, span, {"2xx": ok, "5xx": failed}, who)
            return "http"
        if self.cfg.prometheus.probes and failed:
            self.probe(case, span, who, per_min=failed, failing="timeout")
            return "probe"
        return "none"


def _steps(points: list[tuple[int, float]], span: int) -> str:
    """A gauge that takes each (minute, value) of `points` from that minute on."""
    values = []
    for minute in range(span + 1):
        values.append(next(v for m, v in reversed(points) if m <= minute))
    return " ".join(number(x) for x in values)


def _ramp_from(start: int, per_min: float, span: int) -> str:
    """A counter flat at 0 until minute `start`, then rising by `per_min` a minute."""
    return " ".join(number(max(0, m - start) * per_min) for m in range(span + 1))


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


# Every sample name an exporter emits -> its family in the exporters' contract.
_EXPORTER_SAMPLES = {
    sample: family
    for exporter in vllm_obs_contract.load().values()
    for family in exporter.families.values()
    for sample in family.samples
}


def _check_exporter_series(name: str, labels: dict[str, str]) -> None:
    """A scenario's exporter series carries only values its exporter can emit."""
    family = _EXPORTER_SAMPLES.get(name)
    if family is None:
        if name.startswith(("vllm_log_", "vllm_probe_")):
            raise ValueError(f"{name} is not a series of the exporters' contract")
        return
    for label, value in labels.items():
        closed = family.labels.get(label)
        if closed is not None and value not in closed:
            raise ValueError(f"{name}{{{label}={value!r}}}: not a value of the exporters' contract")


# One builder per alert name: the alert's rules of this bundle -> its cases.
Builder = Callable[[list[Alert], "Inputs"], list[Case]]
