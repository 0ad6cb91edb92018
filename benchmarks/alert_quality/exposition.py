"""A simulated replica's `/metrics`: the real vLLM 0.32 exposition (the fleet benchmark's template)
filled with what the replica model observed, bucketed exactly as vLLM's histograms bucket them.
Families the model does not simulate stay at a fresh server's values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..fleet.exposition import Histogram, Template, load_template
from .replica import Replica

# vLLM histogram -> the replica's observations it is made of.
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "time_to_first_token",
    "vllm:inter_token_latency_seconds": "inter_token_latency",
    "vllm:e2e_request_latency_seconds": "e2e_request_latency",
    "vllm:request_queue_time_seconds": "request_queue_time",
    "vllm:request_prefill_time_seconds": "request_prefill_time",
    "vllm:request_decode_time_seconds": "request_decode_time",
    "vllm:iteration_tokens_total": "iteration_tokens",
    "vllm:request_prompt_tokens": "request_prompt_tokens",
    "vllm:request_generation_tokens": "request_generation_tokens",
    "vllm:request_num_preemptions": "request_preemptions",
}
# Per finished request, from the lists above (one entry each, in the same order).
DERIVED = {
    "vllm:request_inference_time_seconds": lambda s, i: s.request_prefill_time[i] + s.request_decode_time[i],
    "vllm:request_time_per_output_token_seconds": lambda s, i: (
        s.request_decode_time[i] / (s.request_generation_tokens[i] - 1)
        if s.request_generation_tokens[i] > 1
        else 0.0
    ),
}
COUNTERS = {
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:num_preemptions_total": "preemptions",
}
# The benchmark asks for exactly the trace's output length (max_tokens, ignore_eos): every
# request vLLM finishes stops at its length, unless an error burst fails it; a pooling
# (embedding) request finishes `stop`.
FINISHED_REASON = "length"
# The queue limit a refused request hit (an incident's admission rejections).
ADMISSION_REASON = "max_num_queued_reqs"


class ReplicaMetrics:
    def __init__(
        self, model: str, started: float, template: Template | None = None, drain: bool = False
    ) -> None:
        """drain: empty the replica's lists of observations once taken in (a long run's memory
        stays flat; the replica's `seen` then holds only what came since the last update)."""
        t = template or load_template()
        self.drain = drain
        self.renderer = t.renderer(model)
        self.values = np.array([s.captured for s in t.samples], dtype=np.float64)
        created = [s.index for s in t.samples if s.name.endswith("_created")]
        zeroed = [
            s.index
            for s in t.samples
            if t.types.get(s.family) in ("counter", "histogram") and not s.name.endswith("_created")
        ]
        self.values[zeroed] = 0.0
        self.values[created] = started
        self.values[t.find("process_start_time_seconds")] = started
        self.histograms = {family: t.histogram(family) for family in (*HISTOGRAMS, *DERIVED)}
        self.counters = {family: t.find(family) for family in COUNTERS}
        self.finished = t.find("vllm:request_success_total", finished_reason=FINISHED_REASON)
        self.stopped = t.find("vllm:request_success_total", finished_reason="stop")
        self.errored = t.find("vllm:request_success_total", finished_reason="error")
        self.aborted = t.find("vllm:request_success_total", finished_reason="abort")
        self.refused = t.find("vllm:admission_rejections_total", reason=ADMISSION_REASON)
        self.gauges = {
            "running": t.find("vllm:num_requests_running"),
            "waiting": t.find("vllm:num_requests_waiting"),
            # Every request the model holds back waits for a slot or KV blocks.
            "waiting_capacity": t.find("vllm:num_requests_waiting_by_reason", reason="capacity"),
            "kv": t.find("vllm:kv_cache_usage_perc"),
        }
        self._read = dict.fromkeys(HISTOGRAMS.values(), 0)
        self._finished_read = 0

    def update(self, replica: Replica) -> None:
        """Take in what the replica observed since the last update, and its gauges now."""
        s, v = replica.seen, self.values
        for family, attr in HISTOGRAMS.items():
            new = getattr(s, attr)[self._read[attr] :]
            self._read[attr] += len(new)
            self._observe(self.histograms[family], new)
        for family, derive in DERIVED.items():
            # The per-request lists hold the requests finished since the last drain.
            base = self._finished_read if self.drain else 0
            self._observe(
                self.histograms[family],
                [derive(s, i - base) for i in range(self._finished_read, s.finished)],
            )
        self._finished_read = s.finished
        if self.drain:
            for attr in HISTOGRAMS.values():
                del getattr(s, attr)[:]
            self._read = dict.fromkeys(HISTOGRAMS.values(), 0)
            replica.done.clear()
        for family, attr in COUNTERS.items():
            v[self.counters[family]] = getattr(s, attr)
        v[self.finished] = s.finished - s.stopped
        v[self.stopped] = s.stopped
        v[self.errored] = s.errored
        v[self.aborted] = s.aborted
        v[self.refused] = s.refused
        g = self.gauges
        v[g["running"]] = replica.num_running
        v[g["waiting"]] = v[g["waiting_capacity"]] = replica.num_waiting
        v[g["kv"]] = replica.kv_cache_usage

    def render(self) -> str:
        return self.renderer.render(self.values)

    def _observe(self, hist: Histogram, observed: list[float]) -> None:
        if not observed:
            return
        values = np.asarray(observed, dtype=float)
        self.values[hist.buckets] += cumulative(hist.bounds, values)
        self.values[hist.count] += len(values)
        self.values[hist.sum] += float(values.sum())


def cumulative(bounds: Sequence[float], observed: Sequence[float]) -> np.ndarray:
    """Cumulative bucket counts of `observed` for finite `bounds`, +Inf last, as a Prometheus
    histogram counts them (le is inclusive: a value equal to a bound lands in that bucket)."""
    slots = np.searchsorted(np.asarray(bounds, dtype=float), np.asarray(observed, dtype=float), side="left")
    return np.cumsum(np.bincount(slots, minlength=len(bounds) + 1))
