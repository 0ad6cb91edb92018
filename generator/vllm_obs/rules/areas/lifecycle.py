"""Lifecycle: starts that take too long or never finish, and a release the bundle was not
generated for, as the log exporter reads them from the log."""

from __future__ import annotations

import re

from ...exporter_series import LOG, select
from ...promql import number, seconds
from ...vocabulary import Vocabulary, by
from ..declaration import PER_REPLICA, Declared, Inhibition
from ..expressions import server_state, since_start
from ..model import Alert
from ..runbook_kit import Section
from ..scenarios.lifecycle import restart_loop_cases, startup_slow_cases, version_drift_cases

GROUP = "vllm-obs.lifecycle"


def declarations(v: Vocabulary) -> list[Declared]:
    on = bool(v.cfg.prometheus.log_exporters)
    return [
        Declared(
            name="VllmStartupSlow",
            knobs=("alerts.expected_startup",),
            on=on,
            build=_startup_slow_rules,
            panel="Server state",
            runbook=Section(
                meaning=(
                    "The log shows the server started (a start marker) but not `Application startup complete.` "
                    "within the expected start-up time (`alerts.expected_startup`). vLLM "
                    "binds its port only once the model is loaded, so until then Prometheus cannot scrape it: "
                    "VllmTargetDown stays quiet while a start is in progress and this alert watches its length "
                    "instead."
                ),
                confirm=[
                    "State and phase: `{state}`; the start began `{since_start}` seconds ago",
                    "Where the time goes, per past start: `{startup_durations}` (weights, engine_init, total)",
                    "The log: `Starting to load model` then `Loading weights took`, `init engine (profile, create kv "
                    "cache, warmup model) took`; a start that stops between two of them is stuck there (weights "
                    "download, slow storage, CUDA-graph capture, profiling)",
                ],
                act=[
                    "A slow but healthy start (a larger model, a cold cache): raise `alerts.expected_startup` to "
                    "the measured total start time plus a margin, and size the Kubernetes probes from the same "
                    "figure: the `startupProbe` budget (failureThreshold x periodSeconds) must exceed the "
                    "model-load time by at least 30 s, or the kubelet kills a healthy server in a restart loop.",
                    "Stuck on weights: check the download (HF_TOKEN, the network, disk space) or pre-fetch the "
                    "weights to a volume.",
                    "Stuck on warm-up or CUDA-graph capture: try `--enforce-eager` to confirm, then lower "
                    "`--max-num-seqs` or the capture sizes.",
                ],
            ),
            scenarios=startup_slow_cases,
        ),
        Declared(
            name="VllmRestartLoop",
            knobs=("alerts.restart_loop_starts", "alerts.restart_loop_window"),
            on=on,
            build=_restart_loop_rule,
            panel="Server state",
            runbook=Section(
                meaning=(
                    "The server started several times within the window (`alerts.restart_loop_starts` in "
                    "`alerts.restart_loop_window`) without once becoming ready. Something makes every start fail: a "
                    "model that does not fit (`--max-model-len` larger than the KV cache can hold), a bad flag, "
                    "missing weights, no device. Restarting again will not help, and each attempt pages nobody on "
                    "its own because the server never came up."
                ),
                confirm=[
                    "Starts in the window: `{starts}`; failed starts by reason: `{startup_failures}`",
                    "The log of the last attempt: the first `ValueError` or `RuntimeError` after `EngineCore failed "
                    "to start` says why (e.g. `To serve at least one request with the model's max seq len ... "
                    "you need ... KV cache`)",
                ],
                act=[
                    "Fix the cause the log names; for a model that does not fit, lower `--max-model-len`, raise "
                    "`--gpu-memory-utilization`, or use more devices (`--tensor-parallel-size`).",
                    "Stop the orchestrator from retrying in a tight loop (Kubernetes backs off by itself; systemd "
                    "`RestartSec=`/`StartLimitBurst=`), so the log keeps the first failure.",
                ],
            ),
            scenarios=restart_loop_cases,
            symptoms=(PER_REPLICA,),
            # A server that keeps failing to start warns once, for the loop: each failed start,
            # its slow start and its unreachable target are the same incident.
            inhibits=(
                Inhibition(
                    alerts=("VllmStartupFailed", "VllmStartupSlow", "VllmTargetDown", "VllmMetricsAbsent")
                ),
            ),
        ),
        Declared(
            name="VllmVersionDrift",
            on=on,
            build=_version_drift_rule,
            panel="vLLM version (from the log)",
            runbook=Section(
                meaning=(
                    "The log announces a vLLM release other than the ones this bundle was generated for. vLLM "
                    "renames and removes metrics between minor releases, so some panels may go blank and some "
                    "alerts may stop matching on the day of the upgrade."
                ),
                confirm=[
                    "The announced release: `{version_info}`",
                    "What the bundle was built for: the `Source:` line at the top of each generated file",
                    "`vllm-obs doctor --prometheus URL` lists the series the bundle reads that the server no longer has",
                ],
                act=[
                    "Regenerate the bundle against the upgraded server (`vllm-obs generate --metrics-url "
                    "http://HOST:PORT/metrics`) and roll it out; the recording-rule names stay the same, so "
                    "dashboards keep working.",
                ],
            ),
            scenarios=version_drift_cases,
        ),
    ]


def _starting(v: Vocabulary) -> str:
    return f"max by ({by(v.targets.target)}) ({server_state(v, 'starting|loading')}) == 1"


def _startup_slow_rules(v: Vocabulary) -> list[Alert]:
    a, sc = v.cfg.alerts, v.targets
    target = by(sc.target)
    limit = int(seconds(a.expected_startup))
    return [
        Alert(
            name="VllmStartupSlow",
            expr=f"({since_start(v)}) > {limit}\nand on ({target})\n{_starting(v)}",
            severity="warning",
            summary="vLLM is taking longer than expected to start.",
            description=(
                f"{sc.target_ref} has been starting for {{{{ $value | humanizeDuration }}}}, more than "
                f"the expected {a.expected_startup} (log: loading weights, profiling, warm-up); it does "
                "not serve yet."
            ),
            dashboard="failures",
            threshold=limit,
        )
    ]


def _restart_loop_rule(v: Vocabulary) -> list[Alert]:
    a, sc = v.cfg.alerts, v.targets
    target = by(sc.target)
    begun = select(LOG, "vllm_log_events", v.exporter, event="startup_begin")
    window = a.restart_loop_window
    # increase(), not max - min over the window: the counter starts again at 0 when the exporter restarts.
    starts = f"sum by ({target}) (increase({begun}[{window}]))"
    return [
        Alert(
            name="VllmRestartLoop",
            expr=(
                f"{starts} >= {number(a.restart_loop_starts)}\n"
                f"unless on ({target})\n"
                f"max by ({target}) (max_over_time({server_state(v, 'ready')}[{window}])) == 1"
            ),
            severity="warning",
            summary="vLLM keeps restarting and never becomes ready.",
            description=(
                f"{sc.target_ref} started {{{{ $value }}}} times in the last {window} without once "
                "becoming ready: a configuration that cannot work (a model that does not fit, a bad flag) "
                "or a crash during start-up. Restarting again will not help."
            ),
            dashboard="failures",
            threshold=a.restart_loop_starts,
        )
    ]


def _version_drift_rule(v: Vocabulary) -> list[Alert]:
    versions = v.res.source.release_versions
    if not versions:
        return []  # a source with no release to compare against (a saved exposition)
    sc = v.targets
    # A minor release and its patches: the metric set changes with minor releases.
    pattern = "|".join(re.escape(version) + r"(\..*)?" for version in versions)
    info = select(LOG, "vllm_log_vllm_version_info", v.exporter, version=f"!~{pattern}")
    return [
        Alert(
            name="VllmVersionDrift",
            expr=(f"max by ({by(sc.target)}, version) ({info}) == 1"),
            # A warning, read in the chat: renamed series leave panels blank and alerts blind,
            # which nothing else says.
            severity="warning",
            summary="vLLM runs a release this bundle was not generated for.",
            description=(
                f"The log of {sc.target_ref} announces vLLM {{{{ $labels.version }}}}; this bundle was "
                f"generated for {', '.join(versions)}. Metric names may have changed: regenerate the "
                "bundle with `vllm-obs generate --metrics-url` against the upgraded server."
            ),
            dashboard="failures",
        )
    ]
