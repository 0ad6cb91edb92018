"""A simple load model that advances one engine's counters, histograms and gauges lazily, when it is
scraped: Poisson finished requests, latencies and token counts in the real buckets by a multinomial
draw over log-normal bucket probabilities. The profiles are data in profiles.yaml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from .exposition import Histogram, Template

PROFILES = Path(__file__).resolve().parent / "profiles.yaml"


def load_profiles(path: Path = PROFILES) -> dict:
    return yaml.safe_load(path.read_text())


# Distributions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LogNormal:
    median: float
    sigma: float

    def cdf(self, x: float) -> float:
        if x <= 0:
            return 0.0
        return 0.5 * (1 + math.erf((math.log(x) - math.log(self.median)) / (self.sigma * math.sqrt(2))))

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)

    @property
    def cv(self) -> float:
        return math.sqrt(math.exp(self.sigma**2) - 1)


@dataclass(frozen=True)
class Fixed:
    value: float

    def cdf(self, x: float) -> float:
        return 1.0 if x >= self.value else 0.0

    mean = property(lambda self: self.value)
    cv = 0.0


@dataclass(frozen=True)
class Mixture:
    parts: tuple[tuple[float, LogNormal], ...]

    def cdf(self, x: float) -> float:
        return sum(w * d.cdf(x) for w, d in self.parts)

    @property
    def mean(self) -> float:
        return sum(w * d.mean for w, d in self.parts)

    @property
    def cv(self) -> float:
        second = sum(w * d.mean**2 * (1 + d.cv**2) for w, d in self.parts)
        return math.sqrt(max(second - self.mean**2, 0.0)) / self.mean


def lognormal(spec: dict, scale: float = 1.0) -> LogNormal:
    return LogNormal(spec["median"] * scale, spec["sigma"])


def bucket_probabilities(dist, bounds: tuple[float, ...]) -> np.ndarray:
    """Probability of each bucket, non-cumulative, +Inf last."""
    cdf = [dist.cdf(b) for b in bounds] + [1.0]
    probs = np.diff([0.0, *cdf])
    probs = np.clip(probs, 0.0, None)
    return probs / probs.sum()


# Where things live in an engine's value vector ------------------------------------------

PER_REQUEST = (
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_n",
    "vllm:request_params_max_tokens",
    "vllm:request_prefill_kv_computed_tokens",
    "http_request_duration_highr_seconds",
)


@dataclass
class Layout:
    template: Template
    per_request: dict[str, Histogram] = field(default_factory=dict)
    handler_duration: dict[str, Histogram] = field(default_factory=dict)
    idx: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, template: Template, profiles: dict) -> Layout:
        lay = cls(template)
        for family in PER_REQUEST:
            lay.per_request[family] = template.histogram(family)
        lay.itl = template.histogram("vllm:inter_token_latency_seconds")
        lay.iteration = template.histogram("vllm:iteration_tokens_total")
        lay.preemptions_hist = template.histogram("vllm:request_num_preemptions")
        for handler in profiles["handlers"]:
            lay.handler_duration[handler] = template.histogram(
                "http_request_duration_seconds", handler=handler
            )
        f = template.find
        lay.idx = {
            "running": f("vllm:num_requests_running"),
            "waiting": f("vllm:num_requests_waiting"),
            "waiting_capacity": f("vllm:num_requests_waiting_by_reason", reason="capacity"),
            "kv": f("vllm:kv_cache_usage_perc"),
            "prefix_queries": f("vllm:prefix_cache_queries_total"),
            "prefix_hits": f("vllm:prefix_cache_hits_total"),
            "preemptions": f("vllm:num_preemptions_total"),
            "prompt_tokens": f("vllm:prompt_tokens_total"),
            "prompt_computed": f("vllm:prompt_tokens_by_source_total", source="local_compute"),
            "prompt_cache_hit": f("vllm:prompt_tokens_by_source_total", source="local_cache_hit"),
            "prompt_cached": f("vllm:prompt_tokens_cached_total"),
            "prompt_cached_device": f("vllm:prompt_tokens_cached_by_source_total", source="device"),
            "generation_tokens": f("vllm:generation_tokens_total"),
            "flops": f("vllm:estimated_flops_per_gpu_total"),
            "read_bytes": f("vllm:estimated_read_bytes_per_gpu_total"),
            "write_bytes": f("vllm:estimated_write_bytes_per_gpu_total"),
            "cpu": f("process_cpu_seconds_total"),
            "rss": f("process_resident_memory_bytes"),
            "start_time": f("process_start_time_seconds"),
            "http_4xx": f("http_requests_total", handler="/v1/completions", status="4xx"),
        }
        lay.reasons = [
            f("vllm:request_success_total", finished_reason=r) for r in profiles["finished_reasons"]
        ]
        lay.http_2xx = {h: f("http_requests_total", handler=h, status="2xx") for h in profiles["handlers"]}
        lay.request_size = {
            h: (f("http_request_size_bytes_count", handler=h), f("http_request_size_bytes_sum", handler=h))
            for h in profiles["handlers"]
        }
        lay.response_size = {
            h: (f("http_response_size_bytes_count", handler=h), f("http_response_size_bytes_sum", handler=h))
            for h in profiles["handlers"]
        }
        lay.gc = [
            s.index
            for s in template.samples
            if s.name.startswith("python_gc_") and "uncollectable" not in s.name
        ]
        lay.created = [s.index for s in template.samples if s.name.endswith("_created")]
        # Counters and histograms start at zero (a freshly started engine); the rest keeps
        # the captured value.
        lay.zeroed = [
            s.index
            for s in template.samples
            if (
                template.types.get(s.family) in ("counter", "histogram", "summary")
                and s.index not in lay.created
            )
        ]
        return lay


# One engine -----------------------------------------------------------------------------


@dataclass
class Profile:
    """What one engine's requests look like, resolved from its model and condition."""

    rate: float
    dists: dict[str, object]
    itl: LogNormal
    prompt: LogNormal
    generation: LogNormal
    preemptions_per_request: float
    condition: str | None
    spec: dict
    model: dict


def resolve_profile(profiles: dict, model: str, condition: str | None) -> Profile:
    m = profiles["models"][model]
    cond = profiles["conditions"][condition] if condition else {}
    ttft = lognormal(m["ttft"])
    itl = lognormal(m["itl"])
    prompt = lognormal(m["prompt_tokens"])
    generation = lognormal(m["generation_tokens"])
    queue = lognormal(cond["queue_time"]) if "queue_time" in cond else LogNormal(0.01, 1.0)
    if condition == "kv_saturated":
        queue = LogNormal(0.1, 0.8)  # preempted requests wait to be rescheduled
    prefill = ttft
    if condition == "high_ttft":
        slow = lognormal(cond["slow_ttft"])
        share = cond["slow_share"]
        prefill = Mixture(((1 - share, ttft), (share, slow)))
    first_token = prefill if queue.median < 0.05 else LogNormal(ttft.median + queue.median, 0.45)
    decode = LogNormal(generation.median * itl.median, 0.75)
    inference = LogNormal(decode.median + ttft.median, 0.75)
    e2e = LogNormal(decode.median + ttft.median + queue.median, 0.75)
    if condition == "high_ttft":
        e2e = Mixture(((1 - share, e2e), (share, LogNormal(e2e.median + slow.median, 0.6))))
    dists = {
        "vllm:time_to_first_token_seconds": first_token,
        "vllm:e2e_request_latency_seconds": e2e,
        "vllm:request_queue_time_seconds": queue,
        "vllm:request_inference_time_seconds": inference,
        "vllm:request_prefill_time_seconds": prefill,
        "vllm:request_decode_time_seconds": decode,
        "vllm:request_time_per_output_token_seconds": LogNormal(itl.median, 0.25),
        "vllm:request_prompt_tokens": prompt,
        "vllm:request_generation_tokens": generation,
        "vllm:request_max_num_generation_tokens": Fixed(m["max_tokens"]),
        "vllm:request_params_n": Fixed(1),
        "vllm:request_params_max_tokens": Fixed(m["max_tokens"]),
        "vllm:request_prefill_kv_computed_tokens": LogNormal(
            prompt.median * (1 - profiles["prefix_cache_hit"]), prompt.sigma
        ),
        "http_request_duration_highr_seconds": e2e,
    }
    return Profile(
        rate=m["rate"] * cond.get("rate_factor", 1.0),
        dists=dists,
        itl=itl,
        prompt=prompt,
        generation=generation,
        preemptions_per_request=cond.get("preemptions_per_request", 0.0),
        condition=condition,
        spec=cond,
        model=m,
    )


class Engine:
    def __init__(
        self,
        layout: Layout,
        profiles: dict,
        profile: Profile,
        model: str,
        rng: np.random.Generator,
        start: float,
        phase: float,
    ) -> None:
        self.layout = layout
        self.p = profile
        self.profiles = profiles
        self.rng = rng
        self.start = start
        self.updated = start
        self.phase = phase
        self.renderer = layout.template.renderer(model)
        self.values = np.array([s.captured for s in layout.template.samples], dtype=np.float64)
        self.values[layout.zeroed] = 0.0
        self.values[layout.created] = start
        self.values[layout.idx["start_time"]] = start
        self.probs = {
            family: bucket_probabilities(profile.dists[family], layout.per_request[family].bounds)
            for family in PER_REQUEST
        }
        self.itl_probs = bucket_probabilities(profile.itl, layout.itl.bounds)
        running = self._mean_running()
        self.iteration = LogNormal(max(running, 1.0) * 1.5, 0.8)
        self.iteration_probs = bucket_probabilities(self.iteration, layout.iteration.bounds)
        self.duration_probs = bucket_probabilities(
            profile.dists["vllm:e2e_request_latency_seconds"],
            next(iter(layout.handler_duration.values())).bounds,
        )
        self._gauges(start)

    @property
    def stalled(self) -> bool:
        return self.p.condition == "stalled"

    def _mean_running(self) -> float:
        return self.p.rate * self.p.dists["vllm:e2e_request_latency_seconds"].mean

    def rate_at(self, now: float) -> float:
        swing = self.profiles["rate_swing"] * math.sin(
            2 * math.pi * now / self.profiles["rate_period_s"] + self.phase
        )
        return self.p.rate * (1 + swing)

    def exposition(self, now: float) -> str:
        self.advance(now)
        return self.renderer.render(self.values)

    def advance(self, now: float) -> None:
        dt = now - self.updated
        if dt <= 0:
            return
        self.updated = now
        v, lay, rng = self.values, self.layout, self.rng
        v[lay.idx["cpu"]] += dt * 0.9
        v[lay.gc] += rng.poisson(3.0 * dt, size=len(lay.gc))
        if not self.stalled:
            self._requests(rng.poisson(self.rate_at(now) * dt), dt)
        self._gauges(now)

    def _observe(self, hist: Histogram, probs: np.ndarray, n: int, mean: float, cv: float) -> float:
        """Add n observations; return their sum."""
        v = self.values
        v[hist.buckets] += np.cumsum(self.rng.multinomial(n, probs))
        v[hist.count] += n
        total = n * mean * max(0.0, 1 + cv * self.rng.standard_normal() / math.sqrt(n)) if n else 0.0
        v[hist.sum] += total
        return total

    def _requests(self, n: int, dt: float) -> None:
        v, lay, rng, p = self.values, self.layout, self.rng, self.p
        sums = {}
        if n:
            for family in PER_REQUEST:
                dist = p.dists[family]
                sums[family] = self._observe(
                    lay.per_request[family], self.probs[family], n, dist.mean, dist.cv
                )
            preempted = rng.poisson(p.preemptions_per_request, size=n)
            h = lay.preemptions_hist
            v[h.buckets] += np.cumsum(
                np.bincount(np.searchsorted(h.bounds, preempted), minlength=len(h.bounds) + 1)
            )
            v[h.count] += n
            v[h.sum] += preempted.sum()
            v[lay.idx["preemptions"]] += preempted.sum()
            for index, count in zip(
                lay.reasons, rng.multinomial(n, list(self.profiles["finished_reasons"].values())), strict=True
            ):
                v[index] += count
            handlers = self.profiles["handlers"]
            for handler, count in zip(handlers, rng.multinomial(n, list(handlers.values())), strict=True):
                v[lay.http_2xx[handler]] += count
                d = lay.handler_duration[handler]
                v[d.buckets] += np.cumsum(rng.multinomial(count, self.duration_probs))
                v[d.count] += count
                v[d.sum] += count * p.dists["vllm:e2e_request_latency_seconds"].mean
                c, s = lay.request_size[handler]
                v[c] += count
                v[s] += count * 350.0
                c, s = lay.response_size[handler]
                v[c] += count
                v[s] += count * 1800.0
        prompt = sums.get("vllm:request_prompt_tokens", 0.0)
        generated = sums.get("vllm:request_generation_tokens", 0.0)
        hit = self.profiles["prefix_cache_hit"]
        v[lay.idx["prompt_tokens"]] += prompt
        v[lay.idx["generation_tokens"]] += generated
        v[lay.idx["prefix_queries"]] += prompt
        v[lay.idx["prefix_hits"]] += prompt * hit
        v[lay.idx["prompt_computed"]] += prompt * (1 - hit)
        v[lay.idx["prompt_cache_hit"]] += prompt * hit
        v[lay.idx["prompt_cached"]] += prompt * hit
        v[lay.idx["prompt_cached_device"]] += prompt * hit
        v[lay.idx["flops"]] += (prompt + generated) * 2 * 8e9
        v[lay.idx["read_bytes"]] += generated * 16e9
        v[lay.idx["write_bytes"]] += (prompt + generated) * 131072
        v[lay.idx["http_4xx"]] += rng.poisson(self.profiles["http_4xx"] * n)
        tokens = max(int(generated) - n, 0)
        self._observe(lay.itl, self.itl_probs, tokens, p.itl.mean, p.itl.cv)
        steps = int(dt / p.itl.median)
        self._observe(lay.iteration, self.iteration_probs, steps, self.iteration.mean, self.iteration.cv)

    def _gauges(self, now: float) -> None:
        v, idx, rng, spec = self.values, self.layout.idx, self.rng, self.p.spec
        cap = self.profiles["max_num_seqs"]
        condition = self.p.condition
        if condition == "stalled":
            running, waiting, kv = spec["running"], spec["waiting"], spec["kv_usage"]
        elif condition == "throttled":
            grown = int((now - self.start) / spec["queue_growth_s"])
            running, waiting, kv = spec["running"], min(1 + grown, spec["queue_max"]), spec["kv_usage"]
        else:
            mean = self._mean_running() * self.rate_at(now) / self.p.rate
            running = int(np.clip(rng.normal(mean, math.sqrt(max(mean, 1.0))), 0, cap))
            waiting = 0
            kv = float(
                np.clip(self.p.model["kv_usage"] * running / max(mean, 1.0) + rng.normal(0, 0.02), 0.02, 0.7)
            )
            if condition == "kv_saturated":
                low, high = spec["waiting"]
                waiting = int(rng.integers(low, high + 1))
                kv = spec["kv_usage"] + rng.normal(0, 0.0002)
        v[idx["running"]] = running
        v[idx["waiting"]] = waiting
        v[idx["waiting_capacity"]] = waiting
        v[idx["kv"]] = kv
        v[idx["rss"]] = 6.4e8 + rng.normal(0, 2e6)
