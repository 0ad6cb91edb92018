"""Probe: the canary's one-token request, which sees a hung engine while /health answers 200,
and the probe's own health."""

from __future__ import annotations

from ...exporter_series import PROBE, select
from ...promql import selector
from ...vocabulary import Vocabulary, by
from ..declaration import DEAD_SERVER, PER_REPLICA, Declared, Inhibition
from ..expressions import processed_tokens, unless_asleep
from ..model import Alert
from ..runbook_kit import Section
from ..scenarios.probe import hung_cases, probe_down_cases

GROUP = "vllm-obs.probe"

# Probe failures that mean the server cannot serve (a hang, an engine that errors), as
# opposed to a probe the server turns away (a wrong model name or key: 4xx, bad body).
HUNG_REASONS = "timeout|http_5xx"
REJECTED_REASONS = "http_4xx|bad_body|error"


def declarations(v: Vocabulary) -> list[Declared]:
    on = bool(v.cfg.prometheus.probes)
    return [
        Declared(
            name="VllmEngineHung",
            knobs=("alerts.hung_for", "alerts.hung_window", "alerts.hung_progress_window"),
            on=on,
            build=_engine_hung,
            uses=("generation_tokens",),
            panel="Canary probe success",
            runbook=Section(
                meaning=(
                    "The canary probe's one-token request has failed for a while with timeouts or server errors, "
                    "while `/health` still answers 200. The API server is alive but the engine loop serves "
                    "nothing: an NCCL or CUDA hang, a deadlock, a stopped engine process. On vLLM 0.32 a "
                    "stopped `EngineCore` looks exactly like this: `/health` and `/ping` answer 200, requests "
                    "hang until the client gives up, and every engine gauge on `/metrics` freezes at its last "
                    "value, so no metric-based alert (not even VllmEngineStalled, when it hung while idle) and "
                    "no Kubernetes probe on `/health` sees it. A server that is merely saturated times the "
                    "probe out too (its request waits in the queue like any other) but keeps generating "
                    "tokens: the alert stays silent while any token came out in the last "
                    "`alerts.hung_progress_window`, and the queue and latency alerts say why it is slow. An "
                    'engine put to sleep (sleep mode, `vllm:engine_sleep_state{sleep_state="awake"}` 0) '
                    "fails the canary by design: it is not hung, and neither this alert nor the capacity page "
                    "counts it."
                ),
                confirm=[
                    'The probe: `{probe_success}` is 0 and `{probe_failures}` grows with `reason="timeout"`; '
                    "`{probe_health}` is 1",
                    "By hand: `curl -m 10 http://HOST:PORT/v1/completions -H 'content-type: application/json' "
                    '-d \'{{"model": "NAME", "prompt": "ping", "max_tokens": 1}}\'` times out while '
                    "`curl http://HOST:PORT/health` answers at once",
                    "Frozen gauges: `{running_series}` and `{waiting_series}` do not move, "
                    "`rate({generation_series}[5m])` is 0",
                    "Where it is stuck: `py-spy dump --pid <pid>` of the `VLLM::EngineCore` process (and of each "
                    "`VllmWorker` process with tensor parallelism); a process in state `T` (`ps -o stat`) was "
                    "stopped; `D` waits on the device; NCCL hangs show `Watchdog caught collective operation "
                    "timeout` in the log after its timeout",
                ],
                act=[
                    "Take the replica out of the load balancer now: it accepts connections it will never answer.",
                    "Save the evidence first (a py-spy dump of every engine and worker process, the log), then "
                    "restart the server; a hung engine does not recover by itself. If the probe recovers on its "
                    "own within a minute or two (a long stop-the-world pause), do not restart, but find the pause.",
                    "On Kubernetes, gate readiness on the canary, not `/health`: the shipped Deployment's "
                    "readinessProbe asks the probe sidecar's `/ready` (503 once `--not-ready-after` canaries in "
                    "a row failed while the engine's token counters stood still), which takes a hung pod out of "
                    "its Service's endpoints and leaves a merely saturated one in; liveness stays on "
                    "`/health` so the kubelet does not restart it before you have the dump.",
                    "Repeated hangs under tensor parallelism: set `NCCL_DEBUG=INFO` and check the interconnect "
                    "(XID errors on the GPU dashboard) and the driver.",
                ],
            ),
            scenarios=hung_cases,
            # A hung engine explains its own latency, queue, cache, stall and error alerts.
            inhibits=(Inhibition(symptoms=(DEAD_SERVER,)),),
            symptoms=(PER_REPLICA,),
        ),
        Declared(
            name="VllmProbeDown",
            knobs=("alerts.probe_down_for", "alerts.hung_window"),
            on=on,
            build=_probe_down_rules,
            panel="Canary probe failures by reason",
            runbook=Section(
                meaning=(
                    '`cause="down"`: Prometheus cannot scrape a vllm-probe. `cause="rejected"`: vLLM answers the '
                    "probe's one-token request with a 4xx or an unusable body, so the probe never succeeds. Either "
                    "way VllmEngineHung is blind for the servers that probe watches."
                ),
                confirm=[
                    "`up{{{probe_selector}}}`; the probe's own log (one line per state change per target)",
                    "Failures by reason: `{probe_failures}`: `http_4xx` is a wrong `--model` (404) or API key "
                    "(401), or an embedding model probed for completions (404), `bad_body` a proxy answering "
                    "instead of vLLM",
                ],
                act=[
                    "Start the probe again (it is a sidecar in the compose stack and the Kubernetes example).",
                    "Give it the served model name (`--model`, or let it discover the first id of `/v1/models`) "
                    "and the same API key file vLLM uses (`--api-key-file`); `--mode embed` for an embedding "
                    "(pooling) model.",
                ],
            ),
            scenarios=probe_down_cases,
        ),
    ]


def _failing(v: Vocabulary) -> str:
    return f"max by ({by(v.targets.target_model)}) ({select(PROBE, 'vllm_probe_success', v.probe)}) == 0"


def _failures(v: Vocabulary, reasons: str) -> str:
    series = select(PROBE, "vllm_probe_failures", v.probe, reason=f"~{reasons}")
    return f"sum by ({by(v.targets.target_model)}) (increase({series}[{v.cfg.alerts.hung_window}])) > 0"


def _where(v: Vocabulary) -> str:
    return f"{{{{ $labels.model_name }}}} on {v.targets.target_ref}"


def _engine_hung(v: Vocabulary) -> list[Alert]:
    a, sc = v.cfg.alerts, v.targets
    keyed, target = by(sc.target_model), by(sc.target)
    hung = (
        f"{_failing(v)}\nand on ({keyed})\n{_failures(v, HUNG_REASONS)}\n"
        f"and on ({target})\nmax by ({target}) ({select(PROBE, 'vllm_probe_health_up', v.probe)}) == 1"
    )
    processed = processed_tokens(v, a.hung_progress_window, target)
    if processed:
        # The probe's one-token request waits in vLLM's queue like any other: on a saturated
        # server it times out too. A hung engine generates nothing; a saturated one keeps going,
        # and the queue and latency alerts name its real cause.
        hung += f"\nunless on ({target})\n{processed} > 0"
    hung += unless_asleep(v, target)
    return [
        Alert(
            name="VllmEngineHung",
            expr=hung,
            for_=a.hung_for,
            severity="warning",
            summary="vLLM answers /health but cannot serve a one-token request: the engine is hung.",
            description=(
                f"The canary probe of {_where(v)} has failed for {a.hung_for} (timeouts or server errors) while "
                "/health still answers 200. Requests hang; restart the server after taking a py-spy dump."
            ),
            dashboard="failures",
        )
    ]


def _probe_down_rules(v: Vocabulary) -> list[Alert]:
    a = v.cfg.alerts
    keyed = by(v.targets.target_model)
    return [
        Alert(
            name="VllmProbeDown",
            expr=f"{selector('up', v.probe)} == 0",
            for_=a.probe_down_for,
            severity="warning",
            labels={"cause": "down"},
            summary="A vLLM canary probe is down: a hung engine would go unnoticed.",
            description=(
                f"The vllm-probe at {v.targets.target_ref} has not answered scrapes for "
                f"{a.probe_down_for}, so VllmEngineHung cannot fire for the servers it watches."
            ),
            dashboard="failures",
        ),
        Alert(
            name="VllmProbeDown",
            expr=f"{_failing(v)}\nand on ({keyed})\n{_failures(v, REJECTED_REASONS)}",
            for_=a.probe_down_for,
            severity="warning",
            labels={"cause": "rejected"},
            summary="vLLM turns the canary probe away: a hung engine would go unnoticed.",
            description=(
                f"The canary probe of {_where(v)} gets 4xx or unusable answers "
                f"for {a.probe_down_for}: check its model name and API key."
            ),
            dashboard="failures",
        ),
    ]
