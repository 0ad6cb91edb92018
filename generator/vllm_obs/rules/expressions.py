"""Expressions and phrases several areas' alerts share."""

from __future__ import annotations

from ..exporter_series import LOG, select
from ..promql import number, seconds
from ..vocabulary import Vocabulary, by


def human_seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:g}ms"
    return f"{value:g}s"


def percent(value: float) -> str:
    return f"{value * 100:g}%"


def traffic(v: Vocabulary) -> str:
    """A replica finishes enough requests to be judged (the traffic floor)."""
    return f"{v.names.requests_finished} > {number(v.cfg.alerts.min_request_rate)}"


def server_state(v: Vocabulary, states: str) -> str:
    """The log exporter's state gauge, for the states of `states` (alternatives: a|b)."""
    return select(LOG, "vllm_log_server_state", v.exporter, state=f"~{states}")


def since_start(v: Vocabulary) -> str:
    """Seconds since the current start began, per server, from the log."""
    begun = select(LOG, "vllm_log_last_event_timestamp_seconds", v.exporter, event="startup_begin")
    return f"time() - max by ({by(v.targets.target)}) ({begun})"


def quiet_lifecycle(v: Vocabulary) -> str:
    """Servers whose log says they are starting, or stopped on purpose within the grace."""
    target = by(v.targets.target)
    since = select(LOG, "vllm_log_server_state_since_timestamp_seconds", v.exporter)
    grace = int(seconds(v.cfg.alerts.planned_stop_grace))
    return (
        f"(\n  max by ({target}) ({server_state(v, 'starting|loading')}) == 1\n"
        f"  or\n"
        f"  max by ({target}) ({server_state(v, 'stopping|stopped')}) == 1\n"
        f"  and on ({target})\n"
        f"  time() - max by ({target}) ({since}) < {grace}\n)"
    )
