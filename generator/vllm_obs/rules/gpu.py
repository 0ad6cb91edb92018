"""The GPU layer: NVIDIA's dcgm-exporter next to vLLM's own series, when `gpu.enabled`.

Every GPU series is tied to the vLLM server using that GPU, so a GPU alert, panel or
inhibition names the same `instance` as the server's own alerts:

- `join: instance` (compose, one vLLM per host): the scrape job of `scrape_jobs` gives the
  exporter's series the instance label of the server on that host;
- `join: pod` (Kubernetes): dcgm-exporter labels a GPU allocated to a container with that
  pod's namespace and pod (`exported_namespace`/`exported_pod` once a ServiceMonitor scrapes it
  without honorLabels, `namespace`/`pod` with it); the recording rules match those to the
  namespace and pod of the vLLM target and take its instance.

The recording rules read only the DCGM series listed in catalog/dcgm.yaml; the alerts read
only recording rules, so alerts and panels show the same numbers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

from ..config import BundleConfig
from ..promql import number, selector
from ..signals import Resolution
from .model import Alert, Group, Recording
from .names import Names, Scope, by, scope_of

if TYPE_CHECKING:
    from .runbooks import Section

# Group names: the rule files are merged into one PrometheusRule and promtool orders groups by
# name, so the recording group and the alert group must not share one.
RECORDING_GROUP = "vllm-obs.gpu-recording"
ALERT_GROUP = "vllm-obs.gpu"

# Recording rules. Per GPU: cluster (when on), instance (the vLLM server), gpu, UUID, modelName.
UTILIZATION = "instance_gpu:vllm_gpu_utilization:ratio"
MEMORY_USED_RATIO = "instance_gpu:vllm_gpu_memory_used:ratio"
MEMORY_USED_BYTES = "instance_gpu:vllm_gpu_memory_used:bytes"
MEMORY_FREE_BYTES = "instance_gpu:vllm_gpu_memory_free:bytes"
TEMPERATURE = "instance_gpu:vllm_gpu_temperature:celsius"
POWER = "instance_gpu:vllm_gpu_power:watts"
XID = "instance_gpu:vllm_gpu_xid:last"
# Per server: cluster (when on) and instance.
SERVER_UTILIZATION = "instance:vllm_gpu_utilization:avg"
SERVER_MEMORY_USED = "instance:vllm_gpu_memory_used:max_ratio"

GPU_LABELS = ("gpu", "UUID", "modelName")
MIB = 1048576  # DCGM reports framebuffer sizes in MiB
PEAK_WINDOW = "1h"  # VllmGpuIdleWhileBusy with max_num_seqs 0: running requests at their peak of this


# -- the data file ---------------------------------------------------------------------


@dataclass(frozen=True)
class DcgmSeries:
    name: str
    type: str
    unit: str
    optional: bool


@dataclass(frozen=True)
class Xid:
    code: int
    text: str
    why: str = ""


@dataclass(frozen=True)
class Dcgm:
    """catalog/dcgm.yaml: the series the layer may read and the XID codes that page."""

    series: dict[str, DcgmSeries]
    critical: tuple[Xid, ...]
    application: tuple[Xid, ...]
    sources: dict[str, dict[str, str]]

    def name(self, name: str) -> str:
        """A series name the layer reads; a name missing from the data file is a bug."""
        if name not in self.series:
            raise KeyError(f"{name} is not declared in catalog/dcgm.yaml")
        return name


@functools.lru_cache(maxsize=1)
def load_dcgm() -> Dcgm:
    text = resources.files("vllm_obs").joinpath("catalog/dcgm.yaml").read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    series = {
        s["name"]: DcgmSeries(s["name"], s["type"], s["unit"], bool(s.get("optional", False)))
        for s in data["series"]
    }
    return Dcgm(
        series=series,
        critical=tuple(Xid(x["code"], x["text"], x["why"]) for x in data["xid"]["critical"]),
        application=tuple(Xid(x["code"], x["text"]) for x in data["xid"]["application"]),
        sources=data["sources"],
    )


# -- scrape job and warnings -------------------------------------------------------------


def gpu_selector(cfg: BundleConfig) -> str:
    return f'job="{cfg.gpu.job}"'


def scrape_jobs(cfg: BundleConfig) -> list[dict[str, Any]]:
    """The dcgm-exporter job of `join: instance`; `join: pod` leaves scraping to a ServiceMonitor."""
    g = cfg.gpu
    if not (g.enabled and g.join == "instance" and g.exporters):
        return []
    return [
        {
            "job_name": g.job,
            "static_configs": [
                # The exporter's series take the instance label of the vLLM server on its host,
                # so GPU alerts and panels line up with (and inhibit) that server's.
                {"targets": [e.target], "labels": {"__vllm_instance": e.vllm_instance}}
                for e in g.exporters
            ],
            "relabel_configs": [
                {"source_labels": ["__address__"], "target_label": "exporter_address"},
                {"source_labels": ["__vllm_instance"], "target_label": "instance"},
            ],
        }
    ]


def warnings(res: Resolution, cfg: BundleConfig) -> list[str]:
    g = cfg.gpu
    if not g.enabled:
        return []
    out = []
    if g.join == "pod" and g.exporters:
        targets = ", ".join(e.target for e in g.exporters)
        out.append(
            f"gpu.join is pod, so gpu.exporters ({targets}) is not scraped: the GPU operator's "
            f'ServiceMonitor scrapes dcgm-exporter and the rules read job="{g.job}"; set gpu.exporters: [] '
            "to silence this."
        )
    if "requests_running" not in res.signals:
        out.append(f"{res.source.origin} has no requests_running series; skipped VllmGpuIdleWhileBusy.")
    return out


# Alerts a faulted GPU explains on the server using it.
XID_EXPLAINS = ("VllmEngineDead", "VllmEngineStalled", "VllmEngineHung", "VllmGpuIdleWhileBusy")


def inhibitions(cfg: BundleConfig) -> list[dict[str, Any]]:
    """The one inhibition rule of the layer, for alertmanager.yml."""
    if not cfg.gpu.enabled:
        return []
    return [
        {
            # A GPU that faulted or fell off the bus (critical XID) is why the engine on it died,
            # stalls or hangs, and why its slots sit on an idle GPU: page once, for the GPU. The
            # XID alert carries the server's instance (the join), so only that server is silenced;
            # its latency, queue and error symptoms follow VllmEngineDead's own inhibition.
            "source_matchers": ['alertname="VllmGpuXidError"', 'severity="critical"'],
            "target_matchers": [f'alertname=~"{"|".join(XID_EXPLAINS)}"'],
            "equal": list(scope_of(cfg).target),
        }
    ]


# -- recording rules ----------------------------------------------------------------------


def _per_gpu_labels(sc: Scope) -> tuple[str, ...]:
    return (*sc.target, *GPU_LABELS)


def _joined(series: str, cfg: BundleConfig, sc: Scope) -> str:
    """A DCGM series whose `instance` is the vLLM server using each GPU."""
    raw = selector(load_dcgm().name(series), gpu_selector(cfg))
    if cfg.gpu.join == "instance":
        return raw  # the scrape job already set instance
    pod = by((*((sc.cluster,) if sc.cluster else ()), "namespace", "pod"))
    vllm = selector("up", cfg.vllm_selector)
    # Under a ServiceMonitor without honorLabels the workload's labels are exported_*, and
    # namespace/pod name the exporter's own pod; with honorLabels they are namespace/pod. A GPU
    # no pod holds keeps the exporter's pod, which is no vLLM target, and drops out.
    return (
        f'label_replace(\n  label_replace({raw}, "namespace", "$1", "exported_namespace", "(.+)"),\n'
        f'  "pod", "$1", "exported_pod", "(.+)"\n)\n'
        f"* on ({pod}) group_left (instance)\n"
        f"group by ({pod}, instance) ({vllm})"
    )


def _per_gpu(series: str, cfg: BundleConfig, sc: Scope, scale: str = "") -> str:
    # One series per GPU after the join, except XID_ERRORS while its err_code label changes:
    # max keeps the new code once the old series goes stale.
    inner = _joined(series, cfg, sc)
    if "\n" in inner:
        inner = "\n  " + inner.replace("\n", "\n  ") + "\n"
    return f"max by ({by(_per_gpu_labels(sc))}) ({inner}){scale}"


def recording_groups(res: Resolution, cfg: BundleConfig) -> list[Group]:
    if not cfg.gpu.enabled:
        return []
    sc = scope_of(cfg)
    server = by(sc.target)
    # Where the exporter has no FB_RESERVED (older or custom collectors files) the total is
    # used + free; `or` falls back to 0 for that GPU instead of dropping it.
    reserved = _per_gpu("DCGM_FI_DEV_FB_RESERVED", cfg, sc, f" * {MIB}")
    rules = (
        Recording(UTILIZATION, _per_gpu("DCGM_FI_DEV_GPU_UTIL", cfg, sc, " / 100")),
        Recording(MEMORY_USED_BYTES, _per_gpu("DCGM_FI_DEV_FB_USED", cfg, sc, f" * {MIB}")),
        Recording(MEMORY_FREE_BYTES, _per_gpu("DCGM_FI_DEV_FB_FREE", cfg, sc, f" * {MIB}")),
        Recording(
            MEMORY_USED_RATIO,
            f"{MEMORY_USED_BYTES}\n/\n(\n  {MEMORY_USED_BYTES} + {MEMORY_FREE_BYTES}\n  + (\n    "
            + reserved.replace("\n", "\n    ")
            + f"\n    or\n    0 * {MEMORY_FREE_BYTES}\n  )\n)",
        ),
        Recording(TEMPERATURE, _per_gpu("DCGM_FI_DEV_GPU_TEMP", cfg, sc)),
        Recording(POWER, _per_gpu("DCGM_FI_DEV_POWER_USAGE", cfg, sc)),
        Recording(XID, _per_gpu("DCGM_FI_DEV_XID_ERRORS", cfg, sc)),
        Recording(SERVER_UTILIZATION, f"avg by ({server}) ({UTILIZATION})"),
        Recording(SERVER_MEMORY_USED, f"max by ({server}) ({MEMORY_USED_RATIO})"),
    )
    return [Group(RECORDING_GROUP, rules)]


# -- alerts --------------------------------------------------------------------------------


def _gpu_where(sc: Scope) -> str:
    return (
        "GPU {{ $labels.gpu }} ({{ $labels.modelName }}, {{ $labels.UUID }}) of "
        f"{{{{ $labels.instance }}}}{sc.in_cluster}"
    )


def _application_codes() -> str:
    return ", ".join(str(x.code) for x in load_dcgm().application)


def critical_codes() -> tuple[int, ...]:
    return tuple(x.code for x in load_dcgm().critical)


def _is_critical_xid() -> str:
    return "(\n  " + "\n  or ".join(f"{XID} == {code}" for code in critical_codes()) + "\n)"


def alerts(res: Resolution, cfg: BundleConfig) -> list[Alert]:
    if not cfg.gpu.enabled:
        return []
    sc = scope_of(cfg)
    g = cfg.gpu
    changed = f"changes({XID}[{g.xid_window}]) > 0"
    out = [
        Alert(
            name="VllmGpuXidError",
            # A new non-zero code within the window; the gauge keeps its last code for good,
            # so an old fault (or a GPU that came up with one) stays quiet.
            expr=f"{_is_critical_xid()}\nand\n{changed}",
            severity="critical",
            summary="A GPU under vLLM faulted (XID error): the engine on it is dead or stuck.",
            description=(
                f"{_gpu_where(sc)} reported XID {{{{ $value }}}}, a code that means the hardware faulted "
                "or the GPU fell off the bus; the vLLM engine on it cannot serve. Drain the node and reset "
                "or replace the GPU."
            ),
            dashboard="instance",
        ),
        Alert(
            name="VllmGpuXidError",
            expr=f"{XID} > 0\nunless\n{_is_critical_xid()}\nand\n{changed}",
            severity="warning",
            summary="A GPU under vLLM reported an XID error.",
            description=(
                f"{_gpu_where(sc)} reported XID {{{{ $value }}}}, not a hardware fault; codes like "
                f"{_application_codes()} come from the program on the GPU (an illegal memory access, a "
                "kernel that stopped): check whether the engine survived."
            ),
            dashboard="instance",
        ),
        Alert(
            name="VllmGpuMemoryNearlyFull",
            expr=f"{MEMORY_USED_RATIO} > {number(g.memory_full_threshold)}",
            for_=g.memory_full_for,
            severity="warning",
            summary="A GPU under vLLM is nearly out of framebuffer memory.",
            description=(
                f"{{{{ $value | humanizePercentage }}}} of the framebuffer of {_gpu_where(sc)} is used "
                f"(threshold {_percent(g.memory_full_threshold)}, for {g.memory_full_for}); the next "
                "allocation may fail with CUDA out of memory. vLLM takes --gpu-memory-utilization of it: "
                "what comes on top is another process, or activations outgrowing vLLM's reserve."
            ),
            dashboard="instance",
            threshold=g.memory_full_threshold,
        ),
    ]
    if "requests_running" in res.signals:
        out.append(_idle_while_busy(cfg, sc))
    return out


def _idle_while_busy(cfg: BundleConfig, sc: Scope) -> Alert:
    g = cfg.gpu
    running = Names(cfg.alerts.rate_window).requests_running
    if g.max_num_seqs > 0:
        full = f"{running} >= {number(g.max_num_seqs)}"
        limit = f"--max-num-seqs ({number(g.max_num_seqs)})"
    else:
        full = f"{running} > 0\nand\n{running} >= max_over_time({running}[{PEAK_WINDOW}])"
        limit = f"their peak of the last {PEAK_WINDOW}"
    return Alert(
        name="VllmGpuIdleWhileBusy",
        expr=f"{full}\nand on ({by(sc.target)})\n{SERVER_UTILIZATION} < {number(g.idle_utilization_below)}",
        for_=g.idle_for,
        severity="warning",
        summary="vLLM's request slots are all held while its GPUs sit idle.",
        description=(
            f"{{{{ $value }}}} requests are running on {sc.where}, at {limit}, while its GPUs are busy "
            f"less than {_percent(g.idle_utilization_below)} of the time, for {g.idle_for}: the slots "
            "are held by requests nobody works on, most often streams whose clients stopped reading."
        ),
        dashboard="instance",
        threshold=g.idle_utilization_below,
    )


def _percent(value: float) -> str:
    return f"{value * 100:g}%"


# -- runbook sections ----------------------------------------------------------------------


def _joins_text() -> str:
    return (
        "The GPU is tied to the vLLM server using it: with `gpu.join: instance` (compose, one vLLM "
        "per host) the dcgm-exporter scrape job gives the exporter's series that server's `instance`; "
        "with `gpu.join: pod` (Kubernetes) dcgm-exporter labels each allocated GPU with its pod "
        "(`exported_namespace`/`exported_pod` under the GPU operator's ServiceMonitor, `namespace`/`pod` "
        "with honorLabels) and the recording rules take the `instance` of the vLLM target of that pod."
    )


def runbook_sections() -> dict[str, Section]:
    """The GPU alerts' runbook sections (imported here: runbooks.py imports this module)."""
    from .runbooks import Section

    dcgm = load_dcgm()
    critical = ", ".join(f"{x.code} ({x.text})" for x in dcgm.critical)
    application = ", ".join(str(x.code) for x in dcgm.application)
    return {
        "VllmGpuXidError": Section(
            meaning=(
                "A GPU a vLLM server runs on reported a new XID error: the NVIDIA driver's code for a "
                "GPU fault. Critical for the codes that mean the hardware faulted or the GPU fell off "
                f"the bus: {critical}; the engine on that GPU is dead or cannot make progress, which is "
                "why this alert silences the server's VllmEngineDead, VllmEngineStalled, VllmEngineHung "
                "and VllmGpuIdleWhileBusy. Warning for any other code; NVIDIA's device plugin counts "
                f"{application} as application errors (an illegal memory access, a kernel that stopped) "
                "that leave the GPU healthy. dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS` holds the *last* code until the "
                "driver is reset, so the alert fires when the code changes and stays "
                "`gpu.xid_window`; the same code twice in a row is invisible. " + _joins_text()
            ),
            confirm=[
                f"The code and GPU: `{XID} > 0`; the raw series with its text: `DCGM_FI_DEV_XID_ERRORS != 0` "
                "(newer dcgm-exporters add `err_code` and `err_msg` labels)",
                "The kernel log of the node: `dmesg -T | grep -i xid` (`NVRM: Xid (PCI:...): 79, ...`)",
                "`nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` on the node; `nvidia-smi` fails "
                "outright for a GPU that fell off the bus",
                "Whether the engine died: VllmEngineDead (silenced by the critical tier) and the log's "
                "`CUDA error` lines",
            ],
            act=[
                "Critical: cordon or drain the node so nothing new lands on the GPU, let the vLLM "
                "replicas elsewhere take the load, then reset the GPU (`nvidia-smi -r` with nothing on "
                "it) or reboot the node; a code that comes back after a reset means a GPU to replace.",
                f"Warning ({application}): the program on the GPU faulted; if the engine restarted and "
                "serves, collect the log lines before the crash and the request that caused it; upgrade "
                "vLLM if it repeats.",
                "A GPU that fell off the bus can vanish from the exporter entirely (DCGM skips values it "
                "cannot read): then only VllmTargetDown / VllmEngineDead show it.",
            ],
        ),
        "VllmGpuMemoryNearlyFull": Section(
            meaning=(
                "The framebuffer of a GPU under a vLLM server has stayed more than "
                "`gpu.memory_full_threshold` used (used / (used + free + reserved), reserved where the "
                "exporter reports it). vLLM takes `--gpu-memory-utilization` (0.9 by default) of it at "
                "start-up for weights, activations and the KV cache, so usage above that comes from "
                "another process on the GPU, or from activations and CUDA graphs outgrowing the "
                "reserve; the next allocation may fail with CUDA out of memory (VllmOutOfMemory). "
                + _joins_text()
            ),
            confirm=[
                f"Used per GPU: `{MEMORY_USED_RATIO}`, `{MEMORY_USED_BYTES}`, `{MEMORY_FREE_BYTES}`",
                "Who holds it: `nvidia-smi --query-compute-apps=pid,process_name,used_memory "
                "--format=csv` on the node",
                "vLLM's own share: `--gpu-memory-utilization` in the server's arguments",
            ],
            act=[
                "Another process: move it off the GPU; a GPU serving vLLM should hold nothing else.",
                "vLLM itself: lower `--gpu-memory-utilization` by 0.05 to leave headroom, or lower "
                "`--max-num-seqs` / `--max-num-batched-tokens`; set "
                "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` against fragmentation.",
            ],
        ),
        "VllmGpuIdleWhileBusy": Section(
            meaning=(
                "Running requests have held the server's limit (`gpu.max_num_seqs`, or with 0 their peak "
                f"of the last {PEAK_WINDOW}) while its GPUs were busy less than `gpu.idle_utilization_below` "
                "of the time for `gpu.idle_for`. Slots are taken but nobody works on them: most often "
                "streams whose clients stopped reading, so their requests neither finish nor free the "
                "slot, and every new request queues behind them. With data-parallel engines the running "
                "count is the server's total: set `gpu.max_num_seqs` to the engines times `--max-num-seqs`. "
                + _joins_text()
            ),
            confirm=[
                "Running against the limit: `{running}`; waiting: `{waiting}`",
                f"GPU utilisation of the server: `{SERVER_UTILIZATION}`, per GPU `{UTILIZATION}`",
                "Tokens still coming out? the generation-throughput panel; none at all is VllmEngineStalled",
                "Open client connections to the server (`ss -tn state established '( sport = :8000 )'`): "
                "connections whose send queue (Send-Q) stays full are clients that stopped reading",
            ],
            act=[
                "Set a client and proxy read timeout so abandoned streams are cut, and put a request "
                "timeout in front of vLLM; a cut connection aborts its request and frees the slot.",
                "Restarting the server frees the slots at once; do it when the queue hurts.",
                "If the GPU is idle because it faulted, VllmGpuXidError (critical) says so and silences this.",
            ],
        ),
    }
