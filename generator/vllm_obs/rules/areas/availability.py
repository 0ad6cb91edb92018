"""Availability: a server that cannot be scraped, exposes no vLLM series, or serves nothing."""

from __future__ import annotations

from ...promql import selector
from ...vocabulary import Vocabulary, by
from ..declaration import DEAD_SERVER, PER_REPLICA, Declared, Inhibition
from ..expressions import planned, processed_tokens, unless_asleep
from ..model import Alert
from ..runbook_kit import Section
from ..scenarios.availability import PARTITION_MEMORY, absent_cases, stalled_cases, target_down_cases

GROUP = "vllm-obs.availability"


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        Declared(
            name="VllmEngineStalled",
            knobs=("alerts.stall_window", "alerts.stall_for"),
            build=_engine_stalled,
            needs=("generation_tokens", "requests_waiting", "requests_running"),
            panel="Requests in flight vs tokens generated",
            runbook=Section(
                meaning=(
                    "Requests are waiting or running but no token has been generated for the whole window: "
                    "the engine loop is hung or dead while the HTTP server still answers. On vLLM 0.8 `/health` "
                    "keeps returning 200 in this state, and such servers have stayed in load balancers for hours. "
                    'An engine put to sleep (sleep mode: `vllm:engine_sleep_state{sleep_state="awake"}` is 0) '
                    "makes no progress by design and is left out."
                ),
                confirm=[
                    "No tokens: `sum by (instance) (rate({generation_series}[5m])) == 0` with `{waiting}` > 0",
                    "Log: `EngineCore encountered a fatal error.`, `Engine core proc ... died unexpectedly`, "
                    "an NCCL `Watchdog caught collective operation timeout`, or nothing at all (a deadlock)",
                    "`py-spy dump --pid <EngineCore pid>` shows where the loop is stuck",
                    "From vLLM 0.20, `vllm:num_requests_waiting_by_reason`: a queue of `deferred` requests with "
                    "nothing running is the scheduler no longer admitting (vLLM issue #53130: it stops once running "
                    "and deferred requests reach `--max-num-seqs`), not a dead engine",
                    "Requests waiting with none running, `{kv_series}` at 0 and no token for minutes is admission "
                    "that stopped while the engine lives (`/health` 200): vllm-project/vllm-metal#479 (waiting 6, "
                    'all `reason="capacity"`, running 0, KV cache 0% for an hour: the scheduler never re-admits '
                    "after a stall), and vLLM pull request #54348 (open: an admission deadlock: with nothing "
                    "running, a request at the head of the waiting queue in a blocked-waiting status, waiting for "
                    "its grammar for one, keeps every request behind it from being admitted)",
                ],
                act=[
                    "Restart the server: it does not recover by itself. Save the log and a py-spy dump first.",
                    "Take the replica out of the load balancer; probe readiness with a real completion, not `/health`.",
                ],
            ),
            scenarios=stalled_cases,
            symptoms=(DEAD_SERVER, PER_REPLICA),
        ),
        Declared(
            name="VllmTargetDown",
            knobs=("alerts.target_down_for", "alerts.planned_stop_grace"),
            build=_target_down_rule,
            panel="Targets down",
            runbook=Section(
                meaning=(
                    "Prometheus cannot scrape the vLLM server: the process is gone or unreachable. Where a log "
                    "exporter watches the server, a server whose log shows it starting (loading its model, not yet "
                    "listening) or stopped on purpose (within `alerts.planned_stop_grace`) does not page; "
                    "VllmStartupSlow and VllmRestartLoop cover starts that take too long or never finish."
                ),
                confirm=[
                    "`up{{{selector}}}`; the target's error on Prometheus' Targets page",
                    "Container or unit status and exit code: 137 is the kernel OOM killer (`dmesg`), 0 after "
                    "an engine death (vLLM shuts down cleanly after `EngineDeadError`)",
                    "The failures dashboard: an engine death or failed start logged just before",
                ],
                act=[
                    "Restart it. Because a dead engine exits with status 0, systemd `Restart=on-failure` does "
                    "not restart it: use `Restart=always` (Kubernetes restarts it anyway).",
                    "If it keeps dying, follow VllmEngineDead / VllmOutOfMemory / VllmStartupFailed.",
                ],
            ),
            scenarios=target_down_cases,
            # An unreachable server explains its own latency, queue, cache, stall and error alerts.
            inhibits=(Inhibition(symptoms=(DEAD_SERVER,)),),
            symptoms=(PER_REPLICA,),
        ),
        Declared(
            name="VllmMetricsAbsent",
            knobs=("alerts.metrics_absent_for",),
            build=_metrics_absent,
            uses=("requests_running",),
            panel="Engines reporting",
            runbook=Section(
                meaning=(
                    '`scope="job"`: Prometheus scrapes no target of the vLLM job at all, so every other '
                    'alert is blind. `scope="target"`: a target answers scrapes but has no vLLM series: '
                    "it is not the vLLM API port, a proxy answers instead, or vLLM's metrics are broken "
                    "(a multiprocess `PROMETHEUS_MULTIPROC_DIR` on a bad volume). "
                    '`scope="namespace"` or `scope="cluster"` (pod labels or multi-cluster on): one '
                    "namespace or cluster had targets within the last hour and has none now, while others "
                    "still report; it resolves an hour after servers were removed on purpose."
                ),
                confirm=["`up{{{selector}}}` and `count by (instance) ({running_series}{{{selector}}})`"],
                act=[
                    "Fix service discovery or the target list (prometheus.yml), or point the target at the "
                    "vLLM API server's port and `/metrics`.",
                ],
            ),
            scenarios=absent_cases,
        ),
    ]


def _up(v: Vocabulary) -> str:
    return selector("up", v.vllm)


def _engine_stalled(v: Vocabulary) -> list[Alert]:
    a, sc, n = v.cfg.alerts, v.scope, v.names
    processed = processed_tokens(v, a.stall_window, by(sc.instance_model))
    expr = f"({n.requests_waiting} + {n.requests_running}) > 0\nand {sc.on_instance_model}\n{processed} == 0"
    expr += unless_asleep(v, by(sc.instance_model))
    return [
        Alert(
            name="VllmEngineStalled",
            expr=expr,
            for_=a.stall_for,
            severity="warning",
            summary="vLLM has requests in flight but processes no tokens: the engine is stuck.",
            description=(
                f"{{{{ $value }}}} requests are in flight on {sc.where}, yet no prompt token was processed and no token "
                f"generated for {a.stall_window}; /health may still answer 200. Restart the server."
            ),
            dashboard="failures",
        )
    ]


def _target_down_rule(v: Vocabulary) -> list[Alert]:
    a, sc = v.cfg.alerts, v.scope
    down = f"{_up(v)} == 0"
    if v.cfg.prometheus.log_exporters:
        # A server stopped on purpose, or starting again after such a stop (or for the first
        # time), is not down: the log says which (VllmStartupSlow and VllmRestartLoop watch the
        # starts; a planned stop warns once its grace is over). A start after a crash is down.
        down += f"\nunless on ({by(sc.target)})\n{planned(v)}"
    return [
        Alert(
            name="VllmTargetDown",
            expr=down,
            for_=a.target_down_for,
            severity="warning",
            summary="Prometheus cannot scrape a vLLM server.",
            description=(
                f"{sc.target_ref} (job {{{{ $labels.job }}}}) has not answered scrapes "
                f"for {a.target_down_for}: the server is down or unreachable."
            ),
            dashboard="overview",
        )
    ]


def _metrics_absent(v: Vocabulary) -> list[Alert]:
    a, sc, up = v.cfg.alerts, v.scope, _up(v)
    out = [
        Alert(
            name="VllmMetricsAbsent",
            expr=f"absent({up})",
            for_=a.metrics_absent_for,
            severity="warning",
            labels={"scope": "job"},
            summary="Prometheus scrapes no vLLM target at all.",
            description=(
                # absent() keeps the selector's equality labels, so the job is on the alert.
                f'No target of job "{{{{ $labels.job }}}}" has been scraped for {a.metrics_absent_for}: '
                "service discovery or the scrape configuration is broken."
            ),
            dashboard="overview",
        )
    ]
    if sc.partitions:
        out.append(_partition_absent(v))
    if "requests_running" in v.res.signals:
        running = selector(v.res["requests_running"].name, v.vllm)
        out.append(
            Alert(
                name="VllmMetricsAbsent",
                expr=f"{up} == 1\nunless on ({by(sc.instance)})\ngroup by ({by(sc.instance)}) ({running})",
                for_=a.metrics_absent_for,
                severity="warning",
                labels={"scope": "target"},
                summary="A vLLM target answers scrapes but exposes no vLLM series.",
                description=(
                    f"{sc.target_ref} answers scrapes but its vLLM series have been gone for "
                    f"{a.metrics_absent_for}: it is not a vLLM server, or its metrics are broken."
                ),
                dashboard="overview",
            )
        )
    return out


def _partition_absent(v: Vocabulary) -> Alert:
    """absent() is fleet-wide: where one Prometheus (or ruler) serves several clusters or
    namespaces under one job, one of them losing every target would go unseen."""
    a, sc, up = v.cfg.alerts, v.scope, _up(v)
    keep = by((*(label for label, _ in sc.partitions), "job"))
    names = " and ".join(var for _, var in sc.partitions)
    return Alert(
        name="VllmMetricsAbsent",
        # Not while the whole job is absent: the job-wide alert above tells that once.
        expr=(
            f"group by ({keep}) (max_over_time({up}[{PARTITION_MEMORY}]))\n"
            f"unless on ({keep}) group by ({keep}) ({up})\n"
            f"unless on (job) absent({up})"
        ),
        for_=a.metrics_absent_for,
        severity="warning",
        labels={"scope": "namespace" if sc.namespace else "cluster"},
        summary=f"Prometheus scraped vLLM targets in this {names} within the last hour and scrapes none now.",
        description=(
            f'No target of job "{{{{ $labels.job }}}}"{sc.in_cluster} has been scraped for '
            f"{a.metrics_absent_for}, where there were some within {PARTITION_MEMORY}: its service discovery "
            "or scrape configuration broke, or its servers were removed (then it resolves by itself)."
        ),
        dashboard="overview",
    )
