"""promtool cases of the GPU layer: XID codes as they change, the framebuffer's threshold with
and without FB_RESERVED, and slots held on an idle GPU; the firing cases in each join style."""

from __future__ import annotations

import math

from ...dcgm import load_dcgm
from ...promql import number
from ..expressions import PEAK_WINDOW
from ..gpu_inputs import FB_RESERVED_MIB, FB_TOTAL_MIB, exact_total, memory_ratio, style_name, styles
from ..model import Alert
from ..scenario_kit import NEIGHBOUR, REPLICA, Case, Check, Expect, Inputs, boundary, minutes, series_text

# Minutes a case runs past its alert's `for`, so its last checks come after that has elapsed.
PAST_FOR = 5


def xid_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    by_fault = {r.labels["fault"]: r for r in rules}
    crit, warn = by_fault["hardware"], by_fault["application"]
    window = minutes(inputs.cfg.gpu.xid_window)
    fallen = 79
    application = load_dcgm().application[0].code  # 13
    at = 3  # the minute the code changes
    span = at + window + 3
    cases = []
    for g in styles(inputs):
        fire = Case(
            f"VllmGpuXidError warns of a hardware fault when a GPU falls off the bus (XID {fallen}), {style_name(g)}"
        )
        g.vllm_up(fire, REPLICA, span)
        g.vllm_up(fire, NEIGHBOUR, span)
        g.xid(fire, REPLICA, 0, [(0, 0), (at, fallen)], span)
        g.xid(fire, REPLICA, 1, [(0, 0)], span)
        g.xid(fire, NEIGHBOUR, 0, [(0, 0)], span)
        if g.join == "pod":
            # A GPU on the same node that no pod holds: not under any vLLM server.
            g.xid(fire, REPLICA, 7, [(0, 0), (at, fallen)], span, allocated=False)
        expected = [Expect(crit, g.result(REPLICA, 0), fallen)]
        # No `for`; it stays up `xid_window` after the change (both range-boundary conventions).
        fire.checks = [
            Check(at - 1, crit.name, []),
            Check(at, crit.name, expected),
            Check(at + window - 2, crit.name, expected),
            Check(at + window, crit.name, []),
        ]
        cases.append(fire)
    g = styles(inputs)[0]
    later = at + 3
    warning = Case(
        f"VllmGpuXidError warns on XID {application} (an application error), then of a hardware fault when XID {fallen} follows"
    )
    g.vllm_up(warning, REPLICA, span)
    g.xid(warning, REPLICA, 0, [(0, 0), (at, application), (later, fallen)], span)
    warning.checks = [
        Check(at - 1, warn.name, []),
        Check(at, warn.name, [Expect(warn, g.result(REPLICA, 0), application)]),
        # The hardware code replaces the application one: `unless` keeps the other rule out of it.
        Check(later, warn.name, [Expect(crit, g.result(REPLICA, 0), fallen)]),
    ]
    # An application error alone: it warns for xid_window after the change, then lets go.
    alone = Case(f"VllmGpuXidError warns on XID {application} for {inputs.cfg.gpu.xid_window} after it comes")
    g.vllm_up(alone, REPLICA, span)
    g.xid(alone, REPLICA, 0, [(0, 0), (at, application)], span)
    told = [Expect(warn, g.result(REPLICA, 0), application)]
    alone.checks = [
        Check(at, warn.name, told),
        Check(at + window - 2, warn.name, told),
        Check(at + window, warn.name, []),
    ]
    cases.append(alone)
    old = Case(f"VllmGpuXidError stays silent on an old XID {fallen} or {application} the gauge still holds")
    g.vllm_up(old, REPLICA, span)
    g.vllm_up(old, NEIGHBOUR, span)
    g.xid(old, REPLICA, 0, [(0, fallen)], span)
    g.xid(old, NEIGHBOUR, 0, [(0, application)], span)
    old.checks = [Check(at, crit.name, []), Check(span - 1, crit.name, [])]
    reset = Case("VllmGpuXidError stays silent when the code goes back to 0 (driver reset)")
    g.vllm_up(reset, REPLICA, span)
    g.xid(reset, REPLICA, 0, [(0, fallen), (at, 0)], span)
    reset.checks = [Check(at, crit.name, []), Check(at + 1, crit.name, [])]
    return [*cases, warning, old, reset]


def _used_above(threshold: float, reserved: bool) -> int:
    """MiB used whose ratio is just above the threshold (halfway to full)."""
    target = threshold + (1 - threshold) / 2
    used = math.ceil(FB_TOTAL_MIB * target)
    while memory_ratio(used, reserved) <= threshold:
        used += 1
    return used


def _used_at_most(threshold: float, reserved: bool) -> int:
    """The most MiB used whose ratio stays at or below the threshold."""
    used = math.floor(FB_TOTAL_MIB * threshold)
    while memory_ratio(used + 1, reserved) <= threshold:
        used += 1
    while memory_ratio(used, reserved) > threshold:
        used -= 1
    return used


def memory_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    threshold = inputs.cfg.gpu.memory_full_threshold
    span = minutes(rule.for_) + PAST_FOR
    cases = []
    for g in styles(inputs):
        for reserved in (True, False):
            used = _used_above(threshold, reserved)
            ratio = memory_ratio(used, reserved)
            exposed = "with FB_RESERVED" if reserved else "without FB_RESERVED (older collectors file)"
            fire = Case(
                f"VllmGpuMemoryNearlyFull fires after {rule.for_} at {ratio:.4f} used, {exposed}, {style_name(g)}"
            )
            g.vllm_up(fire, REPLICA, span)
            g.vllm_up(fire, NEIGHBOUR, span)
            g.memory(fire, REPLICA, 0, used, span, reserved)
            g.memory(fire, REPLICA, 1, 1000, span, reserved)
            g.memory(fire, NEIGHBOUR, 0, 1000, span, reserved)
            fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, g.result(REPLICA, 0), ratio)])
            cases.append(fire)
    g = styles(inputs)[0]
    exact = exact_total(threshold)
    if exact is not None:
        total, used = exact
        silent = Case(f"VllmGpuMemoryNearlyFull stays silent at exactly {threshold:g} used")
    else:
        total, used = FB_TOTAL_MIB, _used_at_most(threshold, reserved=False)
        silent = Case(f"VllmGpuMemoryNearlyFull stays silent at {memory_ratio(used, False):.4f} used")
    g.vllm_up(silent, REPLICA, span)
    g.memory(silent, REPLICA, 0, used, span, reserved=False, total=total)
    silent.checks = [Check(span - 1, rule.name, [])]
    cases.append(silent)
    # Used over (used + free) is above the threshold; the reserved part belongs to the total.
    used = _used_at_most(threshold, reserved=True)
    if used / (FB_TOTAL_MIB - FB_RESERVED_MIB) > threshold:
        counted = Case("VllmGpuMemoryNearlyFull counts FB_RESERVED in the total and stays silent")
        g.vllm_up(counted, REPLICA, span)
        g.memory(counted, REPLICA, 0, used, span, reserved=True)
        counted.checks = [Check(span - 1, rule.name, [])]
        cases.append(counted)
    return cases


def idle_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    g_cfg = inputs.cfg.gpu
    running = inputs.res["requests_running"]
    limit = inputs.cfg.alerts.max_num_seqs if inputs.cfg.alerts.max_num_seqs > 0 else 8
    # A fifth under the threshold, in percent as DCGM reports it.
    idle = round(g_cfg.idle_utilization_below * 100 * 0.8, 9)
    # Exactly at the threshold (10 / 100 is the double 0.1): `<` must not hold.
    busy = round(g_cfg.idle_utilization_below * 100, 9)
    span = minutes(rule.for_) + PAST_FOR
    limit_text = f"--max-num-seqs {number(limit)}" if inputs.cfg.alerts.max_num_seqs > 0 else "their peak"
    cases = []
    for g in styles(inputs):
        fire = Case(
            f"VllmGpuIdleWhileBusy fires after {rule.for_} with {number(limit)} running ({limit_text}) "
            f"and GPUs at {number(idle)}%, {style_name(g)}"
        )
        for who in (REPLICA, NEIGHBOUR):
            g.vllm_up(fire, who, span)
            inputs.gauge(fire, running, limit, span, instance=who)
        for index in (0, 1):
            g.utilization(fire, REPLICA, index, idle, span)
            # The neighbour holds its slots too, but its GPUs work: it is merely busy.
            g.utilization(fire, NEIGHBOUR, index, 90, span)
        fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, inputs.result(), limit)])
        cases.append(fire)
    g = styles(inputs)[0]
    working = Case(f"VllmGpuIdleWhileBusy stays silent with the GPUs at exactly {number(busy)}%")
    g.vllm_up(working, REPLICA, span)
    inputs.gauge(working, running, limit, span)
    for index in (0, 1):
        g.utilization(working, REPLICA, index, busy, span)
    working.checks = [Check(span - 1, rule.name, [])]
    cases.append(working)
    if inputs.cfg.alerts.max_num_seqs > 0:
        below = Case(f"VllmGpuIdleWhileBusy stays silent with idle GPUs and {number(limit - 1)} running")
        g.vllm_up(below, REPLICA, span)
        inputs.gauge(below, running, limit - 1, span)
        below.checks = [Check(span - 1, rule.name, [])]
    else:
        # The peak (8) came at minute 0, then half as many run: below the peak while it is within
        # the hour; once it has left the window, the held requests are the peak again.
        peak = minutes(PEAK_WINDOW)
        back = peak + 1 + minutes(rule.for_)
        below = Case(
            f"VllmGpuIdleWhileBusy waits while running requests are below their peak of the last "
            f"{PEAK_WINDOW}, then fires once that peak is older"
        )
        g.vllm_up(below, REPLICA, back + 1)
        below.add(
            series_text(running.name, inputs.labels(signal=running)),
            f"{number(limit)} {number(limit / 2)}+0x{back + 1}",
        )
        below.checks = [
            Check(peak - 1, rule.name, []),
            Check(back, rule.name, [Expect(rule, inputs.result(), limit / 2)]),
        ]
    for index in (0, 1):
        g.utilization(below, REPLICA, index, idle, span)
    cases.append(below)
    empty = Case("VllmGpuIdleWhileBusy stays silent on an idle server (nothing running, GPUs idle)")
    g.vllm_up(empty, REPLICA, span)
    inputs.gauge(empty, running, 0, span)
    for index in (0, 1):
        g.utilization(empty, REPLICA, index, 0, span)
    empty.checks = [Check(span - 1, rule.name, [])]
    cases.append(empty)
    return cases
