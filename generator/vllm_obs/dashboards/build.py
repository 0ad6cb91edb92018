"""The bundle's dashboards, and what each signal feeds on them."""

from __future__ import annotations

import dataclasses

from ..vocabulary import Vocabulary
from .failures import failures
from .instance import instance
from .kv_cache import kv_cache
from .overview import overview
from .spec import Dashboard

# The panels each signal feeds, for the warning printed when a source lacks it (the alerts
# it feeds are named from their declarations). Signals nothing shows are missing silently
# (V0-only legacy series on a V1 server).
SIGNAL_PANELS = {
    "time_to_first_token": "the TTFT panels",
    "inter_token_latency": "the inter-token panels",
    "e2e_request_latency": "the end-to-end latency panels",
    "request_queue_time": "the queue-time line of the latency-phase panel",
    "request_prefill_time": "the prefill line of the latency-phase panel",
    "request_decode_time": "the decode line of the latency-phase panel",
    "requests_running": "the running-requests panels",
    "requests_waiting": "the queue panels",
    "kv_cache_usage": "the KV-cache panels",
    "preemptions": "the preemption panels",
    "generation_tokens": "the throughput panels",
    "prompt_tokens": "the prompt-throughput panels",
    "request_success": "the finished-by-reason panel",
    "http_requests": "the HTTP panels",
    "prefix_cache_hits": "the prefix-cache hit-rate panel",
    "request_prompt_tokens": "the prompt-length line of the request-length panel",
    "request_generation_tokens": "the generation-length line of the request-length panel",
    "iteration_tokens": "the tokens-per-step panel",
}


def dashboards(v: Vocabulary) -> list[Dashboard]:
    built = [overview(v), instance(v), kv_cache(v), failures(v)]
    # A row whose signals all lack on this release (a feature the server does not run)
    # disappears with its panels, and so would a dashboard left without any.
    kept = [dataclasses.replace(d, rows=tuple(r for r in d.rows if r.panels)) for d in built]
    kept = [d for d in kept if d.rows]
    siblings = tuple((d.key, d.title) for d in kept)
    return [dataclasses.replace(d, siblings=siblings) for d in kept]
