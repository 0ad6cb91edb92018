"""What a drill scenario records and how its expectations are judged: each part has a window, a
trigger, a timeline and expectations judged at its end from the webhook's notifications,
Alertmanager's per-second view of each alert (inhibition is live state) and Prometheus's ALERTS."""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.drill_stack import CHAT, PAGER, DrillStack
from tests.support.vllm_server import VllmServer

RECEIVER_NAMES = {PAGER: "pager", CHAT: "chat"}
# Alerts about a model, not one of its replicas: they carry model_name, no instance.
PER_MODEL = frozenset(
    {
        "VllmModelCapacityLow",
        "VllmAvailabilityBudgetBurn",
        "VllmTimeToFirstTokenBudgetBurn",
        "VllmTimePerOutputTokenBudgetBurn",
    }
)


@dataclass
class Check:
    description: str
    ok: bool
    detail: str = ""


@dataclass
class Latency:
    alert: str
    severity: str
    receiver: str
    seconds: float


@dataclass
class Panel:
    """One plot of a scenario's picture: PromQL series ({i} is the part's instance)."""

    title: str
    series: list[tuple[str, str]]  # (legend, PromQL)
    kind: str = "line"  # line | state (a lifecycle state from vllm_log_server_state)
    thresholds: list[tuple[str, float]] = field(default_factory=list)
    ylim: tuple[float, float] | None = None


@dataclass
class Part:
    """One stretch of a scenario on one server."""

    title: str
    instance: str
    panels: list[Panel]
    model: str = ""  # the model the instance serves: per-model alerts are judged by it
    start: float = field(default_factory=time.time)
    trigger: float | None = None
    trigger_label: str = ""
    end: float | None = None
    events: list[tuple[float, str]] = field(default_factory=list)
    done: list[str] = field(default_factory=list)  # what was done, for the report
    checks: list[Check] = field(default_factory=list)
    latencies: list[Latency] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)  # measurements worth reporting
    error: str | None = None
    load: float | None = None  # the machine's 1-minute load average at the trigger

    def event(self, text: str, at: float | None = None) -> float:
        at = time.time() if at is None else at
        self.events.append((at, text))
        return at

    def trigger_now(self, label: str) -> float:
        self.trigger = self.event(label)
        self.trigger_label = label
        self.load = os.getloadavg()[0]
        return self.trigger

    def check(self, description: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(description, bool(ok), detail))
        return bool(ok)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def since_trigger(self, at: float) -> float:
        return at - (self.trigger if self.trigger is not None else self.start)


@dataclass
class ScenarioResult:
    key: str
    parts: list[Part] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        out = []
        for part in self.parts:
            if part.error:
                out.append(f"{part.title}: {part.error}")
            out += [f"{part.title}: {c.description} ({c.detail})" for c in part.failures]
        return out


# -- judging a part -----------------------------------------------------------------------------


class Judge:
    """Judges a part's expectations against what the stack recorded during its window."""

    def __init__(self, stack: DrillStack, part: Part) -> None:
        self.stack = stack
        self.part = part

    @property
    def window(self) -> tuple[float, float]:
        end = self.part.end if self.part.end is not None else time.time()
        return self.part.start, end

    def _labels(self, severity: str | None, alert: str = "") -> dict[str, str]:
        if alert in PER_MODEL:
            labels = {"model_name": self.part.model}
        else:
            labels = {"instance": self.part.instance}
        if severity:
            labels["severity"] = severity
        return labels

    def reaches(self, alert: str, severity: str, receivers: tuple[str, ...]) -> None:
        """The alert's first firing notification reached each receiver; its latency is kept."""
        since, until = self.window
        since = self.part.trigger or since
        for receiver in receivers:
            note = self.stack.recorder.first_firing(
                alert, receiver, since, until, **self._labels(severity, alert)
            )
            name = RECEIVER_NAMES.get(receiver, receiver)
            if note is None:
                self.missing(alert, severity, name)
                continue
            seconds = self.part.since_trigger(note.received)
            self.part.latencies.append(Latency(alert, severity, name, seconds))
            self.part.check(
                f"{alert} ({severity}) reaches the {name}", True, f"{seconds:+.1f} s after the trigger"
            )

    def inhibitors(self, alert: str, severity: str | None = None) -> set[str]:
        """The alerts Alertmanager named as inhibiting this one during the window."""
        since, until = self.window
        found = set()
        for state in self.stack.am_states(alert, since, until, **self._labels(severity, alert)):
            for fingerprint in state.inhibited_by:
                found.add(self.stack.fingerprints.get(fingerprint, {}).get("alertname", fingerprint))
        return found

    def missing(self, alert: str, severity: str, receiver: str) -> None:
        """A notification that did not come: say whether the alert fired and what held it back."""
        spans = self.firing_spans(alert, severity)
        held = self.inhibitors(alert, severity)
        if not spans:
            detail = "never firing in Prometheus"
        else:
            detail = f"firing in Prometheus {sum(b - a for a, b in spans):.0f} s, no notification"
            if held:
                detail += f"; Alertmanager held it back, inhibited by {', '.join(sorted(held))}"
        self.part.check(f"{alert} ({severity}) reaches the {receiver}", False, detail)

    def not_hung_while_serving(self) -> None:
        """VllmEngineHung stays silent while the engine generates tokens (it is saturated, not hung)."""
        spans = self.firing_spans("VllmEngineHung")
        detail = "never firing"
        if spans:
            a, _ = spans[0]
            tokens = self.stack.value(
                f'sum(increase(vllm:generation_tokens_total{{instance="{self.part.instance}"}}[30s] @ {a:.0f}))'
            )
            detail = (
                f"firing {sum(y - x for x, y in spans):.0f} s; the engine generated "
                f"{tokens or 0:.0f} tokens in the 30 s before it fired"
            )
        self.part.check(
            "VllmEngineHung stays silent while the engine serves",
            not spans,
            detail,
        )

    def not_at(self, alert: str, receiver: str, severity: str | None = None) -> None:
        """No firing notification of the alert reached this receiver."""
        since, until = self.window
        labels = self._labels(severity, alert)
        notes = [
            n
            for n in self.stack.recorder.records(since, until)
            if n.receiver == receiver and n.firing(alert, **labels)
        ]
        what = f"{alert}{f' ({severity})' if severity else ''}"
        self.part.check(
            f"{what} does not reach the {RECEIVER_NAMES.get(receiver, receiver)}",
            not notes,
            f"{len(notes)} notification(s)" if notes else "none",
        )

    def once(self, alert: str, receiver: str, severity: str) -> None:
        since, until = self.window
        notes = [
            n
            for n in self.stack.recorder.records(since, until)
            if n.receiver == receiver and n.firing(alert, **self._labels(severity, alert))
        ]
        self.part.check(
            f"{alert} reaches the {RECEIVER_NAMES.get(receiver, receiver)} once",
            len(notes) == 1,
            f"{len(notes)} firing notification(s) in {until - since:.0f} s",
        )

    def firing_spans(self, alert: str, severity: str | None = None) -> list[tuple[float, float]]:
        """When Prometheus had the alert firing for this part's instance (from ALERTS)."""
        since, until = self.window
        labels = {**self._labels(severity, alert), "alertname": alert, "alertstate": "firing"}
        matchers = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return firing_spans(self.stack, f"ALERTS{{{matchers}}}", since, until)

    def silent(self, alert: str, severity: str | None = None, why: str = "") -> None:
        """Never firing in Prometheus during the window, and never notified."""
        spans = self.firing_spans(alert, severity)
        since, until = self.window
        notes = [
            n
            for n in self.stack.recorder.records(since, until)
            if n.firing(alert, **self._labels(severity, alert))
        ]
        what = f"{alert}{f' ({severity})' if severity else ''}"
        detail = why or "never firing"
        if spans or notes:
            detail = f"firing {sum(b - a for a, b in spans):.0f} s, {len(notes)} notification(s)"
        self.part.check(f"{what} stays silent", not spans and not notes, detail)

    def pages_nobody(self, alert: str) -> None:
        """No firing notification of the alert at the pager, whether it stayed silent, was
        inhibited or went to the chat only."""
        since, until = self.window
        spans = self.firing_spans(alert)
        notes = [
            n
            for n in self.stack.recorder.records(since, until)
            if n.receiver == PAGER and n.firing(alert, instance=self.part.instance)
        ]
        sources = set()
        for state in self.stack.am_states(alert, since, until, instance=self.part.instance):
            for fingerprint in state.inhibited_by:
                sources.add(self.stack.fingerprints.get(fingerprint, {}).get("alertname", fingerprint))
        if not spans:
            detail = "never firing"
        else:
            detail = f"firing {sum(b - a for a, b in spans):.0f} s, inhibited by {', '.join(sorted(sources)) or 'nothing'}"
        self.part.check(f"{alert} pages nobody", not notes, f"{detail}; {len(notes)} page(s)")

    def inhibited(self, alert: str, by: str, *or_by: str) -> None:
        """Firing in Prometheus, held back by Alertmanager because `by` (or one of `or_by`)
        fires, never notified. Alertmanager names the first inhibition rule that matched, so an
        alert two rules hold back names one of them."""
        since, until = self.window
        spans = self.firing_spans(alert)
        states = self.stack.am_states(alert, since, until, instance=self.part.instance)
        sources = set()
        for state in states:
            for fingerprint in state.inhibited_by:
                sources.add(self.stack.fingerprints.get(fingerprint, {}).get("alertname", fingerprint))
        suppressed = [s for s in states if s.state == "suppressed" and s.inhibited_by]
        notes = [
            n
            for n in self.stack.recorder.records(since, until)
            if n.firing(alert, instance=self.part.instance)
        ]
        # Once every inhibitor has resolved, Alertmanager may rightly tell of an alert that still
        # fires for an evaluation or two: a notification before that is the failure.
        held_until = max((b for name in (by, *or_by) for _, b in self.firing_spans(name)), default=until)
        during = [n for n in notes if n.received <= held_until + 1]
        ok = bool(spans) and bool(suppressed) and bool(sources & {by, *or_by}) and not during
        detail = (
            f"firing in Prometheus {sum(b - a for a, b in spans):.0f} s; "
            f"suppressed in Alertmanager in {len(suppressed)}/{len(states)} samples, inhibited by "
            f"{', '.join(sorted(sources)) or 'nothing'}; {len(during)} notification(s) while held"
            + (
                f", {len(notes) - len(during)} after its inhibitors resolved"
                if len(notes) > len(during)
                else ""
            )
        )
        self.part.check(f"{alert} fires but is inhibited by {' or '.join((by, *or_by))}", ok, detail)

    def resolves_after(self, alert: str, at: float, within: float) -> None:
        spans = self.firing_spans(alert)
        ended = [b for a, b in spans if a <= at + 1]
        ok = bool(spans) and all(b < self.window[1] - 0.5 for _, b in spans)
        later = min((b for b in ended if b >= at - 1), default=None)
        ok = ok and later is not None and later - at <= within
        detail = f"stopped firing {later - at:+.1f} s after it" if later is not None else "still firing"
        self.part.check(f"{alert} resolves after the process continues", ok, detail)


def firing_spans(stack: DrillStack, expr: str, since: float, until: float) -> list[tuple[float, float]]:
    """Intervals where the expression had a sample, merged across series (1 s resolution)."""
    times: set[float] = set()
    for series in range_query(stack, expr, since, until):
        times |= {float(t) for t, _ in series["values"]}
    spans: list[list[float]] = []
    for t in sorted(times):
        if spans and t - spans[-1][1] <= 1.5:
            spans[-1][1] = t
        else:
            spans.append([t, t])
    return [(a, b) for a, b in spans]


def range_query(stack: DrillStack, expr: str, since: float, until: float, step: str = "1s") -> list[dict]:
    from datetime import datetime, timezone

    start = datetime.fromtimestamp(since, tz=timezone.utc)
    end = datetime.fromtimestamp(max(until, since + 1), tz=timezone.utc)
    return stack.client.custom_query_range(expr, start_time=start, end_time=end, step=step)


# -- load ---------------------------------------------------------------------------------------

WORDS = "the quick brown fox jumps over the lazy dog one two three four five".split()


def completion(server: VllmServer, prompt: str, max_tokens: int, timeout: float = 120) -> int | str:
    body = json.dumps(
        {"model": server.model_name, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    ).encode()
    request = urllib.request.Request(
        server.url + "/v1/completions", data=body, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return type(exc).__name__


class Load:
    """Closed-loop clients: each sends a completion, waits for it, sends the next, until stopped.

    Prompts differ per client and per request, so prefix caching does not shorten them.
    """

    def __init__(self, server: VllmServer, prompt_words: int, max_tokens: int | tuple[int, int]) -> None:
        """max_tokens: a number, or a (low, high) range drawn per request so clients do not finish
        in step (a seeded draw: the same run sends the same requests)."""
        self.server, self.prompt_words = server, prompt_words
        self.max_tokens = max_tokens if isinstance(max_tokens, tuple) else (max_tokens, max_tokens)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.statuses: dict[str, int] = {}

    @property
    def clients(self) -> int:
        return len(self._threads)

    def add(self, clients: int = 1) -> None:
        for _ in range(clients):
            index = len(self._threads)
            thread = threading.Thread(target=self._client, args=(index,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _client(self, index: int) -> None:
        n = 0
        draw = random.Random(index)
        while not self._stop.is_set():
            words = " ".join(WORDS[(index + n + k) % len(WORDS)] for k in range(self.prompt_words))
            status = completion(self.server, f"{index}-{n} {words}", draw.randint(*self.max_tokens))
            n += 1
            with self._lock:
                self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1

    def stop(self, wait: float = 60) -> dict[str, int]:
        self._stop.set()
        deadline = time.monotonic() + wait
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        return dict(self.statuses)


def until(check: Callable[[], object], timeout: float, every: float = 0.5) -> object:
    """Poll check() up to timeout; its last result (a scenario judges a timeout as a failure)."""
    deadline = time.monotonic() + timeout
    result = check()
    while not result and time.monotonic() < deadline:
        time.sleep(every)
        result = check()
    return result


@contextlib.contextmanager
def recording(part: Part):
    """Run a part's steps; an exception becomes the part's error, and the window closes."""
    try:
        yield part
    except Exception as exc:  # the report shows it; the test fails on it
        part.error = f"{type(exc).__name__}: {exc}"
    finally:
        if part.end is None:
            part.end = time.time()
