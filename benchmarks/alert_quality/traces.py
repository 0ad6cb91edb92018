"""The public Azure LLM inference traces (an hour each of a conversation and a code service): arrival
times with prompt and output lengths, the traffic the benchmark replays. Not part of the project:
they live in ../shared/traces/ (or under VLLM_OBS_SHARED); the README says how to fetch them.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

TRACES = ("conv", "code")
FILE = "AzureLLMInferenceTrace_{name}.csv"
REPO = Path(__file__).resolve().parents[2]


class TraceMissing(Exception):
    """The trace files are not on this machine (a user's clone): say so in one line and skip."""


@dataclass(frozen=True)
class Trace:
    name: str
    arrival: np.ndarray  # seconds after the first request, ascending
    prompt: np.ndarray  # prompt tokens ("ContextTokens")
    output: np.ndarray  # generated tokens ("GeneratedTokens")

    @property
    def span(self) -> float:
        return float(self.arrival[-1])

    @property
    def mean_rate(self) -> float:
        return len(self.arrival) / self.span

    def per_minute(self) -> np.ndarray:
        """Requests per second in each whole minute of the trace."""
        minutes = int(self.span // 60)
        counts = np.bincount((self.arrival // 60).astype(int), minlength=minutes + 1)[:minutes]
        return counts / 60.0

    def scaled_lengths(self, divide: float, max_model_len: int) -> Trace:
        """Lengths divided (a small model's context), each request capped to fit max_model_len
        with at least one prompt and one output token, arrivals unchanged."""
        prompt = np.maximum(1, np.round(self.prompt / divide)).astype(int)
        output = np.maximum(1, np.round(self.output / divide)).astype(int)
        output = np.minimum(output, max_model_len - 1)
        prompt = np.minimum(prompt, max_model_len - output)
        return Trace(self.name, self.arrival, prompt, output)


def trace_dir() -> Path:
    return Path(os.environ.get("VLLM_OBS_SHARED", REPO.parent / "shared")) / "traces"


def load(name: str) -> Trace:
    if name not in TRACES:
        raise ValueError(f"no trace {name!r}; the traces are {', '.join(TRACES)}")
    path = trace_dir() / FILE.format(name=name)
    if not path.is_file():
        raise TraceMissing(
            f"{path} is absent (no ../shared beside this clone): fetch the Azure LLM inference traces "
            "as benchmarks/alert_quality/README.md says, or point VLLM_OBS_SHARED at their parent folder"
        )
    stamps, prompt, output = [], [], []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            # 7 fractional digits (100 ns); datetime reads 6.
            stamps.append(datetime.fromisoformat(row["TIMESTAMP"][:26]).timestamp())
            prompt.append(int(row["ContextTokens"]))
            output.append(int(row["GeneratedTokens"]))
    arrival = np.asarray(stamps) - stamps[0]
    return Trace(name, arrival, np.asarray(prompt), np.asarray(output))


@dataclass(frozen=True)
class Arrivals:
    time: np.ndarray  # seconds from the start, ascending
    prompt: np.ndarray
    output: np.ndarray


def arrivals(
    trace: Trace,
    rate: float,
    duration: float,
    seed: int,
    load: Callable[[np.ndarray], np.ndarray] | None = None,
    peak: float = 1.0,
) -> Arrivals:
    """`duration` seconds of requests at `rate` per second on average, made of the trace: copies of the
    hour at random offsets, laid over each other and thinned to the rate, keep its bursts and lulls and
    each request's lengths. `load` (of the arrival times, at most `peak`) scales the rate: the day's rhythm.
    """
    rng = np.random.default_rng(seed)
    peak = peak if load is not None else 1.0
    rate *= peak
    copies = max(1, math.ceil(rate / trace.mean_rate))
    laps = math.ceil(duration / trace.span) + 1
    times, index = [], []
    for _ in range(copies):
        shifted = (trace.arrival + rng.uniform(0, trace.span)) % trace.span
        for lap in range(laps):
            times.append(shifted + lap * trace.span)
            index.append(np.arange(len(trace.arrival)))
    t, i = np.concatenate(times), np.concatenate(index)
    share = rate / (copies * trace.mean_rate)
    if load is not None:
        share = share * np.minimum(load(t), peak) / peak
    keep = (t < duration) & (rng.random(len(t)) < share)
    t, i = t[keep], i[keep]
    order = np.argsort(t, kind="stable")
    return Arrivals(t[order], trace.prompt[i[order]], trace.output[i[order]])
