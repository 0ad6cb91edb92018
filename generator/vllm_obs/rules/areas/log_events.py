"""Log events: what only the log tells (the engine died, ran out of memory, failed to start),
read from the log exporter beside each server, and the exporter's own health."""

from __future__ import annotations

from ...exporter_series import LOG, select
from ...promql import selector
from ...vocabulary import Vocabulary
from ..declaration import DEAD_SERVER, PER_REPLICA, Declared, Inhibition
from ..model import Alert
from ..runbook_kit import Section
from ..scenarios.log_events import exporter_down_cases, log_event_cases

GROUP = "vllm-obs.log-events"

# A dead engine takes its server down (vLLM exits after EngineDeadError), and a server that
# never started is not "down" either: the same incident as the missing target.
_DOWN = Inhibition(alerts=("VllmTargetDown", "VllmMetricsAbsent"))


def declarations(v: Vocabulary) -> list[Declared]:
    on = bool(v.cfg.prometheus.log_exporters)
    return [
        Declared(
            name="VllmEngineDead",
            knobs=("alerts.log_event_window", "alerts.log_event_for"),
            on=on,
            build=_event_rule(
                "engine_dead",
                "VllmEngineDead",
                "The vLLM engine died.",
                "The log of {where} shows the engine died (EngineDeadError or a dead "
                "engine process); the first error above it is the cause.",
            ),
            panel="Engine deaths",
            runbook=Section(
                meaning=(
                    "The log exporter saw the engine die at runtime (`EngineDeadError`, `AsyncEngineDeadError`, "
                    "an engine process that died). A dead engine cannot report this on `/metrics`, so this "
                    "alert comes from the logs. It fires `alerts.log_event_for` after the event: by then a "
                    "death that took the model's capacity has paged, and this ticket is held back by it."
                ),
                confirm=[
                    "The log: **the first error above the first `EngineDeadError` is the cause** (the same "
                    "failure repeats 2-4 times across engine core, workers and API server)",
                    "The cause the log gave, in `vllm_log_engine_deaths_total{{reason}}` (the failures "
                    "dashboard's *Engine deaths by cause*): `out_of_memory` (VllmOutOfMemory), `gpu_fault` (a "
                    "CUDA fault: illegal memory access, ECC error, unspecified launch failure; check the GPU "
                    "with `nvidia-smi -q -d ECC` and Xid lines in `dmesg`), `nccl_timeout` (a collective stuck "
                    "past its timeout: one rank hung or the interconnect failed), `other` (the log named none: "
                    "a killed process, `exit code: -9`, or a cause above what the exporter read)",
                    '`vllm_log_events_total{{event="engine_dead"}}` on the failures dashboard',
                ],
                act=[
                    "Restart the server (current releases exit on their own; make sure something restarts them).",
                    "If one request kills it repeatedly, the `Dumping input data` lines before the crash "
                    "identify it; upgrade vLLM or block that input.",
                    "Kubernetes: the log of the container that died is `kubectl logs POD --previous`; "
                    "`kubectl get pod POD -o jsonpath='{.status.containerStatuses[0].lastState.terminated}'` "
                    "gives its exit code and reason.",
                ],
            ),
            scenarios=log_event_cases("engine_dead"),
            # A dead engine explains its own latency, queue, cache, stall and error alerts.
            inhibits=(Inhibition(symptoms=(DEAD_SERVER,)), _DOWN),
            symptoms=(PER_REPLICA,),
        ),
        Declared(
            name="VllmOutOfMemory",
            knobs=("alerts.log_event_window", "alerts.log_event_for"),
            on=on,
            build=_event_rule(
                "oom",
                "VllmOutOfMemory",
                "vLLM ran out of memory.",
                "The log of {where} shows an out-of-memory error (CUDA or CPU allocator).",
            ),
            panel="Out of memory",
            runbook=Section(
                meaning=(
                    "The log exporter saw an out-of-memory error: CUDA out of memory at runtime, vLLM's "
                    "`not enough GPU memory` wrapper, or the CPU backend's `DefaultCPUAllocator: can't allocate "
                    "memory`. One oversized batch can take the whole shared engine down with it."
                ),
                confirm=[
                    "The log: `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`",
                    "Whether the engine died too (VllmEngineDead, silenced by this alert)",
                ],
                act=[
                    "Leave headroom for activations: lower `--gpu-memory-utilization` by 0.05.",
                    "Smaller batches: lower `--max-num-batched-tokens` and `--max-num-seqs`; lower `--max-model-len`.",
                    "Fragmentation (`reserved but unallocated` is large): set "
                    "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.",
                    "CPU backend: raise the memory limit or lower `VLLM_CPU_KVCACHE_SPACE`.",
                    "Kubernetes: `lastState.terminated.reason: OOMKilled` (in `kubectl describe pod POD`) is the "
                    "kernel's killer on host memory, not the GPU: raise the container's memory limit; "
                    "`kubectl logs POD --previous` shows the CUDA error when it was the GPU.",
                ],
            ),
            scenarios=log_event_cases("oom"),
            # An out-of-memory that killed the engine, or the start it failed, notifies once, with
            # its cause (the log exporter counts an OOM during a start as both).
            inhibits=(Inhibition(alerts=("VllmEngineDead", "VllmStartupFailed")),),
            symptoms=(PER_REPLICA,),
        ),
        Declared(
            name="VllmStartupFailed",
            knobs=("alerts.log_event_window", "alerts.log_event_for"),
            on=on,
            build=_event_rule(
                "startup_failed",
                "VllmStartupFailed",
                "vLLM failed to start.",
                "The log of {where} shows the server failed to start (engine initialisation, "
                "or the KV cache cannot hold --max-model-len).",
            ),
            panel="Failed starts",
            runbook=Section(
                meaning=(
                    "The server never came up. The log exporter records why in "
                    "`vllm_log_startup_failures_total{reason}`: the KV cache cannot hold one request of "
                    "`--max-model-len`, no memory is left for cache blocks, the device has less free memory "
                    "than `--gpu-memory-utilization` asks for, or engine initialisation failed."
                ),
                confirm=[
                    "The log: `EngineCore failed to start.` then the root cause, e.g. `To serve at least one "
                    "request with the model's max seq len (N), (X GiB KV cache is needed, which is larger "
                    "than the available KV cache memory (Y GiB)`",
                    "`RuntimeError: Engine core initialization failed. See root cause above.`",
                ],
                act=[
                    "KV cache too small: lower `--max-model-len` (the error suggests a length that fits) or "
                    "raise `--gpu-memory-utilization`.",
                    "Free memory too low: another process holds the device; stop it or lower the utilization.",
                    "Anything else: the traceback above `Engine core initialization failed` names it.",
                    "Kubernetes: a pod in `CrashLoopBackOff` keeps the failed attempt's log in "
                    "`kubectl logs POD --previous`; a start that outlasts the startup probe is killed "
                    "(`lastState.terminated.reason: Error`, exit 137) before it can fail on its own.",
                ],
            ),
            scenarios=log_event_cases("startup_failed"),
            inhibits=(_DOWN,),
            symptoms=(PER_REPLICA,),
        ),
        Declared(
            name="VllmLogExporterDown",
            knobs=("alerts.log_exporter_down_for",),
            on=on,
            build=_exporter_down_rule,
            panel="Log exporter health",
            runbook=Section(
                meaning=(
                    "Prometheus cannot scrape the log exporter that watches this vLLM server. Out-of-memory, "
                    "dead-engine and failed-start alerts for it are blind until it is back."
                ),
                confirm=[
                    "`up{{{exporter_selector}}}`; the sidecar container's status and log",
                    "Its own health: `vllm_log_read_errors_total`, `vllm_log_unread_bytes`",
                ],
                act=["Restart the sidecar; check that the vLLM log file or pipe is mounted where it reads."],
            ),
            scenarios=exporter_down_cases,
        ),
    ]


def _event_rule(event: str, name: str, summary: str, description: str):
    def build(v: Vocabulary) -> list[Alert]:
        events = select(LOG, "vllm_log_events", v.exporter, event=event)
        return [
            # A warning that names the replica. Its `for` lets the capacity alerts that explain it
            # reach Alertmanager first: a live notification group sends a newcomer at its next
            # interval, without group_wait (docs/alerts.md, "Why a log event waits").
            Alert(
                name=name,
                expr=f"increase({events}[{v.cfg.alerts.log_event_window}]) > 0",
                for_=v.cfg.alerts.log_event_for,
                severity="warning",
                summary=summary,
                description=description.format(where=v.targets.target_ref),
                dashboard="failures",
            )
        ]

    return build


def _exporter_down_rule(v: Vocabulary) -> list[Alert]:
    a = v.cfg.alerts
    return [
        Alert(
            name="VllmLogExporterDown",
            expr=f"{selector('up', v.exporter)} == 0",
            for_=a.log_exporter_down_for,
            severity="warning",
            summary="The vLLM log exporter is down: OOM and dead-engine alerts are blind.",
            description=(
                f"The log exporter watching {v.targets.target_ref} has not answered scrapes for "
                f"{a.log_exporter_down_for}."
            ),
            dashboard="failures",
        )
    ]
