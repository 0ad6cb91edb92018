"""Input series of the GPU layer's promtool scenarios: DCGM series of the GPUs under a server, labelled
as a real scrape under the bundle's join, beside neighbours whose values would fire if a join or an
aggregation merged them (docs/design.md).
"""

from __future__ import annotations

from ..dcgm import MIB, load_dcgm
from ..promql import number
from .scenario_kit import NEIGHBOUR, REPLICA, Case, Inputs, pod_of, series_text

GPU_MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"
EXPORTER = "dcgm-exporter-0:9400"
# The GPU operator's exporter pod and Service, as its ServiceMonitor labels the targets.
OPERATOR_NAMESPACE = "gpu-operator"
OPERATOR_POD = {REPLICA: "nvidia-dcgm-exporter-x7k2p", NEIGHBOUR: "nvidia-dcgm-exporter-q9m4t"}
OPERATOR_ADDRESS = {REPLICA: "10.0.3.17:9400", NEIGHBOUR: "10.0.3.18:9400"}
# Framebuffer of an 80 GB H100 in MiB: used + free + reserved.
FB_TOTAL_MIB = 81559
FB_RESERVED_MIB = 639


class Gpus:
    """DCGM series of the GPUs under one vLLM server, labelled as its scrape delivers them."""

    def __init__(self, inputs: Inputs, honor_labels: bool = False) -> None:
        self.inputs = inputs
        self.cfg = inputs.cfg
        self.join = inputs.cfg.gpu.join
        self.honor_labels = honor_labels

    def target(self, who: str) -> dict[str, str]:
        """The vLLM server's scrape identity: instance, and the cluster (namespace, pod) when kept.
        The neighbour is then the replica's namesake elsewhere: same instance, same pod name."""
        return self.inputs.at_target(who)

    def pod(self, who: str) -> str:
        return pod_of(REPLICA if self.inputs.scope.partitions else who)

    def namespace(self, who: str) -> str:
        return self.inputs.partition(who).get("namespace") or self.inputs.base.get("namespace", "llm")

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
        workload = {"namespace": self.namespace(who), "pod": self.pod(who), "container": "vllm"}
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
        labels = {
            **self.inputs.base,
            **self.target(who),
            "namespace": self.namespace(who),
            "pod": self.pod(who),
        }
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
        dcgm = load_dcgm()
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
    mib = float(MIB)
    free = total - used - (FB_RESERVED_MIB if reserved else 0)
    return used * mib / (used * mib + free * mib + (FB_RESERVED_MIB * mib if reserved else 0.0))


def exact_total(threshold: float) -> tuple[int, int] | None:
    """A framebuffer size near an 80 GB GPU's and the MiB used that make the ratio exactly the threshold."""
    for total in range(80000, 82000):
        used = round(threshold * total)
        if memory_ratio(used, reserved=False, total=total) == threshold:
            return total, used
    return None


def styles(inputs: Inputs) -> list[Gpus]:
    """Every way a scrape may label the GPUs under this bundle's join."""
    if inputs.cfg.gpu.join == "pod":
        return [Gpus(inputs), Gpus(inputs, honor_labels=True)]
    return [Gpus(inputs)]


def style_name(g: Gpus) -> str:
    if g.join == "instance":
        return "relabelled to the vLLM instance"
    return "pod labels kept (honorLabels)" if g.honor_labels else "pod labels as exported_* (ServiceMonitor)"
