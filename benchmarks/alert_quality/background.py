"""What a healthy fleet does without any incident: a small share of failed requests, client
aborts and a daily rhythm of load, so healthy time is noisy as a real fleet's is. A scenario's
`background:` sets them (all three 0: the sterile fleet of earlier runs).

The defaults, and where they come from:
- `error_share` 0.05% of the requests a replica receives fail with a 5xx. Public API-wide 5xx
  shares over a year, outages included, are 0.28% to 0.67% per provider (Portkey, "LLMs in
  Prod" part 2, 2025: Bedrock 0.28%, Gemini 0.32%, Anthropic 0.56%, Groq 0.67%); a healthy
  replica between outages fails fewer, and a fleet healthy by its own 99.9% objective fails
  under 0.1%: half of that is a fleet inside its SLO that still fails requests every minute.
- `abort_share` 1.8% of the requests are abandoned by their client before they finish: in
  BurstGPT (Wang et al. 2024, 10.31M Azure OpenAI requests; repository HPMLL/BurstGPT, its
  README) 1.78% and 1.92% of the requests of its two files ended with no response token, a
  failure of no stated cause; this benchmark takes that share for what a vLLM server counts as
  client aborts (its server errors are `error_share`). The client gives up after a time drawn
  from an exponential of mean `abort_after` (10 s, this project's assumption); vLLM counts it
  `finished_reason="abort"` and records no per-request latency for it.
- `client_timeout` 600 s: a client gives up on a request still queued after it, and vLLM
  aborts it (the OpenAI Python client's default timeout is 10 minutes: its README, "Timeouts").
  A queue of an overloaded replica holds at most that much waiting; what it holds drains
  after the overload at the replica's spare rate.
- `rhythm` 0.35: each model's rate follows the day, 1 + 0.35 sin over 24 hours with its peak at
  14:00 (twice the night's load in the busy hours; DynamoLLM, HPCA 2025, shows such daily
  swings in Azure's week-long LLM trace of 2024; the amplitude is this project's assumption).
  The traces keep their own minute-to-minute bursts and lulls on top of it.
The slow tail of the time to first token comes from the traces' own prompt lengths (up to the
engine's context), queued behind each other in the busy hours.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from vllm_obs.errors import BundleError

DEFAULT_START_HOUR = 9.0  # a run starts at 09:00 unless its scenario says otherwise
PEAK_HOUR = 14.0
USERS_AVAILABILITY = 0.999  # the users' availability promise the error budgets are of


@dataclass(frozen=True)
class Background:
    error_share: float = 0.0005
    abort_share: float = 0.018
    abort_after: float = 10.0  # seconds, the mean of an abandoning client's patience
    client_timeout: float = 600.0  # seconds a client waits for a queued request (0: forever)
    rhythm: float = 0.35  # the daily swing of the load around its mean

    @classmethod
    def parse(cls, data: Any, where: str) -> Background:
        if not isinstance(data, dict):
            raise BundleError(f"{where} must be a mapping, like {{error_share: 0.0005, abort_share: 0.018}}.")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BundleError(
                f"{where} has the unknown key(s) {', '.join(unknown)}; use {', '.join(sorted(known))}."
            )
        for key, value in data.items():
            bad = not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0
            if bad or (key.endswith("_share") or key == "rhythm") and value >= 1:
                raise BundleError(
                    f"{where}'s {key} must be a number from 0 (a share below 1), not {value!r}."
                )
        return cls(**{k: float(v) for k, v in data.items()})

    def load(self, t, start_hour: float):
        """The load at simulated second(s) t relative to the mean (1 on average over a day)."""
        hour = start_hour + np.asarray(t) / 3600.0
        return 1.0 + self.rhythm * np.cos(2 * np.pi * (hour - PEAK_HOUR) / 24.0)
