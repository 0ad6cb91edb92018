"""promtool cases of the capacity page: the floors from both sides, each cause a replica can be
lost to, a long outage, what is not an outage (a planned stop, a scale-down, a model moved), and
the joins a swapped or reused server must not break."""

from __future__ import annotations

from ...signals import FOUNDATIONS
from ..expressions import MODEL, capacity_lookups
from ..model import Alert
from ..scenario_kit import (
    NEAR_SIDES,
    REPLICA,
    Case,
    Check,
    Expect,
    Inputs,
    QueryCheck,
    minutes,
    pod_of,
    series_text,
)

# The other replicas of a scenario's model, beside REPLICA (with multi-cluster on, NEIGHBOUR is
# the namesake in another cluster: another model's fleet).
MORE_REPLICAS = ("vllm-2:8000", "vllm-3:8000", "vllm-4:8000")
TEN = (REPLICA, *(f"vllm-{i}:8000" for i in range(2, 11)))
SWAPPED_TO = "llama-3-8b-v2"


class _Cases:
    def __init__(self, rule: Alert, inputs: Inputs) -> None:
        self.rule, self.inputs, self.n = rule, inputs, inputs.v.names
        self.down_after = minutes(inputs.cfg.alerts.target_down_for)
        self.span = self.down_after + 6

    def replicas(self, case: Case, who: tuple[str, ...], up: dict[str, str], span: int | None = None) -> None:
        """Each of `who` serving the model and scraped (`up` as given, else 1 throughout)."""
        span = span or self.span
        for name in who:
            self.inputs.serving(case, span, name)
            case.add(
                series_text("up", {**self.inputs.base, **self.inputs.at_target(name)}),
                up.get(name, f"1+0x{span}"),
            )

    def page(self, ready: float, expected: float, lost: dict[str, str]) -> list[Expect]:
        """The model's page: its ready replicas, what it should run, and each replica lost and why."""
        q, fleet, p = capacity_lookups(self.inputs.v), self.inputs.fleet_result(), self.inputs.cfg.paging
        lookups = {
            q["replicas"]: [({}, ready + len(lost))],
            q["expected"]: [(fleet, expected)],
            q["floor"]: [(fleet, max(p.capacity_fraction * expected, p.min_ready_replicas))],
            f"{self.n.replica_unready}{{{MODEL}}}": [
                ({**self.inputs.result(w), "cause": c}, 1) for w, c in lost.items()
            ],
        }
        return [Expect(self.rule, self.inputs.fleet_result(), ready, lookups)]

    def causes(self, minute: int, causes: dict[str, str]) -> QueryCheck:
        """Each replica not ready at `minute`, and why."""
        expr = f"{self.n.replica_unready} * 0 + 1"
        return QueryCheck(
            minute, expr, [({**self.inputs.result(w), "cause": c}, 1) for w, c in causes.items()]
        )

    def down_from_1(self) -> str:
        return f"1 0+0x{self.span}"

    # -- the floors ------------------------------------------------------------------------

    def floors(self) -> list[Case]:
        fire_at = 1 + self.down_after  # up 0 from minute 1: not scraped once in the window from here
        alone = Case("VllmModelCapacityLow pages when the only replica is down for alerts.target_down_for")
        self.replicas(alone, (REPLICA,), {REPLICA: self.down_from_1()})
        alone.checks = [
            Check(fire_at - 1, self.rule.name, []),
            Check(fire_at, self.rule.name, self.page(0, 1, {REPLICA: "down"})),
        ]
        alone.queries = [self.causes(fire_at, {REPLICA: "down"})]
        cases = [alone, self.recovery(fire_at)]
        quarter = Case("VllmModelCapacityLow stays silent when one replica of four is down")
        self.replicas(quarter, (REPLICA, *MORE_REPLICAS), {REPLICA: self.down_from_1()})
        quarter.checks = [Check(self.span - 1, self.rule.name, [])]
        cases.append(quarter)
        if self.inputs.cfg.paging.capacity_fraction <= 0:
            return cases
        most = Case("VllmModelCapacityLow pages when most of four replicas are down")
        lost = (REPLICA, *MORE_REPLICAS)[:3]
        self.replicas(most, (REPLICA, *MORE_REPLICAS), {w: self.down_from_1() for w in lost})
        most.checks = [
            Check(fire_at - 1, self.rule.name, []),
            Check(fire_at, self.rule.name, self.page(1, 4, dict.fromkeys(lost, "down"))),
        ]
        cases.append(most)
        # paging.capacity_fraction from both sides on ten replicas: 1.5x or 0.67x fails one.
        bound = self.inputs.cfg.paging.capacity_fraction * len(TEN)
        for side, scale in NEAR_SIDES:
            ready = round(bound * scale)
            if ready == bound or not self.inputs.cfg.paging.min_ready_replicas <= ready < len(TEN):
                continue
            near = Case(
                f"VllmModelCapacityLow with {ready} of {len(TEN)} replicas ready, {side} paging.capacity_fraction"
            )
            self.replicas(near, TEN, {w: self.down_from_1() for w in TEN[ready:]})
            near.checks = [
                Check(
                    fire_at,
                    self.rule.name,
                    self.page(ready, len(TEN), dict.fromkeys(TEN[ready:], "down")) if ready < bound else [],
                )
            ]
            cases.append(near)
        return cases

    def recovery(self, fire_at: int) -> Case:
        """The only replica is back two minutes after the page: it stays open paging.recovery_for
        past the condition's last minute, then resolves (a keep_firing_for a minute off fails)."""
        return _held(
            self.inputs,
            self.rule,
            fire_at,
            "VllmModelCapacityLow stays open for paging.recovery_for after the only replica is back",
            self.page(0, 1, {REPLICA: "down"}),
        )

    def long_outage(self) -> list[Case]:
        """Six of ten replicas die and stay down for three hours, still discovered: the page stays
        open to the end, however long, and closes paging.recovery_for after they are back."""
        if self.inputs.cfg.paging.capacity_fraction <= 0:
            return []
        down, back = 10, 190
        last = back - 1 + minutes(self.rule.keep_firing_for)
        case = Case("VllmModelCapacityLow stays open through a three-hour outage of six of ten replicas")
        dead = f"1x{down - 1} 0x{back - down - 1} 1x{last + 2 - back}"
        self.replicas(case, TEN, {w: dead for w in TEN[4:]}, span=last + 2)
        opened = down + self.down_after
        case.checks = [Check(opened - 1, self.rule.name, [])]
        case.checks += [
            Check(m, self.rule.name, self.page(4, len(TEN), dict.fromkeys(TEN[4:], "down")))
            for m in range(opened, back, 30)
        ]
        # Kept firing, the page keeps the value it last had.
        case.checks += [
            Check(last, self.rule.name, self.page(4, len(TEN), dict.fromkeys(TEN[4:], "down"))),
            Check(last + 1, self.rule.name, []),
        ]
        return [case]

    def not_outages(self) -> list[Case]:
        """Six of ten replicas leave discovery (a scale-down): no replica is lost, so without a
        desired count to say otherwise it is no outage, though fewer run than the most it had."""
        if self.inputs.cfg.paging.capacity_fraction <= 0 or self._desired_for_model():
            return []
        case = Case(
            "VllmModelCapacityLow stays silent when six of ten replicas leave discovery (a scale-down)"
        )
        span = 30
        for name in TEN:
            gone = name in TEN[4:]
            history = "1x10 stale" if gone else f"1+0x{span}"
            case.add(series_text("up", {**self.inputs.base, **self.inputs.at_target(name)}), history)
            case.add(
                series_text(
                    self.inputs.res[_gauge(self.inputs)].name,
                    self.inputs.labels(name, self.inputs.res[_gauge(self.inputs)]),
                ),
                "0x10 stale" if gone else f"0+0x{span}",
            )
        case.checks = [Check(m, self.rule.name, []) for m in (12, 18, 25)]
        case.queries = [
            QueryCheck(
                25,
                self.n.replicas_ready,
                [({**self.inputs.fleet_result(), "__name__": self.n.replicas_ready}, 4)],
            )
        ]
        return [case]

    def _desired_for_model(self) -> bool:
        return bool(self.inputs.cfg.paging.expected_replicas) or bool(self.inputs.scope.pod)

    # -- what the log and the canary tell ----------------------------------------------------

    def lifecycle(self) -> list[Case]:
        """A death pages at once; a crash-restart pages (no planned stop before it), a planned
        restart does not; an out-of-memory names its cause for log_event_window."""
        inputs, span, cases = self.inputs, self.span, []
        dead = Case("VllmModelCapacityLow pages at once when the log shows the only engine died")
        self.replicas(dead, (REPLICA,), {})
        inputs.server_state(dead, span, "0 120", ["ready", "ready", "dead"])
        inputs.event_times(dead, span, startup_complete="30", engine_dead="0 0 120")
        dead.checks = [
            Check(1, self.rule.name, []),
            Check(2, self.rule.name, self.page(0, 1, {REPLICA: "dead"})),
        ]
        dead.queries = [self.causes(2, {REPLICA: "dead"})]
        cases.append(dead)

        window = minutes(inputs.cfg.alerts.log_event_window)
        oom = Case("VllmModelCapacityLow names out-of-memory as the cause while the log shows it recently")
        oom_span = max(span, window + 4)
        self.replicas(oom, (REPLICA,), {}, span=oom_span)
        inputs.server_state(oom, oom_span, "0 120", ["ready", "ready", "dead"])
        inputs.event_times(oom, oom_span, startup_complete="30", oom="0 0 120", engine_dead="0 0 120")
        oom.checks = [
            Check(1, self.rule.name, []),
            Check(2, self.rule.name, self.page(0, 1, {REPLICA: "out_of_memory"})),
        ]
        oom.checks.append(Check(2 + window, self.rule.name, self.page(0, 1, {REPLICA: "dead"})))
        oom.queries = [
            self.causes(2, {REPLICA: "out_of_memory"}),
            self.causes(2 + window - 1, {REPLICA: "out_of_memory"}),
            self.causes(2 + window, {REPLICA: "dead"}),
        ]
        cases.append(oom)

        # Killed without a log line, then started again: only the log tells it is not serving.
        crash = Case(
            "VllmModelCapacityLow pages while the only replica restarts after a crash the log did not show"
        )
        self.replicas(crash, (REPLICA,), {REPLICA: self.down_from_1()})
        inputs.server_state(crash, span, "0 120", ["ready", "ready", "starting"])
        inputs.event_times(crash, span, startup_complete="30", shutdown="10", startup_begin="0 0 120")
        crash.checks = [
            Check(1, self.rule.name, []),
            Check(2, self.rule.name, self.page(0, 1, {REPLICA: "restarting"})),
        ]
        crash.queries = [self.causes(2, {REPLICA: "restarting"})]
        cases.append(crash)

        faulted = Case("VllmModelCapacityLow pages at once when the log shows the only engine faulted")
        self.replicas(faulted, (REPLICA,), {})
        inputs.server_state(faulted, span, "0 120", ["ready", "ready", "faulted"])
        inputs.event_times(faulted, span, startup_complete="30", engine_faulted="0 0 120")
        faulted.checks = [
            Check(1, self.rule.name, []),
            Check(2, self.rule.name, self.page(0, 1, {REPLICA: "faulted"})),
        ]
        cases.append(faulted)

        planned = Case(
            "VllmModelCapacityLow stays silent while the only replica restarts after a planned stop"
        )
        self.replicas(planned, (REPLICA,), {REPLICA: self.down_from_1()})
        inputs.server_state(planned, span, "0 60 120", ["ready", "stopping", "starting"])
        inputs.event_times(planned, span, startup_complete="30", shutdown="0 60", startup_begin="0 0 120")
        planned.checks = [Check(span - 1, self.rule.name, [])]
        cases.append(planned)

        stopped = Case(
            "VllmModelCapacityLow stays silent while the only replica stays stopped on purpose past the grace"
        )
        grace = minutes(inputs.cfg.alerts.planned_stop_grace)
        self.replicas(stopped, (REPLICA,), {REPLICA: f"1 0+0x{grace + 5}"}, span=grace + 5)
        inputs.server_state(stopped, grace + 5, "0 60", ["ready", "stopped"])
        inputs.event_times(stopped, grace + 5, startup_complete="30", shutdown="0 60")
        stopped.checks = [Check(grace + 3, self.rule.name, [])]
        cases.append(stopped)

        # A rollout the server cannot start with: each start fails and it starts again.
        looping = Case(
            "VllmModelCapacityLow pages while the only replica starts again after its start failed"
        )
        self.replicas(looping, (REPLICA,), {REPLICA: self.down_from_1()})
        inputs.server_state(
            looping, span, "0 60 120 180 240", ["ready", "stopping", "starting", "failed_start", "starting"]
        )
        inputs.event_times(
            looping,
            span,
            startup_complete="30",
            shutdown="0 60",
            startup_begin="0 0 120 120 240",
            startup_failed="0 0 0 180",
        )
        looping.checks = [
            Check(2, self.rule.name, []),
            Check(3, self.rule.name, self.page(0, 1, {REPLICA: "dead"})),
        ]
        looping.queries = [self.causes(3, {REPLICA: "dead"}), self.causes(4, {REPLICA: "restarting"})]
        cases.append(looping)
        return cases + self.back_from_a_stop()

    def back_from_a_stop(self) -> list[Case]:
        """A replica stopped on purpose and started again is ready in its log before Prometheus has
        scraped it again: no page then; the first scrape after it decides."""
        inputs, span = self.inputs, self.span
        ready = 2 + self.down_after + 1
        states = ["ready", "stopped", *["starting"] * (ready - 2), "ready"]
        since = " ".join(str(60 * m) for m in (0, 1, *[2] * (ready - 2), ready))
        startup_complete = " ".join(["30"] * ready + [str(60 * ready)])

        def back(case: Case, after: str) -> None:
            self.replicas(case, (REPLICA,), {REPLICA: " ".join(["1", *["0"] * (ready - 1), "_", after])})
            inputs.server_state(case, span, since, states)
            inputs.event_times(
                case, span, startup_complete=startup_complete, shutdown="0 60", startup_begin="0 0 120"
            )

        answered = Case(
            "VllmModelCapacityLow stays silent while a replica back from a planned stop is ready in its log "
            "and Prometheus has not scraped it since"
        )
        back(answered, f"1+0x{span}")
        answered.checks = [Check(ready, self.rule.name, []), Check(ready + 1, self.rule.name, [])]
        unanswered = Case(
            "VllmModelCapacityLow pages at the first failed scrape of a replica its log says is ready again"
        )
        back(unanswered, f"0+0x{span}")
        unanswered.checks = [
            Check(ready, self.rule.name, []),
            Check(ready + 1, self.rule.name, self.page(0, 1, {REPLICA: "down"})),
        ]
        return [answered, unanswered]

    def hung(self) -> list[Case]:
        inputs, a = self.inputs, self.inputs.cfg.alerts
        span = minutes(a.hung_for) + 8
        case = Case("VllmModelCapacityLow pages when the only replica's canary times out for alerts.hung_for")
        self.replicas(case, (REPLICA,), {}, span=span)
        began = 2
        inputs.probe(case, span, failing="timeout", failing_from=began)
        inputs.probe_health(case, span, 1)
        at = began + minutes(a.hung_for)
        case.checks = [
            Check(at - 1, self.rule.name, []),
            Check(at, self.rule.name, self.page(0, 1, {REPLICA: "hung"})),
        ]
        case.queries = [self.causes(at, {REPLICA: "hung"})]
        out = [case]
        if inputs.res.has("engine_sleep_state"):
            asleep = Case(
                "VllmModelCapacityLow stays silent while the only replica sleeps (sleep mode): not hung"
            )
            self.replicas(asleep, (REPLICA,), {}, span=span)
            inputs.probe(asleep, span, failing="timeout", failing_from=began)
            inputs.probe_health(asleep, span, 1)
            inputs.sleep_state(asleep, span, awake=0)
            asleep.checks = [Check(span - 1, self.rule.name, [])]
            inputs.sleep_state(case, span, awake=1)
            out.append(asleep)
        if inputs.res.has("generation_tokens"):
            saturated = Case("VllmModelCapacityLow stays silent on a saturated replica: tokens keep coming")
            self.replicas(saturated, (REPLICA,), {}, span=span)
            inputs.probe(saturated, span, failing="timeout")
            inputs.probe_health(saturated, span, 1)
            inputs.counter(saturated, inputs.res["generation_tokens"], 600, span)
            saturated.checks = [Check(span - 1, self.rule.name, [])]
            out.append(saturated)
        return out

    def unhealthy(self) -> list[Case]:
        """Fault tolerance: vllm:engine_healthy (per engine, no model_name) 0 takes the replica out."""
        inputs, span = self.inputs, self.span
        sig = inputs.res["engine_healthy"]
        labels = {**inputs.base, **inputs.at_target(REPLICA), "engine": "0"}
        sick = Case("VllmModelCapacityLow pages at once when the only replica's engine reports unhealthy")
        self.replicas(sick, (REPLICA,), {})
        sick.add(series_text(sig.name, labels), f"1 1 0+0x{span - 2}")
        sick.checks = [
            Check(1, self.rule.name, []),
            Check(2, self.rule.name, self.page(0, 1, {REPLICA: "unhealthy"})),
        ]
        sick.queries = [self.causes(2, {REPLICA: "unhealthy"})]
        well = Case("VllmModelCapacityLow stays silent while the replica's engine reports healthy")
        self.replicas(well, (REPLICA,), {})
        well.add(series_text(sig.name, labels), f"1+0x{span}")
        well.checks = [Check(span - 1, self.rule.name, [])]
        return [sick, well]

    # -- servers that change what they serve ------------------------------------------------

    def joins(self) -> list[Case]:
        """A server that serves another model name after a restart, one that serves two names at
        once, and (pod labels) a pod IP another pod takes over: every recording evaluates, each
        model counts the replica it has, and nobody is paged."""
        inputs, swap_at, span = self.inputs, 20, 40
        cases = []

        swap = Case(
            "A server that serves another model name after a planned restart breaks no recording or page"
        )
        self.server(swap, inputs.model, span, end=swap_at)
        self.server(swap, SWAPPED_TO, span, start=swap_at + 1)
        swap.checks = [Check(m, self.rule.name, []) for m in (swap_at + 2, swap_at + 10, span - 1)]
        swap.queries = self.counted(swap_at + 2, [SWAPPED_TO], [inputs.model, SWAPPED_TO]) + self.counted(
            span - 1, [SWAPPED_TO]
        )
        cases.append(swap)

        two = Case("A server that serves two model names at once (LoRA) breaks no recording or page")
        for model in (inputs.model, SWAPPED_TO):
            self.server(two, model, span)
        two.checks = [Check(m, self.rule.name, []) for m in (5, span - 1)]
        two.queries = self.counted(10, [inputs.model, SWAPPED_TO])
        cases.append(two)

        if inputs.scope.pod:
            reused = Case("A pod IP another pod takes over breaks no recording or page")
            new = pod_of(REPLICA).replace("abcde", "zyxwv")
            self.server(reused, inputs.model, span, end=swap_at, pod=pod_of(REPLICA))
            self.server(reused, inputs.model, span, start=swap_at + 1, pod=new)
            reused.checks = [Check(m, self.rule.name, []) for m in (swap_at + 2, span - 1)]
            reused.queries = self.counted(span - 1, [inputs.model])
            cases.append(reused)
        return cases

    def server(
        self, case: Case, model: str, span: int, start: int = 0, end: int | None = None, pod=None
    ) -> None:
        """REPLICA's target (or pod `pod` behind its address) serving `model` from minute `start`
        to `end` (a restart ends it: stale), scraped while it does, 60 requests a minute."""
        inputs, gauge = self.inputs.with_model(model), self.inputs.res[_gauge(self.inputs)]
        moved = {self.inputs.scope.pod: pod} if pod else {}

        def shape(value: str, step: str) -> str:
            return f"{'_ ' * start}{value}+{step}x{(end or span) - start}{' stale' if end else ''}".strip()

        case.add(series_text(gauge.name, {**inputs.labels(REPLICA, gauge), **moved}), shape("0", "0"))
        up = series_text("up", {**inputs.base, **inputs.at_target(REPLICA), **moved})
        case.add(up, shape("1", "0") if pod or up not in case.series else f"1+0x{span}")
        if "request_success" in inputs.res.signals:
            sig = inputs.res["request_success"]
            case.add(
                series_text(sig.name, {**inputs.labels(REPLICA, sig, finished_reason="stop"), **moved}),
                shape("0", "60"),
            )
            if inputs.res.reports_engine_errors:  # none failed: counted as 0, not absent
                failed = {**inputs.labels(REPLICA, sig, finished_reason="error"), **moved}
                case.add(series_text(sig.name, failed), shape("0", "0"))
        if "http_requests" in inputs.res.signals:
            http = inputs.res["http_requests"]
            base = {
                **inputs.base,
                **inputs.at_target(REPLICA),
                "handler": "/v1/completions",
                "method": "POST",
                **moved,
            }
            case.add(series_text(http.name, {**base, "status": "2xx"}), shape("0", "60"))

    def counted(self, minute: int, models: list[str], failing: list[str] | None = None) -> list[QueryCheck]:
        """At `minute`, one ready replica for each of `models`, and (where failures are counted)
        requests per replica for each of `failing` (default: the same): the joins evaluated."""
        n, inputs = self.n, self.inputs
        ready = [
            ({**inputs.with_model(m).fleet_result(), "__name__": n.replicas_ready}, 1) for m in sorted(models)
        ]
        out = [QueryCheck(minute, n.replicas_ready, ready)]
        if inputs.v.counts_failures:
            expr = f"count by (model_name) ({n.requests_failing})"
            out.append(QueryCheck(minute, expr, [({"model_name": m}, 1) for m in sorted(failing or models)]))
        return out


def _gauge(inputs: Inputs) -> str:
    """The gauge every replica of the source has."""
    return next(k for k in FOUNDATIONS[0] if k in inputs.res.signals)


def capacity_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    c = _Cases(rule, inputs)
    cases = c.floors() + c.long_outage() + c.not_outages() + c.joins()
    if inputs.cfg.prometheus.log_exporters:
        cases += c.lifecycle()
    if inputs.cfg.prometheus.probes:
        cases += c.hung()
    if inputs.res.has("engine_healthy"):
        cases += c.unhealthy()
    return cases


def lost_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    """Each replica not ready while its model pages, and none while it does not."""
    (rule,) = rules
    c = _Cases(rule, inputs)
    fire_at = 1 + c.down_after
    lost = (REPLICA, *MORE_REPLICAS)[:3] if inputs.cfg.paging.capacity_fraction > 0 else (REPLICA,)
    everyone = (REPLICA, *MORE_REPLICAS) if inputs.cfg.paging.capacity_fraction > 0 else (REPLICA,)
    most = Case(f"VllmReplicaLost names each of the {len(lost)} replicas down while their model pages")
    c.replicas(most, everyone, {w: c.down_from_1() for w in lost})
    expected = [Expect(rule, {**inputs.result(w), "cause": "down"}, 1) for w in lost]
    most.checks = [Check(fire_at - 1, rule.name, []), Check(fire_at, rule.name, expected)]
    quarter = Case("VllmReplicaLost stays silent for one replica of four down: its model does not page")
    c.replicas(quarter, (REPLICA, *MORE_REPLICAS), {REPLICA: c.down_from_1()})
    quarter.checks = [Check(c.span - 1, rule.name, [])]
    cases = [most, quarter]
    # paging.capacity_fraction from both sides on ten replicas, as the page has it.
    bound = inputs.cfg.paging.capacity_fraction * len(TEN)
    for side, scale in NEAR_SIDES if bound > 0 else ():
        ready = round(bound * scale)
        if ready == bound or not inputs.cfg.paging.min_ready_replicas <= ready < len(TEN):
            continue
        near = Case(
            f"VllmReplicaLost with {ready} of {len(TEN)} replicas ready, {side} paging.capacity_fraction"
        )
        c.replicas(near, TEN, {w: c.down_from_1() for w in TEN[ready:]})
        named = [Expect(rule, {**inputs.result(w), "cause": "down"}, 1) for w in TEN[ready:]]
        near.checks = [Check(fire_at, rule.name, named if ready < bound else [])]
        cases.append(near)
    named = [Expect(rule, {**inputs.result(REPLICA), "cause": "down"}, 1)]
    title = "VllmReplicaLost stays for paging.recovery_for after the only replica is back"
    return [*cases, _held(inputs, rule, fire_at, title, named)]


def _held(inputs: Inputs, rule: Alert, fire_at: int, title: str, named: list[Expect]) -> Case:
    """The only replica, down from minute 1, is back two minutes after `fire_at`: `named` fire
    until keep_firing_for past the last minute down, and not a minute longer."""
    back = fire_at + 2
    last = back - 1 + minutes(rule.keep_firing_for)
    case = Case(title)
    inputs.serving(case, last + 2)
    case.add(
        series_text("up", {**inputs.base, **inputs.at_target(REPLICA)}), f"1 0x{back - 2} 1x{last + 1 - back}"
    )
    case.checks = [
        Check(back, rule.name, named),
        Check(last, rule.name, named),
        Check(last + 1, rule.name, []),
    ]
    return case
