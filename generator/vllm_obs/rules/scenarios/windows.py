"""How Prometheus 2 reads a burn tier from counters sampled every minute (or five): the recorded
5-minute rates, the windows averaged from them, the floors and a young Prometheus's reading, `for` and
`keep_firing_for`. Cases use it to judge a tier only where its state is certain."""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import accumulate


@dataclass(frozen=True)
class Traffic:
    """Events in each minute from minute 0, and the minute `up` is scraped from (None: never)."""

    total: tuple[float, ...]
    bad: tuple[float, ...]
    scraped_from: int | None = None

    @staticmethod
    def parts(per_min: float, parts: list[tuple[int, float]], span: int, scraped_from: int | None = None):
        """`per_min` events a minute, `bad` of them bad from each (minute, bad) of `parts` on."""
        bad = [next(b for at, b in reversed(parts) if at <= m) for m in range(span)]
        return Traffic((per_min,) * span, tuple(bad), scraped_from)


@dataclass(frozen=True)
class Tier:
    """A tier's thresholds, windows and holds, in minutes and seconds as its rule has them."""

    limit: float
    long: int
    short: int
    floor: float
    min_bad: float
    young: float | None  # seconds of history its long ratio is read over while younger, None: no guard
    for_: int
    keep: int

    def scaled(self, by: float) -> Tier:
        """Every threshold `by` times harder to reach (below 1: easier); not the history guard,
        whose seconds are exact (no rate rounds them)."""
        return replace(self, limit=self.limit * by, floor=self.floor * by, min_bad=self.min_bad * by)


def _rate(counts: list[float], k: int, interval: int) -> float | None:
    """rate(x[5m]) at minute k, x sampled every `interval` minutes (Prometheus 2: a closed range)."""
    start = max(0, k - 5)
    times = range(start + (-start) % interval, k + 1, interval)  # the samples in [k - 5, k]
    if len(times) < 2:
        return None
    first, last = times[0], times[-1]
    increase, sampled = counts[last] - counts[first], (last - first) * 60.0
    to_start = (first - (k - 5)) * 60.0
    if increase > 0 and counts[first] >= 0:
        to_start = min(to_start, sampled * counts[first] / increase)
    threshold = 1.1 * sampled / (len(times) - 1)
    stretched = sampled + (to_start if to_start < threshold else threshold / 2.2)
    return increase * stretched / sampled / 300


class Windows:
    """The recorded series of one SLO for `traffic`, evaluated every `every` minutes."""

    def __init__(self, traffic: Traffic, every: int = 1, interval: int = 1) -> None:
        self.t, self.every, self.interval = traffic, every, interval
        total = [0.0, *accumulate(traffic.total)]
        bad = [0.0, *accumulate(traffic.bad)]
        self.span = len(traffic.total)
        self.rates: dict[int, tuple[float, float]] = {}
        for k in range(0, self.span, every):
            b, n = _rate(bad, k, interval), _rate(total, k, interval)
            if b is not None and n is not None:
                self.rates[k] = (b, n)
        # Running sums over the evaluations (bad, total, how many), for any window in one step.
        self._sums = [(0.0, 0.0, 0)]
        for k in range(0, self.span, every):
            b, n = self.rates.get(k, (0.0, 0.0))
            last = self._sums[-1]
            self._sums.append((last[0] + b, last[1] + n, last[2] + (k in self.rates)))
        self._timelines: dict[Tier, list[bool]] = {}

    def _window(self, m: int, window: int) -> tuple[float, float, int]:
        """Sums of the recorded rates over the evaluations in [m - window, m]."""
        hi = m // self.every + 1
        lo = max(0, -(-(m - window) // self.every))
        a, b = self._sums[hi], self._sums[lo]
        return a[0] - b[0], a[1] - b[1], a[2] - b[2]

    def ratio(self, m: int, window: int) -> float | None:
        if window == 5:
            b, n = self.rates.get(m, (0.0, 0.0))
            return b / n if n > 0 else None
        bad, total, _ = self._window(m, window)
        return bad / total if total > 0 else None

    def events(self, m: int, window: int, bad: bool = False) -> float:
        b, n, count = self._window(m, window)
        return (b if bad else n) / count * window * 60 if count else 0.0

    def per_second(self, m: int, window: int, bad: bool = False) -> float:
        """The recorded events a second, averaged over `window` (avg_over_time)."""
        b, n, count = self._window(m, window)
        return (b if bad else n) / count if count else 0.0

    def history(self, m: int, window: int) -> float | None:
        """Seconds Prometheus has scraped, as the tiers read it (up to `window`)."""
        start = self.t.scraped_from
        if start is None or m < start:
            return None
        first = next(k for k in range(max(start, m - window), m + 1) if k % self.every == 0)
        return (m - (first - first % self.interval)) * 60.0

    def holds(self, m: int, tier: Tier) -> bool:
        """The tier's condition at minute m; a young Prometheus reads its long ratio over
        `tier.young` seconds and counts the bad events of the seconds it has held."""
        long, short = self.ratio(m, tier.long), self.ratio(m, tier.short)
        history = self.history(m, tier.long) if tier.young is not None else None
        return (
            long is not None
            and short is not None
            and long > tier.limit
            and short > tier.limit
            and self.events(m, tier.long) >= tier.floor
            and self.events(m, tier.long, bad=True) >= tier.min_bad
            and not (history is not None and tier.young and long * history / tier.young <= tier.limit)
            and not (history is not None and self.per_second(m, tier.long, bad=True) * history < tier.min_bad)
        )

    def firing(self, m: int, tier: Tier) -> bool:
        """Whether the tier's alert fires at minute m (`for`, then `keep_firing_for`)."""
        if tier not in self._timelines:
            self._timelines[tier] = self._timeline(tier)
        return self._timelines[tier][m // self.every]

    def _timeline(self, tier: Tier) -> list[bool]:
        out, active, fired, since_false = [], None, False, None
        for k in range(0, self.span, self.every):
            if self.holds(k, tier):
                active = k if active is None else active
                since_false = None
                fired = fired or k - active >= tier.for_
            elif fired:
                since_false = k if since_false is None else since_false
                if k - since_false >= tier.keep:
                    active, fired, since_false = None, False, None
            else:
                active = None
            out.append(fired)
        return out

    def certain(self, m: int, tier: Tier) -> bool:
        """The tier's state at m is the same with every threshold 3% harder or easier."""
        state = self.firing(m, tier)
        return all(self.firing(m, tier.scaled(by)) == state for by in (0.97, 1.03))
