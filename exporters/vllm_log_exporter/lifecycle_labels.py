"""The label values of the lifecycle families (server states, startup-duration phases and buckets)
and the shape a vLLM version must have to become a label. The names lifecycle.py and counts.py use
are checked against the exporters' contract's closed sets on import.
"""

from __future__ import annotations

import re

from .contract import closed_values

UNKNOWN, STARTING, LOADING, READY = "unknown", "starting", "loading", "ready"
STOPPING, STOPPED, FAILED_START, DEAD = "stopping", "stopped", "failed_start", "dead"
FAULTED = "faulted"
STATES = closed_values(
    "state",
    "vllm_log_server_state",
    named=(UNKNOWN, STARTING, LOADING, READY, STOPPING, STOPPED, FAILED_START, DEAD, FAULTED),
)
"""Values of the `state` label of vllm_log_server_state, in exposition order."""

WEIGHTS, ENGINE_INIT, TOTAL = "weights", "engine_init", "total"
DURATION_PHASES = closed_values(
    "phase",
    "vllm_log_startup_duration_seconds",
    "vllm_log_last_startup_duration_seconds",
    named=(WEIGHTS, ENGINE_INIT, TOTAL),
)
"""Values of the `phase` label of the startup-duration metrics."""

BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)
"""Upper bounds of the startup-duration histogram, seconds: 1 s to 1 h."""

_VERSION = re.compile(r"\d{1,4}\.\d{1,4}(?:\.\d{1,6}){0,3}(?:[.+-]?[a-z][a-z0-9.+]{0,23})?")


def valid_version(text: str) -> bool:
    """A vLLM version as releases spell it (0.6.6.post1, 0.11.0rc1, 0.10.1.dev5+gabc1234):
    anything else never becomes a label value."""
    return _VERSION.fullmatch(text) is not None


def bucket_index(seconds: float) -> int:
    """Index of the first bucket whose bound holds seconds (len(BUCKETS) for +Inf)."""
    for index, bound in enumerate(BUCKETS):
        if seconds <= bound:
            return index
    return len(BUCKETS)
