"""What a healthy fleet does without any incident: a small share of failed requests, client aborts,
client timeouts and a daily rhythm of load, so healthy time is noisy as a real fleet's is. A
scenario's `background:` sets them; the README gives each default's source.
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
