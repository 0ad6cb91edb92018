"""promtool cases of the log events: each fires its `for` after its first event and holds for its
window, stays silent on the others, and the log exporter's own scrapes."""

from __future__ import annotations

import math

from ...promql import seconds
from ..model import Alert
from ..scenario_kit import (
    EVENT_AT,
    EXPORTER_ADDRESS,
    REPLICA,
    Builder,
    Case,
    Check,
    Expect,
    Inputs,
    boundary,
    held_checks,
    held_event,
    minutes,
    series_text,
)


def log_event_cases(event: str) -> Builder:
    def build(rules: list[Alert], inputs: Inputs) -> list[Case]:
        (rule,) = rules
        job = inputs.cfg.prometheus.log_exporter_job
        labels = {"job": job, **inputs.at_target(REPLICA), "exporter_address": EXPORTER_ADDRESS}
        window = minutes(inputs.cfg.alerts.log_event_window)
        after = math.ceil(seconds(rule.for_) / 60) if rule.for_ else 0  # evaluations, one a minute
        fire = Case(
            f"{rule.name} fires alerts.log_event_for ({rule.for_}) after an {event} event "
            f"and stays for alerts.log_event_window"
        )
        for other in ("oom", "engine_dead", "startup_failed", "request_error"):
            values = held_event(window) if other == event else f"0+0x{window + 5}"
            fire.add(series_text("vllm_log_events_total", {**labels, "event": other}), values)
        fire.checks = held_checks(rule.name, window, [Expect(rule, {**labels, "event": event}, 1)], after)
        quiet = Case(f"{rule.name} stays silent when only other events happen")
        for other in ("oom", "engine_dead", "startup_failed", "request_error"):
            values = "0+0x7" if other == event else "0 0 0 1 1 1 1 1"
            quiet.add(series_text("vllm_log_events_total", {**labels, "event": other}), values)
        quiet.checks = [Check(5, rule.name, [])]
        return [fire, quiet, *_clock_case(rule, inputs, labels, event)]

    return build


def _clock_case(rule: Alert, inputs: Inputs, labels: dict[str, str], event: str) -> list[Case]:
    """At the production clock (scrape and evaluation every prometheus.scrape_interval): pending
    for the whole `for`, which must outlast the capacity alerts' lag, firing at its end."""
    if not rule.for_:
        return []
    clock_every = inputs.cfg.prometheus.scrape_interval
    step, hold = seconds(clock_every), seconds(rule.for_)
    case = Case(
        f"{rule.name} at the production clock: fires {rule.for_} after the {event} event, not a scrape sooner",
        every=clock_every,
        interval=clock_every,
    )
    before = int(EVENT_AT * 60 // step)  # samples before the event's
    after = int((hold + 120) // step)
    case.add(series_text("vllm_log_events_total", {**labels, "event": event}), f"0+0x{before - 1} 1+0x{after}")
    case.checks = [
        Check(EVENT_AT + (hold - step) / 60, rule.name, []),
        Check(EVENT_AT + hold / 60, rule.name, [Expect(rule, {**labels, "event": event}, 1)]),
    ]
    return [case]


def exporter_down_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    labels = {
        "job": inputs.cfg.prometheus.log_exporter_job,
        **inputs.at_target(REPLICA),
        "exporter_address": EXPORTER_ADDRESS,
    }
    span = minutes(rule.for_) + 5
    down = Case(f"VllmLogExporterDown fires after {rule.for_} of failed scrapes")
    down.add(series_text("up", labels), f"0+0x{span}")
    down.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, labels, 0)])
    up = Case("VllmLogExporterDown stays silent while the exporter answers")
    up.add(series_text("up", labels), f"1+0x{span}")
    up.checks = [Check(span - 1, rule.name, [])]
    return [down, up]
