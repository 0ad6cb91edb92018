"""The GPU layer (`gpu.enabled`): dcgm-exporter's series tied to the vLLM server using each GPU, by
`join: instance` (the bundle's scrape job) or `join: pod` (pod labels matched to the vLLM target's;
docs/operations.md). Alerts read only these recording rules, which read only catalog/dcgm.yaml's.
"""

from __future__ import annotations

from ...config import BundleConfig
from ...dcgm import GPU_LABELS, MIB, critical_codes, gpu_selector, load_dcgm
from ...promql import number, selector
from ...vocabulary import GpuNames as G
from ...vocabulary import Scope, Vocabulary, by
from ..declaration import PER_REPLICA, Declared, Inhibition
from ..expressions import PEAK_WINDOW, percent, slots_full
from ..model import Alert, Group, Recording
from ..runbook_kit import Section
from ..scenarios.gpu import idle_cases, memory_cases, xid_cases

# Group names: the rule files are merged into one PrometheusRule and promtool orders groups by
# name, so the recording group and the alert group must not share one.
RECORDING_GROUP = "vllm-obs.gpu-recording"
GROUP = "vllm-obs.gpu"


def declarations(v: Vocabulary) -> list[Declared]:
    dcgm = load_dcgm()
    critical = ", ".join(f"{x.code} ({x.text})" for x in dcgm.critical)
    application = ", ".join(str(x.code) for x in dcgm.application)
    on = v.cfg.gpu.enabled
    return [
        Declared(
            name="VllmGpuXidError",
            knobs=("gpu.xid_window",),
            on=on,
            build=_xid_rules,
            panel="XID errors",
            runbook=Section(
                meaning=(
                    "A GPU a vLLM server runs on reported a new XID error: the NVIDIA driver's code for a "
                    'GPU fault, a warning that names the server and GPU. `fault="hardware"` for the codes '
                    f"that mean the hardware faulted or the GPU fell off the bus: {critical}; the engine on "
                    "that GPU is dead or cannot make progress, which is why it silences the server's "
                    "VllmEngineDead, VllmEngineStalled, VllmEngineHung and VllmGpuIdleWhileBusy (the model "
                    "pages through VllmModelCapacityLow if the server was needed). "
                    '`fault="application"` for any other code; NVIDIA\'s device plugin counts '
                    f"{application} as application errors (an illegal memory access, a kernel that stopped) "
                    "that leave the GPU healthy. dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS` holds the *last* code until the "
                    "driver is reset, so the alert fires when the code changes and stays "
                    "`gpu.xid_window`; the same code twice in a row is invisible. " + _joins_text()
                ),
                confirm=[
                    f"The code and GPU: `{G.xid} > 0`; the raw series with its text: `DCGM_FI_DEV_XID_ERRORS != 0` "
                    "(newer dcgm-exporters add `err_code` and `err_msg` labels)",
                    "The kernel log of the node: `dmesg -T | grep -i xid` (`NVRM: Xid (PCI:...): 79, ...`)",
                    "`nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` on the node; `nvidia-smi` fails "
                    "outright for a GPU that fell off the bus",
                    "Whether the engine died: VllmEngineDead (silenced by the hardware fault) and the log's "
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
            scenarios=xid_cases,
            symptoms=(PER_REPLICA,),
            # A critical XID (a GPU faulted or off the bus) is why the engine on it died, stalls, hangs or
            # idles its GPU: one warning, for the GPU. It carries the server's instance, so only that server
            # is silenced; latency, queue and error symptoms follow VllmEngineDead's own inhibition.
            inhibits=(
                Inhibition(
                    alerts=("VllmEngineDead", "VllmEngineStalled", "VllmEngineHung", "VllmGpuIdleWhileBusy"),
                    equal="target",
                    matchers=('fault="hardware"',),
                ),
            ),
        ),
        Declared(
            name="VllmGpuMemoryNearlyFull",
            knobs=("gpu.memory_full_threshold", "gpu.memory_full_for"),
            on=on,
            build=_memory_rule,
            panel="Framebuffer used",
            runbook=Section(
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
                    f"Used per GPU: `{G.memory_used_ratio}`, `{G.memory_used_bytes}`, `{G.memory_free_bytes}`",
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
            scenarios=memory_cases,
            symptoms=(PER_REPLICA,),
        ),
        Declared(
            name="VllmGpuIdleWhileBusy",
            knobs=("gpu.idle_utilization_below", "gpu.idle_for", "alerts.max_num_seqs"),
            on=on,
            build=_idle_while_busy,
            needs=("requests_running",),
            panel="GPU utilisation against running requests",
            runbook=Section(
                meaning=(
                    "Running requests have held the server's limit (`alerts.max_num_seqs`, or with 0 their peak "
                    f"of the last {PEAK_WINDOW}) while its GPUs were busy less than `gpu.idle_utilization_below` "
                    "of the time for `gpu.idle_for`. Slots are taken but nobody works on them: most often "
                    "streams whose clients stopped reading, so their requests neither finish nor free the "
                    "slot, and every new request queues behind them. With data-parallel engines the running "
                    "count is the server's total: set `alerts.max_num_seqs` to the engines times `--max-num-seqs`. "
                    + _joins_text()
                ),
                confirm=[
                    "Running against the limit: `{running}`; waiting: `{waiting}`",
                    f"GPU utilisation of the server: `{G.server_utilization}`, per GPU `{G.utilization}`",
                    "Tokens still coming out? the generation-throughput panel; none at all is VllmEngineStalled",
                    "Open client connections to the server (`ss -tn state established '( sport = :8000 )'`): "
                    "connections whose send queue (Send-Q) stays full are clients that stopped reading",
                ],
                act=[
                    "Set a client and proxy read timeout so abandoned streams are cut, and put a request "
                    "timeout in front of vLLM; a cut connection aborts its request and frees the slot.",
                    "Restarting the server frees the slots at once; do it when the queue hurts.",
                    'If the GPU is idle because it faulted, VllmGpuXidError (fault="hardware") says so and silences this.',
                ],
            ),
            scenarios=idle_cases,
            symptoms=(PER_REPLICA,),
        ),
    ]


def warnings(v: Vocabulary) -> list[str]:
    g = v.cfg.gpu
    if not (g.enabled and g.join == "pod" and g.exporters):
        return []
    targets = ", ".join(e.target for e in g.exporters)
    return [
        f"gpu.join is pod, so gpu.exporters ({targets}) is not scraped: the GPU operator's "
        f'ServiceMonitor scrapes dcgm-exporter and the rules read job="{g.job}"; set gpu.exporters: [] '
        "to silence this."
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


def recording_groups(v: Vocabulary) -> list[Group]:
    cfg = v.cfg
    if not cfg.gpu.enabled:
        return []
    sc = v.targets
    server = by(sc.target)
    # Where the exporter has no FB_RESERVED (older or custom collectors files) the total is
    # used + free; `or` falls back to 0 for that GPU instead of dropping it.
    reserved = _per_gpu("DCGM_FI_DEV_FB_RESERVED", cfg, sc, f" * {MIB}")
    rules = (
        Recording(G.utilization, _per_gpu("DCGM_FI_DEV_GPU_UTIL", cfg, sc, " / 100")),
        Recording(G.memory_used_bytes, _per_gpu("DCGM_FI_DEV_FB_USED", cfg, sc, f" * {MIB}")),
        Recording(G.memory_free_bytes, _per_gpu("DCGM_FI_DEV_FB_FREE", cfg, sc, f" * {MIB}")),
        Recording(
            G.memory_used_ratio,
            f"{G.memory_used_bytes}\n/\n(\n  {G.memory_used_bytes} + {G.memory_free_bytes}\n  + (\n    "
            + reserved.replace("\n", "\n    ")
            + f"\n    or\n    0 * {G.memory_free_bytes}\n  )\n)",
        ),
        Recording(G.temperature, _per_gpu("DCGM_FI_DEV_GPU_TEMP", cfg, sc)),
        Recording(G.power, _per_gpu("DCGM_FI_DEV_POWER_USAGE", cfg, sc)),
        Recording(G.xid, _per_gpu("DCGM_FI_DEV_XID_ERRORS", cfg, sc)),
        Recording(G.server_utilization, f"avg by ({server}) ({G.utilization})"),
        Recording(G.server_memory_used, f"max by ({server}) ({G.memory_used_ratio})"),
    )
    return [Group(RECORDING_GROUP, rules)]


# -- alerts --------------------------------------------------------------------------------


def _gpu_where(sc: Scope) -> str:
    return (
        f"GPU {{{{ $labels.gpu }}}} ({{{{ $labels.modelName }}}}, {{{{ $labels.UUID }}}}) of {sc.target_ref}"
    )


def _application_codes() -> str:
    return ", ".join(str(x.code) for x in load_dcgm().application)


def _is_critical_xid() -> str:
    return "(\n  " + "\n  or ".join(f"{G.xid} == {code}" for code in critical_codes()) + "\n)"


def _changed(v: Vocabulary) -> str:
    return f"changes({G.xid}[{v.cfg.gpu.xid_window}]) > 0"


def _xid_rules(v: Vocabulary) -> list[Alert]:
    sc = v.targets
    return [
        Alert(
            name="VllmGpuXidError",
            # A new non-zero code within the window; the gauge keeps its last code for good,
            # so an old fault (or a GPU that came up with one) stays quiet.
            expr=f"{_is_critical_xid()}\nand\n{_changed(v)}",
            severity="warning",
            labels={"fault": "hardware"},
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
            expr=f"{G.xid} > 0\nunless\n{_is_critical_xid()}\nand\n{_changed(v)}",
            severity="warning",
            labels={"fault": "application"},
            summary="A GPU under vLLM reported an XID error.",
            description=(
                f"{_gpu_where(sc)} reported XID {{{{ $value }}}}, not a hardware fault; codes like "
                f"{_application_codes()} come from the program on the GPU (an illegal memory access, a "
                "kernel that stopped): check whether the engine survived."
            ),
            dashboard="instance",
        ),
    ]


def _memory_rule(v: Vocabulary) -> list[Alert]:
    g, sc = v.cfg.gpu, v.targets
    return [
        Alert(
            name="VllmGpuMemoryNearlyFull",
            expr=f"{G.memory_used_ratio} > {number(g.memory_full_threshold)}",
            for_=g.memory_full_for,
            severity="warning",
            summary="A GPU under vLLM is nearly out of framebuffer memory.",
            description=(
                f"{{{{ $value | humanizePercentage }}}} of the framebuffer of {_gpu_where(sc)} is used "
                f"(threshold {percent(g.memory_full_threshold)}, for {g.memory_full_for}); the next "
                "allocation may fail with CUDA out of memory. vLLM takes --gpu-memory-utilization of it: "
                "what comes on top is another process, or activations outgrowing vLLM's reserve."
            ),
            dashboard="instance",
            threshold=g.memory_full_threshold,
        )
    ]


def _idle_while_busy(v: Vocabulary) -> list[Alert]:
    g, sc = v.cfg.gpu, v.targets
    full, limit = slots_full(v)
    return [
        Alert(
            name="VllmGpuIdleWhileBusy",
            expr=f"{full}\nand on ({by(sc.target)})\n{G.server_utilization} < {number(g.idle_utilization_below)}",
            for_=g.idle_for,
            severity="warning",
            summary="vLLM's request slots are all held while its GPUs sit idle.",
            description=(
                f"{{{{ $value }}}} requests are running on {sc.where}, at {limit}, while its GPUs are busy "
                f"less than {percent(g.idle_utilization_below)} of the time, for {g.idle_for}: the slots "
                "are held by requests nobody works on, most often streams whose clients stopped reading."
            ),
            dashboard="instance",
            threshold=g.idle_utilization_below,
        )
    ]


# -- runbook sections ----------------------------------------------------------------------


def _joins_text() -> str:
    return (
        "The GPU is tied to the vLLM server using it: with `gpu.join: instance` (compose, one vLLM "
        "per host) the dcgm-exporter scrape job gives the exporter's series that server's `instance`; "
        "with `gpu.join: pod` (Kubernetes) dcgm-exporter labels each allocated GPU with its pod "
        "(`exported_namespace`/`exported_pod` under the GPU operator's ServiceMonitor, `namespace`/`pod` "
        "with honorLabels) and the recording rules take the `instance` of the vLLM target of that pod."
    )
