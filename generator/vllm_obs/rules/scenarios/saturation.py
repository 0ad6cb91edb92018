"""promtool cases of saturation: the queue, the scheduler's limits, the KV cache and preemptions,
each threshold and traffic floor from both sides."""

from __future__ import annotations

from ...promql import number, seconds
from ..expressions import PEAK_WINDOW, floor_judged_from, floor_per_minute, queue_threshold
from ..model import Alert
from ..scenario_kit import NEAR_SIDES, NEIGHBOUR, Case, Check, Expect, Inputs, boundary, minutes, series_text

# Minutes a case runs past its alert's `for`, so its last checks come after that has elapsed.
PAST_FOR = 5


def queue_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    threshold, _ = queue_threshold(inputs.cfg.alerts)
    sig = inputs.res["requests_waiting"]
    span = minutes(rule.for_) + PAST_FOR
    fire = Case(f"VllmQueueDepthHigh fires after {rule.for_} with {threshold + 1:g} waiting")
    # Two engines (data-parallel ranks) of one replica: their queues add up.
    if sig.has_label("engine"):
        inputs.gauge(fire, sig, (threshold + 1) / 2, span, engine="0")
        inputs.gauge(fire, sig, (threshold + 1) / 2, span, engine="1")
    else:
        inputs.gauge(fire, sig, threshold + 1, span)
    inputs.gauge(fire, sig, 0, span, instance=NEIGHBOUR)
    fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, inputs.result(), threshold + 1)])
    silent = Case(f"VllmQueueDepthHigh stays silent at exactly {threshold:g} waiting")
    inputs.gauge(silent, sig, threshold, span)
    silent.checks = [Check(span - 1, rule.name, [])]
    # A peak's queue that drains a scrape before `for` has passed: never a ticket.
    held = minutes(rule.for_)
    peak = Case(f"VllmQueueDepthHigh stays silent through a peak that drains within {rule.for_}")
    values = f"{number(threshold + 1)}+0x{held - 1} 0+0x{span - held}"
    peak.add(series_text(sig.name, inputs.labels(signal=sig)), values)
    if sig.has_label("engine"):
        peak.add(series_text(sig.name, inputs.labels(signal=sig, engine="1")), f"0+0x{span}")
    peak.checks = [Check(m, rule.name, []) for m in (held - 1, held, span - 1)]
    return [fire, silent, peak]


def throttled_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    a = inputs.cfg.alerts
    span = minutes(rule.for_) + 15
    waiting, running, kv = (
        inputs.res["requests_waiting"],
        inputs.res["requests_running"],
        inputs.res["kv_cache_usage"],
    )
    by_reason = (
        inputs.res["requests_waiting_by_reason"] if inputs.res.has("requests_waiting_by_reason") else None
    )

    def queue(case: Case, values: str) -> None:
        """Requests waiting, all of them for capacity where the source splits them by reason."""
        case.add(series_text(waiting.name, inputs.labels(signal=waiting)), values)
        if by_reason is not None:
            case.add(series_text(by_reason.name, inputs.labels(signal=by_reason, reason="capacity")), values)

    # KV usage a fifth either side of the bound.
    low, high = (min(1.0, round(a.throttled_kv_usage_below * scale, 6)) for _, scale in reversed(NEAR_SIDES))
    # Running requests at the limit: alerts.max_num_seqs, or (with 0) a steady count at its own peak.
    at_limit = a.max_num_seqs if a.max_num_seqs > 0 else 4
    fire = Case(f"VllmSchedulerThrottled fires when the queue grows for {rule.for_} while KV usage is low")
    queue(fire, f"1+1x{span}")
    inputs.gauge(fire, running, at_limit, span)
    inputs.gauge(fire, kv, low, span)
    start, fire_at = 1, 1 + minutes(rule.for_)
    fire.checks = boundary(rule.name, start, rule.for_, [Expect(rule, inputs.result(), 1 + fire_at)])
    memory = Case("VllmSchedulerThrottled stays silent when the KV cache, not the scheduler, is the limit")
    queue(memory, f"1+1x{span}")
    inputs.gauge(memory, running, at_limit, span)
    inputs.gauge(memory, kv, high, span)
    memory.checks = [Check(span - 1, rule.name, [])]
    flat = Case("VllmSchedulerThrottled stays silent while the queue holds steady")
    queue(flat, f"5+0x{span}")
    inputs.gauge(flat, running, at_limit, span)
    inputs.gauge(flat, kv, low, span)
    flat.checks = [Check(span - 1, rule.name, [])]
    # Below the limit (alerts.max_num_seqs, or the hour's peak): the queue waits on something else.
    below = Case("VllmSchedulerThrottled stays silent while running requests are below the limit")
    queue(below, f"1+1x{span}")
    if a.max_num_seqs > 0:
        inputs.gauge(below, running, at_limit - 1, span)
    else:
        limit = 8  # the hour's peak, then half of it
        below.add(
            series_text(running.name, inputs.labels(signal=running)),
            f"{number(limit)}+0x4 {number(limit / 2)}+0x{span - 5}",
        )
    inputs.gauge(below, kv, low, span)
    below.checks = [Check(span - 1, rule.name, [])]
    # A queue that grew and then holds is still throttled for the rest of alerts.throttled_window:
    # the trend is over the whole window.
    window = minutes(a.throttled_window)
    grew = fire_at + 2
    holds = Case(
        f"VllmSchedulerThrottled keeps firing over {a.throttled_window} after the queue stops growing"
    )
    queue(holds, f"1+1x{grew} {1 + grew}+0x{span + window}")
    inputs.gauge(holds, running, at_limit, span + window)
    inputs.gauge(holds, kv, low, span + window)
    holds.checks = [Check(grew + window - 2, rule.name, [Expect(rule, inputs.result(), 1 + grew)])]
    # A queue that grows with nothing running at all: a stalled engine, not a throttled one.
    nothing = Case("VllmSchedulerThrottled stays silent when the queue grows and nothing runs")
    queue(nothing, f"1+1x{span}")
    inputs.gauge(nothing, running, 0, span)
    inputs.gauge(nothing, kv, low, span)
    nothing.checks = [Check(span - 1, rule.name, [])]
    cases = [fire, memory, flat, below, holds, nothing]
    if by_reason is not None:
        # Deferred requests are held back on purpose (a KV transfer, structured-output
        # compilation): a pile of them is not the scheduler's limit.
        deferred = Case("VllmSchedulerThrottled stays silent when the requests piling up are deferred")
        inputs.ramp(deferred, waiting, 1, 1, span)
        inputs.gauge(deferred, by_reason, 0, span, reason="capacity")
        inputs.ramp(deferred, by_reason, 1, 1, span, reason="deferred")
        inputs.gauge(deferred, running, at_limit, span)
        inputs.gauge(deferred, kv, low, span)
        deferred.checks = [Check(span - 1, rule.name, [])]
        cases.append(deferred)
    if a.max_num_seqs == 0:
        # The running peak is the limit for PEAK_WINDOW: running at half of it is not at the
        # limit until the peak has left the window.
        peak = minutes(PEAK_WINDOW)
        old = Case(f"VllmSchedulerThrottled fires once the running peak is more than {PEAK_WINDOW} old")
        lower = 4
        old.add(
            series_text(running.name, inputs.labels(signal=running)),
            f"{number(2 * lower)}+0x4 {number(lower)}+0x{peak + span}",
        )
        queue(old, f"1+1x{peak + span}")
        inputs.gauge(old, kv, low, peak + span)
        # The peak (minutes 0 to 4) leaves the window at minute 5 + peak.
        old.checks = [
            Check(peak + 4, rule.name, []),
            Check(
                peak + 5 + minutes(rule.for_),
                rule.name,
                [Expect(rule, inputs.result(), 6 + peak + minutes(rule.for_))],
            ),
        ]
        cases.append(old)
    return cases


def kv_pressure_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    threshold = inputs.cfg.alerts.kv_usage_threshold
    sig, waiting = inputs.res["kv_cache_usage"], inputs.res["requests_waiting"]
    span = minutes(rule.for_) + PAST_FOR
    hot = round(threshold + (1 - threshold) / 2, 6)
    engines = sig.has_label("engine")

    def usage(case: Case, value: float) -> None:
        inputs.gauge(case, sig, value, span, engine="0")
        if engines:
            # Max, not sum or average: the second engine's 0.1 must not hide the first.
            inputs.gauge(case, sig, 0.1, span, engine="1")

    # Per engine where the source has engines: the alert names the one that fills.
    labels = {**inputs.result(), "engine": "0"} if engines else inputs.result()
    fire = Case(
        f"VllmKVCachePressure fires after {rule.for_} at {hot:g} while requests wait, for the engine that fills"
    )
    usage(fire, hot)
    inputs.gauge(fire, waiting, 3, span)
    inputs.gauge(fire, sig, 0.1, span, instance=NEIGHBOUR)
    fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, labels, hot)])
    busy = Case(f"VllmKVCachePressure stays silent at {hot:g} while nothing waits and nothing is preempted")
    usage(busy, hot)
    inputs.gauge(busy, waiting, 0, span)
    if inputs.res.has("preemptions"):
        inputs.counter(busy, inputs.res["preemptions"], 0, span)
    busy.checks = [Check(span - 1, rule.name, [])]
    cool = threshold  # exactly at the threshold: `>` must not fire
    silent = Case(f"VllmKVCachePressure stays silent at exactly {cool:g}, requests waiting")
    usage(silent, cool)
    inputs.gauge(silent, waiting, 3, span)
    silent.checks = [Check(span - 1, rule.name, [])]
    # At the production clock (scrape and evaluation every prometheus.scrape_interval): pending
    # until `for` has passed to the scrape, firing at it.
    step = seconds(inputs.cfg.prometheus.scrape_interval)
    clock = Case(
        f"VllmKVCachePressure at the production clock: fires {rule.for_} after the cache fills, not a scrape sooner",
        every=inputs.cfg.prometheus.scrape_interval,
        interval=inputs.cfg.prometheus.scrape_interval,
    )
    usage(clock, hot)
    inputs.gauge(clock, waiting, 3, span)
    hold = seconds(rule.for_ or "0s") / 60
    clock.checks = [
        Check(hold - step / 60, rule.name, []),
        Check(hold, rule.name, [Expect(rule, labels, hot)]),
    ]
    cases = [fire, busy, silent, clock]
    if inputs.res.has("preemptions"):
        preempting = Case(f"VllmKVCachePressure fires at {hot:g} while requests are preempted, none waiting")
        usage(preempting, hot)
        inputs.gauge(preempting, waiting, 0, span)
        inputs.counter(preempting, inputs.res["preemptions"], 5, span)
        # The preemption rate exists from the counter's second sample.
        preempting.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, labels, hot)])
        cases.append(preempting)
    return cases


def kv_filling_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    a = inputs.cfg.alerts
    sig = inputs.res["kv_cache_usage"]
    horizon = seconds(a.kv_predict_horizon) / 60
    # Rise so that the prediction crosses 1 as soon as usage passes the floor.
    step = round(max(0.005, (1 - a.kv_predict_floor) / horizon * 1.25), 4)
    # Start half a step off the floor so no sample lands on it exactly (float noise).
    start = round(max(0.0, a.kv_predict_floor - step * (minutes(a.kv_predict_window) + 2.5)), 4)
    crossing = next(m for m in range(1000) if start + step * m > a.kv_predict_floor + 1e-9)
    span = crossing + minutes(rule.for_) + 3
    fire = Case(f"VllmKVCacheFillingUp fires when usage above {a.kv_predict_floor:g} rises toward full")
    inputs.ramp(fire, sig, start, step, span)
    fire_at = crossing + minutes(rule.for_)
    value = start + step * fire_at
    fire.checks = boundary(rule.name, crossing, rule.for_, [Expect(rule, inputs.result(), value)])
    steady = Case("VllmKVCacheFillingUp stays silent while high usage holds steady")
    inputs.gauge(steady, sig, round((a.kv_predict_floor + 1) / 2, 6), span)
    steady.checks = [Check(span - 1, rule.name, [])]
    return [fire, steady, *_kv_young_rise(rule, inputs)]


def _kv_young_rise(rule: Alert, inputs: Inputs) -> list[Case]:
    """Steady usage over the floor for a whole window, then a rise: it fires once the prediction over
    the whole window crosses full, later than over a shorter one. None where no rise tried shows it."""
    a, sig = inputs.cfg.alerts, inputs.res["kv_cache_usage"]
    window, horizon = minutes(a.kv_predict_window), seconds(a.kv_predict_horizon)
    if window < 2:
        return []  # half the window holds one sample a minute: no slope to read
    tried = (_young_rise(a.kv_predict_floor, window, horizon, k, f) for k in (1, 2, 4) for f in (0.6, 1, 1.5, 2.5))
    found = next(filter(None, tried), None)
    if found is None:
        return []  # a horizon far shorter than the window: the prediction is the usage itself
    level, rise, crossing = found
    span = crossing + minutes(rule.for_) + 2
    case = Case(f"VllmKVCacheFillingUp waits for {a.kv_predict_window} of rise after steady usage at {level:g}")
    text = f"{number(level)}+0x{window} {number(round(level + rise, 6))}+{number(rise)}x{span - window - 1}"
    case.add(series_text(sig.name, inputs.labels(signal=sig)), text)
    value = level + rise * (crossing + minutes(rule.for_) - window)
    case.checks = boundary(rule.name, crossing, rule.for_, [Expect(rule, inputs.result(), value)])
    return [case]


def _young_rise(floor: float, window: int, horizon: float, tenths: int, pace: float) -> tuple[float, float, int] | None:
    """(level, rise a minute, minute the whole window's prediction crosses full), or None: usage
    `tenths` of the way from the floor to full, rising `pace` times as fast as fills it in the horizon."""
    level = round(floor + (1 - floor) * tenths / 10, 4)
    rise = round(pace * (1 - level) / (horizon / 60), 4)
    values = [level] * (window + 1) + [level + rise * (k + 1) for k in range(8 * window)]
    crossed = [m for m in range(window, len(values)) if _predicted(values, m, window, horizon) >= 1]
    if not crossed or rise <= 0 or values[crossed[0]] >= 1:
        return None
    m = crossed[0]
    # A half window crosses a minute sooner; 1e-4 is far past float noise between Go and Python.
    early = _predicted(values, m - 1, window / 2, horizon) > 1.0001
    clear = _predicted(values, m - 1, window, horizon) < 0.9999 and _predicted(values, m, window, horizon) > 1.0001
    return (level, rise, m) if early and clear else None


def _predicted(values: list[float], m: int, window: float, horizon: float) -> float:
    """predict_linear(x[window], horizon) at minute m, x sampled each minute (least squares)."""
    points = [(k - m) * 60.0 for k in range(len(values)) if m - window <= k <= m]
    ys = [values[m + round(t / 60)] for t in points]
    mean_t, mean_y = sum(points) / len(points), sum(ys) / len(ys)
    slope = sum((t - mean_t) * (y - mean_y) for t, y in zip(points, ys, strict=True)) / sum(
        (t - mean_t) ** 2 for t in points
    )
    return mean_y - slope * mean_t + slope * horizon


def preemptions_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    limit = inputs.cfg.alerts.preemptions_per_request
    sig = inputs.res["preemptions"]
    span = minutes(rule.for_) + PAST_FOR
    cases = []
    for label, factor in (("fires", 1.1), ("stays silent", 0.9)):
        ratio = limit * factor
        case = Case(f"VllmPreemptions {label} at {ratio:g} preemptions per request")
        inputs.traffic(case, 1000, span)
        inputs.counter(case, sig, round(1000 * ratio, 6), span)
        if factor > 1:
            case.checks = boundary(
                rule.name, 1, rule.for_, [Expect(rule, inputs.result(), round(1000 * ratio, 6) / 1000)]
            )
        else:
            case.checks = [Check(span - 1, rule.name, [])]
        cases.append(case)
    # The traffic floor from both sides, preempting well above the limit: too idle to judge is silent.
    ratio = limit * 2
    for side, scale in NEAR_SIDES:
        rate = floor_per_minute(inputs.v) * scale
        near = Case(f"VllmPreemptions: {ratio:g} preemptions per request, traffic {side} alerts.min_requests")
        inputs.traffic(near, rate, span + 5)
        inputs.counter(near, sig, round(rate * ratio, 6), span + 5)
        near.checks = (
            boundary(
                rule.name, floor_judged_from(inputs.v), rule.for_, [Expect(rule, inputs.result(), ratio)]
            )
            if scale > 1
            else [Check(span + 4, rule.name, [])]
        )
        cases.append(near)
    return cases
