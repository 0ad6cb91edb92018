"""The canary probe over the simulated fleet: vllm-probe's own metrics and /ready rule fed with each
simulated probe's outcome (a real request queued in the replica's engine; the README lists them by
server state), at the real probe's interval, timeout and jitter. Its /ready gates routing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from prometheus_client import generate_latest
from vllm_probe.cli import build_parser
from vllm_probe.metrics import ProbeMetrics, build_registry
from vllm_probe.outcome import ERROR, HTTP_4XX, HTTP_5XX, REFUSED, TIMEOUT, Outcome

from .fleet import Fleet, Member
from .replica import Replica, Request

PROMPT_TOKENS = 2  # "ping" with the BOS token
# vllm-probe's defaults, from its own command line.
INTERVAL, TIMEOUT_S, JITTER = (
    float(build_parser().get_default(k)) for k in ("interval", "timeout", "jitter")
)
NOT_READY_AFTER = int(build_parser().get_default("not_ready_after"))


@dataclass
class _Pending:
    sent: float
    request: Request
    replica: Replica


class Canary:
    def __init__(
        self,
        fleet: Fleet,
        epoch: float,
        seed: int,
        interval: float = INTERVAL,
        timeout: float = TIMEOUT_S,
        jitter: float = JITTER,
    ) -> None:
        self.fleet, self.epoch = fleet, epoch
        self.interval, self.timeout, self.jitter = interval, timeout, jitter
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        members = fleet.members
        self.metrics = ProbeMetrics(
            {m.instance: m.model for m in members}, clock=lambda: self.epoch + self.now
        )
        # Every target is probed at the start, as the probe does; then each wait is drawn.
        self.next = dict.fromkeys((m.instance for m in members), 0.0)
        self.pending: dict[str, _Pending] = {}

    def advance(self, t: float) -> None:
        """Settle the probes in flight and send those due; call after the fleet's advance(t)."""
        for member in self.fleet.members:
            self._settle(member, t)
            if member.instance not in self.pending and self.next[member.instance] <= t:
                self._send(member, t)

    def exposition(self) -> bytes:
        return generate_latest(build_registry(self.metrics))

    # -- one target ------------------------------------------------------------------------

    def _send(self, member: Member, t: float) -> None:
        wait = self.interval * (1 + self.rng.uniform(-self.jitter, self.jitter))
        # From when it was due, not from the step it went out in (no drift); never in the past.
        self.next[member.instance] = max(self.next[member.instance] + wait, t)
        server = member.server
        if not server.answering:
            self._record(member, t, Outcome.failure(REFUSED, "nothing listens"), health_up=False)
            return
        if self.rng.random() < member.error_share + member.background.error_share:
            member.replica.seen.errored += 1
            self._record(member, t, Outcome.failure(HTTP_5XX, "an error burst", 500), health_up=True)
            return
        # A pooling model is probed as the probe's `--mode embed` does: an embedding of the prompt.
        pooling = member.task == "embed"
        request = Request(t, PROMPT_TOKENS, 0 if pooling else 1, pooling=pooling)
        member.replica.submit(request)
        self.pending[member.instance] = _Pending(t, request, member.replica)

    def _settle(self, member: Member, t: float) -> None:
        probe = self.pending.get(member.instance)
        if probe is None:
            return
        done, deadline, died = probe.request.finished_at, probe.sent + self.timeout, member.died_at
        if done is not None and done <= deadline:
            outcome, at = Outcome.success(done - probe.sent, 200), done
        elif died is not None and probe.sent <= died < deadline:
            # The engine died with the probe in flight: vLLM answers 500 when it logs the death;
            # a process killed without a word resets the connection.
            logged = member.server.log.last["engine_dead"] == died
            outcome = Outcome.failure(
                HTTP_5XX if logged else ERROR, "the engine died", 500 if logged else None
            )
            at = died
        elif t >= deadline:
            # The probe hangs up; vLLM aborts the request (a hung engine, once it steps again).
            probe.replica.abort(probe.request)
            outcome, at = Outcome.failure(TIMEOUT, f"no answer within {self.timeout:g} s"), deadline
        else:
            return
        del self.pending[member.instance]
        self._record(member, at, outcome, health_up=member.server.answering)

    def _record(self, member: Member, at: float, outcome: Outcome, health_up: bool) -> None:
        self.now = at
        progress = None  # read after a failure from the server's /metrics, as the probe does
        if not outcome.ok and outcome.reason != HTTP_4XX and member.server.answering:
            seen = member.replica.seen
            progress = float(seen.prompt_tokens + seen.generation_tokens)
        self.metrics.record_probe(member.instance, member.model, outcome, health_up, progress)
        member.probe_ready = self.metrics.readiness(member.instance, NOT_READY_AFTER)[0]
