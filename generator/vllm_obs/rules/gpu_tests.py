"""promtool scenarios of the GPU alerts (rules/gpu.py).

The input series carry the labels a real scrape delivers under the bundle's join: with
`join: instance` the dcgm-exporter job's relabelling (instance = the vLLM server, the exporter
in exporter_address); with `join: pod` the exporter's own labels plus a pod mapping, once as
the GPU operator's ServiceMonitor stores them (exported_namespace/exported_pod, the exporter's
pod in namespace/pod) and once with honorLabels (namespace/pod), next to the vLLM target's `up`
with its namespace and pod. Each firing case also holds a neighbour (another server, or with
multi-cluster on the same names in another cluster) and, for `pod`, a GPU no pod holds, whose
values would fire if a join or an aggregation merged them.
"""

from __future__ import annotations

import math

from ..promql import number
from . import gpu
from .model import Alert
from .promtool_tests import (
    NEIGHBOUR,
    REPLICA,
    Builder,
    Case,
    Check,
    Expect,
    Inputs,
    boundary,
    minutes,
    series_text,
)

GPU_MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"
EXPORTER = "dcgm-exporter-0:9400"
# The GPU operator's exporter pod and Service, as its ServiceMonitor labels the targets.
OPERATOR_NAMESPACE = "gpu-operator"
OPERATOR_POD = {REPLICA: "nvidia-dcgm-exporter-x7k2p", NEIGHBOUR: "nvidia-dcgm-exporter-q9m4t"}
OPERATOR_ADDRESS = {REPLICA: "10.0.3.17:9400", NEIGHBOUR: "10.0.3.18:9400"}
VLLM_POD = {REPLICA: "vllm-0-7d9f8c6b5-abcde", NEIGHBOUR: "vllm-1-7d9f8c6b5-fghij"}
# Framebuffer of an 80 GB H100 in MiB: used + free + reserved.
FB_TOTAL_MIB = 81559
FB_RESERVED_MIB = 639


class Gpus:
    """DCGM series of the GPUs under one vLLM server, labelled as its scrape delivers them."""

    def __init__(self, io: Inputs, honor_labels: bool = False) -> None:
        self.io = io
        self.cfg = io.cfg
        self.join = io.cfg.gpu.join
        self.honor_labels = honor_labels

    def target(self, who: str) -> dict[str, str]:
        """The vLLM server's scrape identity: instance, and the cluster when on."""
        sc = self.io.scope
        if sc.cluster:
            # The neighbour is the replica's namesake in another cluster: same instance, same pod.
            return {sc.cluster: "east" if who == REPLICA else "west", "instance": REPLICA}
        return {"instance": who}

    def pod(self, who: str) -> str:
        return VLLM_POD[REPLICA if self.io.scope.cluster else who]

    def namespace(self) -> str:
        return self.io.base.get("namespace", "llm")

    def uuid(self, who: str, index: int) -> str:
        server = 0 if who == REPLICA else 1
        return f"GPU-8f3c2a1e-{server:04d}-{index:04d}-3333-444455556666"

    def labels(self, who: str, index: int, allocated: bool = True) -> dict[str, str]:
        """One GPU's labels as stored in Prometheus (`allocated`: a vLLM pod holds it)."""
        own = {
            "gpu": str(index),
            "UUID": self.uuid(who, index),
            "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
            "device": f"nvidia{index}",
            "modelName": GPU_MODEL,
            "Hostname": f"gpu-node-{0 if who == REPLICA else 1}",
            "DCGM_FI_DRIVER_VERSION": DRIVER,
        }
        cluster = {k: v for k, v in self.target(who).items() if k != "instance"}
        if self.join == "instance":
            return {
                **own,
                **self.target(who),
                "job": self.cfg.gpu.job,
                "exporter_address": EXPORTER,
            }
        scrape = {
            **cluster,
            "job": self.cfg.gpu.job,
            "instance": OPERATOR_ADDRESS[who],
            "namespace": OPERATOR_NAMESPACE,
            "pod": OPERATOR_POD[who],
            "container": "nvidia-dcgm-exporter",
            "service": "nvidia-dcgm-exporter",
            "endpoint": "gpu-metrics",
        }
        if not allocated:
            return {**own, **scrape}
        workload = {"namespace": self.namespace(), "pod": self.pod(who), "container": "vllm"}
        if self.honor_labels:
            return {**own, **scrape, **workload}
        return {**own, **scrape, **{f"exported_{k}": v for k, v in workload.items()}}

    def result(self, who: str, index: int) -> dict[str, str]:
        """Labels of a per-GPU alert."""
        return {**self.target(who), "gpu": str(index), "UUID": self.uuid(who, index), "modelName": GPU_MODEL}

    def vllm_up(self, case: Case, who: str, span: int) -> None:
        """With join: pod, the vLLM target whose namespace and pod the GPUs are matched to."""
        if self.join != "pod":
            return
        labels = {**self.io.base, **self.target(who), "namespace": self.namespace(), "pod": self.pod(who)}
        case.add(series_text("up", labels), f"1+0x{span}")

    def gauge(
        self, case: Case, name: str, who: str, index: int, values: str, allocated: bool = True, **extra: str
    ) -> None:
        case.add(series_text(name, {**self.labels(who, index, allocated), **extra}), values)

    def xid(
        self, case: Case, who: str, index: int, codes: list[tuple[int, int]], span: int, **kw: bool
    ) -> None:
        """The XID gauge: `codes` is [(minute, code)], the first at minute 0. Each new code is a
        new series (err_code changes with it) and the previous one goes stale, as on a scrape."""
        dcgm = gpu.load_dcgm()
        texts = {0: "No Error", **{x.code: x.text for x in (*dcgm.critical, *dcgm.application)}}
        for i, (start, code) in enumerate(codes):
            end = codes[i + 1][0] if i + 1 < len(codes) else None
            values = ["_"] * start
            if end is None:
                values.append(f"{code}+0x{span - start}")
            else:
                values += [str(code)] * (end - start) + ["stale"]
            self.gauge(
                case,
                "DCGM_FI_DEV_XID_ERRORS",
                who,
                index,
                " ".join(values),
                err_code=str(code),
                err_msg=texts.get(code, "Unknown Error"),
                **kw,
            )

    def memory(
        self,
        case: Case,
        who: str,
        index: int,
        used: int,
        span: int,
        reserved: bool = True,
        total: int = FB_TOTAL_MIB,
    ) -> None:
        """Framebuffer of one GPU in MiB: `used` of `total`, the reserved part where exposed."""
        free = total - used - (FB_RESERVED_MIB if reserved else 0)
        self.gauge(case, "DCGM_FI_DEV_FB_USED", who, index, f"{used}+0x{span}")
        self.gauge(case, "DCGM_FI_DEV_FB_FREE", who, index, f"{free}+0x{span}")
        if reserved:
            self.gauge(case, "DCGM_FI_DEV_FB_RESERVED", who, index, f"{FB_RESERVED_MIB}+0x{span}")

    def utilization(self, case: Case, who: str, index: int, percent: float, span: int) -> None:
        self.gauge(case, "DCGM_FI_DEV_GPU_UTIL", who, index, f"{number(percent)}+0x{span}")


def memory_ratio(used: int, reserved: bool = True, total: int = FB_TOTAL_MIB) -> float:
    """The recorded ratio, computed in the order of the rule's float operations."""
    mib = float(gpu.MIB)
    free = total - used - (FB_RESERVED_MIB if reserved else 0)
    return used * mib / (used * mib + free * mib + (FB_RESERVED_MIB * mib if reserved else 0.0))


def exact_total(threshold: float) -> tuple[int, int] | None:
    """A framebuffer size near an 80 GB GPU's and the MiB used that make the ratio exactly the threshold."""
    for total in range(80000, 82000):
        used = round(threshold * total)
        if memory_ratio(used, reserved=False, total=total) == threshold:
            return total, used
    return None


def styles(io: Inputs) -> list[Gpus]:
    """Every way a scrape may label the GPUs under this bundle's join."""
    if io.cfg.gpu.join == "pod":
        return [Gpus(io), Gpus(io, honor_labels=True)]
    return [Gpus(io)]


def style_name(g: Gpus) -> str:
    if g.join == "instance":
        return "relabelled to the vLLM instance"
    return "pod labels kept (honorLabels)" if g.honor_labels else "pod labels as exported_* (ServiceMonitor)"


# -- VllmGpuXidError ---------------------------------------------------------------------------


def _xid(rules: list[Alert], io: Inputs) -> list[Case]:
    by_severity = {r.severity: r for r in rules}
    crit, warn = by_severity["critical"], by_severity["warning"]
    window = minutes(io.cfg.gpu.xid_window)
    fallen = 79
    application = gpu.load_dcgm().application[0].code  # 13
    at = 3  # the minute the code changes
    span = at + window + 3
    cases = []
    for g in styles(io):
        fire = Case(f"VllmGpuXidError pages when a GPU falls off the bus (XID {fallen}), {style_name(g)}")
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
    g = styles(io)[0]
    later = at + 3
    warning = Case(
        f"VllmGpuXidError warns on XID {application} (an application error) and pages when XID {fallen} follows"
    )
    g.vllm_up(warning, REPLICA, span)
    g.xid(warning, REPLICA, 0, [(0, 0), (at, application), (later, fallen)], span)
    warning.checks = [
        Check(at - 1, warn.name, []),
        Check(at, warn.name, [Expect(warn, g.result(REPLICA, 0), application)]),
        # The critical code replaces the warning: `unless` keeps the warning tier out of it.
        Check(later, warn.name, [Expect(crit, g.result(REPLICA, 0), fallen)]),
    ]
    old = Case(f"VllmGpuXidError stays silent on an old XID {fallen} the gauge still holds")
    g.vllm_up(old, REPLICA, span)
    g.xid(old, REPLICA, 0, [(0, fallen)], span)
    old.checks = [Check(at, crit.name, []), Check(span - 1, crit.name, [])]
    reset = Case("VllmGpuXidError stays silent when the code goes back to 0 (driver reset)")
    g.vllm_up(reset, REPLICA, span)
    g.xid(reset, REPLICA, 0, [(0, fallen), (at, 0)], span)
    reset.checks = [Check(at, crit.name, []), Check(at + 1, crit.name, [])]
    return [*cases, warning, old, reset]


# -- VllmGpuMemoryNearlyFull ---------------------------------------------------------------


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


def _memory(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    threshold = io.cfg.gpu.memory_full_threshold
    span = minutes(rule.for_) + 5
    cases = []
    for g in styles(io):
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
    g = styles(io)[0]
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


# -- VllmGpuIdleWhileBusy ----------------------------------------------------------------------


def _idle(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    g_cfg = io.cfg.gpu
    running = io.res["requests_running"]
    limit = g_cfg.max_num_seqs if g_cfg.max_num_seqs > 0 else 8
    idle = round(g_cfg.idle_utilization_below * 100 / 2, 9)  # percent, as DCGM reports it
    # Exactly at the threshold (10 / 100 is the double 0.1): `<` must not hold.
    busy = round(g_cfg.idle_utilization_below * 100, 9)
    span = minutes(rule.for_) + 5
    limit_text = f"--max-num-seqs {number(limit)}" if g_cfg.max_num_seqs > 0 else "their peak"
    cases = []
    for g in styles(io):
        fire = Case(
            f"VllmGpuIdleWhileBusy fires after {rule.for_} with {number(limit)} running ({limit_text}) "
            f"and GPUs at {number(idle)}%, {style_name(g)}"
        )
        for who in (REPLICA, NEIGHBOUR):
            g.vllm_up(fire, who, span)
            io.gauge(fire, running, limit, span, instance=who)
        for index in (0, 1):
            g.utilization(fire, REPLICA, index, idle, span)
            # The neighbour holds its slots too, but its GPUs work: it is merely busy.
            g.utilization(fire, NEIGHBOUR, index, 90, span)
        fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, io.result(), limit)])
        cases.append(fire)
    g = styles(io)[0]
    working = Case(f"VllmGpuIdleWhileBusy stays silent with the GPUs at exactly {number(busy)}%")
    g.vllm_up(working, REPLICA, span)
    io.gauge(working, running, limit, span)
    for index in (0, 1):
        g.utilization(working, REPLICA, index, busy, span)
    working.checks = [Check(span - 1, rule.name, [])]
    cases.append(working)
    if g_cfg.max_num_seqs > 0:
        below = Case(f"VllmGpuIdleWhileBusy stays silent with idle GPUs and {number(limit - 1)} running")
        g.vllm_up(below, REPLICA, span)
        io.gauge(below, running, limit - 1, span)
        below.checks = [Check(span - 1, rule.name, [])]
    else:
        # The peak (8) came at minute 0, then half as many run: below the peak while it is within
        # the hour; once it has left the window, the held requests are the peak again.
        peak = minutes(gpu.PEAK_WINDOW)
        back = peak + 1 + minutes(rule.for_)
        below = Case(
            f"VllmGpuIdleWhileBusy waits while running requests are below their peak of the last "
            f"{gpu.PEAK_WINDOW}, then fires once that peak is older"
        )
        g.vllm_up(below, REPLICA, back + 1)
        below.add(
            series_text(running.name, io.labels(signal=running)),
            f"{number(limit)} {number(limit / 2)}+0x{back + 1}",
        )
        below.checks = [
            Check(peak - 1, rule.name, []),
            Check(back, rule.name, [Expect(rule, io.result(), limit / 2)]),
        ]
    for index in (0, 1):
        g.utilization(below, REPLICA, index, idle, span)
    cases.append(below)
    empty = Case("VllmGpuIdleWhileBusy stays silent on an idle server (nothing running, GPUs idle)")
    g.vllm_up(empty, REPLICA, span)
    io.gauge(empty, running, 0, span)
    for index in (0, 1):
        g.utilization(empty, REPLICA, index, 0, span)
    empty.checks = [Check(span - 1, rule.name, [])]
    cases.append(empty)
    return cases


def builders() -> dict[str, Builder]:
    return {
        "VllmGpuXidError": _xid,
        "VllmGpuMemoryNearlyFull": _memory,
        "VllmGpuIdleWhileBusy": _idle,
    }
