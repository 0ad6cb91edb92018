"""alerts/runbooks.md: one section per alert, with the queries and log lines to confirm it
and the vLLM settings that fix it. Each alert's runbook_url points at its section."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import BundleConfig
from ..links import DASHBOARDS
from ..signals import Resolution
from . import features, gpu
from .model import Alert, Group
from .names import Names


@dataclass(frozen=True)
class Section:
    meaning: str
    confirm: list[str]  # markdown bullets; {placeholders} filled from the bundle
    act: list[str]


SECTIONS: dict[str, Section] = {
    "VllmHighTimeToFirstToken": Section(
        meaning=(
            "Users wait too long for the first token. The 95th percentile time to first token of "
            "one replica and model has stayed above the threshold. Time to first token is queue time "
            "plus prefill time, so the cause is almost always one of: requests queueing, long prompts, "
            "or KV-cache pressure causing preemptions."
        ),
        confirm=[
            "p95 per replica: `{ttft_p95}`",
            "Is it queueing? `{queue_p95}` and `{waiting}`",
            "Is it prefill? `{prefill_p95}` and the prompt-length panel of the *Instance and model* dashboard",
            "Is the KV cache full? `{kv}` (see VllmKVCachePressure)",
        ],
        act=[
            "Queue time dominates and the KV cache has room: the scheduler is the limit, raise "
            "`--max-num-seqs` / `--max-num-batched-tokens` (see VllmSchedulerThrottled).",
            "Queue time dominates and the KV cache is full: add replicas behind the load balancer, or "
            "shed load; one server cannot go faster.",
            "Prefill dominates: long prompts. Enable chunked prefill (`--enable-chunked-prefill`) so "
            "decodes are not blocked, and prefix caching (`--enable-prefix-caching`) for shared prompts.",
        ],
    ),
    "VllmHighTimePerOutputToken": Section(
        meaning=(
            "Tokens stream slowly: the 95th percentile time between two output tokens of one replica "
            "and model has stayed above the threshold. Decode steps are slow because the batch is "
            "large, requests are being preempted and recomputed, or the device is contended."
        ),
        confirm=[
            "p95 per replica: `{itl_p95}`",
            "Batch size: `{running}`; preemptions: `{preemptions}`",
            "Tokens per engine step: the iteration-tokens panel of the *KV cache and scheduler* dashboard",
        ],
        act=[
            "Lower `--max-num-seqs` to trade throughput for per-token latency.",
            "If preemptions are high, treat the KV cache first (VllmKVCachePressure).",
            "Check the accelerator: thermal throttling, another process on the device, a degraded link.",
            "Add replicas if the load is simply more than one server can decode.",
        ],
    ),
    "VllmQueueDepthHigh": Section(
        meaning=(
            "Requests wait to be scheduled: the number of waiting requests of one replica and model "
            "has stayed above the threshold. Demand exceeds what the server admits per step. Every "
            "waiting request adds its wait to its time to first token within seconds, which is why this "
            "alert waits only `alerts.queue_for` (2m by default; 1m suits traffic whose bursts drain "
            "within a minute)."
        ),
        confirm=[
            "Waiting and running: `{waiting}`, `{running}`",
            "KV-cache usage: `{kv}`: full means memory is the limit, low means the scheduler is",
            "From vLLM 0.20 `vllm:num_requests_waiting_by_reason` splits capacity from deferred requests",
        ],
        act=[
            "KV cache full: add replicas, or free memory (see VllmKVCachePressure).",
            "KV cache has room: raise `--max-num-seqs` / `--max-num-batched-tokens` (VllmSchedulerThrottled).",
            "Autoscale on `vllm:num_requests_waiting` and put the replicas behind one load balancer.",
        ],
    ),
    "VllmSchedulerThrottled": Section(
        meaning=(
            "The queue keeps growing while the KV cache has room and requests are running: vLLM is "
            "not short of memory, it is capped by its scheduler limits (the maximum number of "
            "sequences or batched tokens per step)."
        ),
        confirm=["Queue trend: `deriv({waiting}[10m])`", "KV-cache usage: `{kv}`", "Running: `{running}`"],
        act=[
            "Raise `--max-num-seqs` (the running count sits at it) and/or `--max-num-batched-tokens`, "
            "then watch KV-cache usage and inter-token latency.",
        ],
    ),
    "VllmKVCachePressure": Section(
        meaning=(
            "The KV cache of one replica (its fullest engine) is nearly full. New requests wait and "
            "running ones are preempted and recomputed, which costs latency and throughput."
        ),
        confirm=[
            "Usage per replica: `{kv}` (per engine: the raw series `{kv_series}`)",
            "Preemptions: `{preemptions}`",
            "Log: the stats line `... Running: N reqs, Waiting: M reqs, ... KV cache usage: 9x.x%`",
        ],
        act=[
            "Give the cache more memory: raise `--gpu-memory-utilization` while keeping headroom "
            "(0.90-0.95; too high causes out-of-memory errors at runtime).",
            "Shrink demand: lower `--max-model-len` to what clients really send, lower `--max-num-seqs`.",
            "Store more per byte: `--kv-cache-dtype fp8`, prefix caching for shared prompts.",
            "Spread the model: more tensor-parallel GPUs per replica, or more replicas.",
        ],
    ),
    "VllmKVCacheFillingUp": Section(
        meaning=(
            "KV-cache usage is already high and, at the rate of the last window, will reach 100% "
            "within the horizon. Act before preemptions start."
        ),
        confirm=["Trend: `predict_linear({kv}[15m], 900)`", "Queue: `{waiting}`"],
        act=["The remedies of VllmKVCachePressure; adding a replica now is the quickest."],
    ),
    "VllmPreemptions": Section(
        meaning=(
            "vLLM preempts running requests for lack of KV-cache blocks (and recomputes them later). "
            "The rate is normalised by finished requests, so a busy server does not alert more."
        ),
        confirm=[
            "Preemptions per finished request: `{preemptions_ratio}`",
            "KV-cache usage: `{kv}`",
            "Log: V0 prints `Sequence group ... is preempted by PreemptionMode.RECOMPUTE mode because "
            "there is not enough KV cache space` (every 50th); V1 (0.12+) adds `Preemptions: N` to the "
            "stats line",
        ],
        act=["Same as VllmKVCachePressure: more cache memory, fewer or shorter sequences, more replicas."],
    ),
    "VllmRequestErrors": Section(
        meaning=(
            'Requests fail. `source="engine"`: the share of requests vLLM finished with '
            '`finished_reason="error"` (vLLM 0.13+). `source="http"`: the share of API responses '
            "with a 5xx status (client mistakes are 4xx and never count)."
        ),
        confirm=[
            "Engine errors: `{errors}`; HTTP 5xx: `{http_errors}`",
            "Log: `Error in chat completion stream generator.` / `Error in completion stream generator.` "
            "with a traceback; an `EngineDeadError` at its end means the engine died (VllmEngineDead)",
        ],
        act=[
            "If the engine died or ran out of memory, follow VllmEngineDead / VllmOutOfMemory.",
            "Otherwise read the traceback of the first error: a bad request, a tokenizer or chat "
            "template problem, or a bug fixed in a newer vLLM release.",
        ],
    ),
    "VllmEngineStalled": Section(
        meaning=(
            "Requests are waiting or running but no token has been generated for the whole window: "
            "the engine loop is hung or dead while the HTTP server still answers. On vLLM 0.8 `/health` "
            "keeps returning 200 in this state, and such servers have stayed in load balancers for hours."
        ),
        confirm=[
            "No tokens: `sum by (instance) (rate({generation_series}[5m])) == 0` with `{waiting}` > 0",
            "Log: `EngineCore encountered a fatal error.`, `Engine core proc ... died unexpectedly`, "
            "an NCCL `Watchdog caught collective operation timeout`, or nothing at all (a deadlock)",
            "`py-spy dump --pid <EngineCore pid>` shows where the loop is stuck",
        ],
        act=[
            "Restart the server: it does not recover by itself. Save the log and a py-spy dump first.",
            "Take the replica out of the load balancer; probe readiness with a real completion, not `/health`.",
        ],
    ),
    "VllmEngineHung": Section(
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
            "`alerts.hung_progress_window`, and the queue and latency alerts say why it is slow."
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
            "On Kubernetes, make the liveness probe a real request (an exec or HTTP check that sends one "
            "token with a timeout), not `/health`, so the kubelet restarts a hung pod.",
            "Repeated hangs under tensor parallelism: set `NCCL_DEBUG=INFO` and check the interconnect "
            "(XID errors on the GPU dashboard) and the driver.",
        ],
    ),
    "VllmProbeDown": Section(
        meaning=(
            '`cause="down"`: Prometheus cannot scrape a vllm-probe. `cause="rejected"`: vLLM answers the '
            "probe's one-token request with a 4xx or an unusable body, so the probe never succeeds. Either "
            "way VllmEngineHung is blind for the servers that probe watches."
        ),
        confirm=[
            "`up{{{probe_selector}}}`; the probe's own log (one line per state change per target)",
            "Failures by reason: `{probe_failures}`: `http_4xx` is a wrong `--model` (404) or API key "
            "(401), `bad_body` a proxy answering instead of vLLM",
        ],
        act=[
            "Start the probe again (it is a sidecar in the compose stack and the Kubernetes example).",
            "Give it the served model name (`--model`, or let it discover the first id of `/v1/models`) "
            "and the same API key file vLLM uses (`--api-key-file`).",
        ],
    ),
    "VllmStartupSlow": Section(
        meaning=(
            "The log shows the server started (a start marker) but not `Application startup complete.` "
            "within the expected start-up time (`alerts.expected_startup`); critical at twice it. vLLM "
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
    "VllmRestartLoop": Section(
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
    "VllmVersionDrift": Section(
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
    "VllmTargetDown": Section(
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
    "VllmMetricsAbsent": Section(
        meaning=(
            '`scope="job"`: Prometheus scrapes no target of the vLLM job at all, so every other '
            'alert is blind. `scope="target"`: a target answers scrapes but has no vLLM series: '
            "it is not the vLLM API port, a proxy answers instead, or vLLM's metrics are broken "
            "(a multiprocess `PROMETHEUS_MULTIPROC_DIR` on a bad volume)."
        ),
        confirm=["`up{{{selector}}}` and `count by (instance) ({running_series}{{{selector}}})`"],
        act=[
            "Fix service discovery or the target list (prometheus.yml), or point the target at the "
            "vLLM API server's port and `/metrics`.",
        ],
    ),
    "VllmEngineDead": Section(
        meaning=(
            "The log exporter saw the engine die at runtime (`EngineDeadError`, `AsyncEngineDeadError`, "
            "an engine process that died). A dead engine cannot report this on `/metrics`, so this "
            "alert comes from the logs and fires at once, without waiting."
        ),
        confirm=[
            "The log: **the first error above the first `EngineDeadError` is the cause** (the same "
            "failure repeats 2-4 times across engine core, workers and API server)",
            "Common causes: `torch.OutOfMemoryError` / `CUDA out of memory` (VllmOutOfMemory), `CUDA "
            "error: an illegal memory access`, an NCCL timeout, a killed process (`exit code: -9`)",
            '`vllm_log_events_total{{event="engine_dead"}}` on the failures dashboard',
        ],
        act=[
            "Restart the server (current releases exit on their own; make sure something restarts them).",
            "If one request kills it repeatedly, the `Dumping input data` lines before the crash "
            "identify it; upgrade vLLM or block that input.",
        ],
    ),
    "VllmOutOfMemory": Section(
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
        ],
    ),
    "VllmStartupFailed": Section(
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
        ],
    ),
    "VllmLogExporterDown": Section(
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
    "VllmTimeToFirstTokenBudgetBurn": Section(
        meaning=(
            "The model misses its time-to-first-token SLO (the configured share of requests within "
            "the threshold) fast enough to exhaust the error budget early. Multi-window, "
            "multi-burn-rate: `long`/`short` name the two windows that both burn; 1h/5m and 6h/30m "
            "page, 1d/2h and 3d/6h open a ticket-level warning."
        ),
        confirm=[
            "Miss ratio per window: `{ttft_burn}`",
            "Which replica: the p95 time to first token per instance, `{ttft_p95}`",
        ],
        act=["Find the slow replicas and follow VllmHighTimeToFirstToken."],
    ),
    "VllmTimePerOutputTokenBudgetBurn": Section(
        meaning=(
            "The model misses its time-per-output-token SLO (the configured share of output tokens "
            "arriving within the threshold of the previous one) fast enough to exhaust the error "
            "budget early. `long`/`short` name the burning windows."
        ),
        confirm=["Miss ratio per window: `{itl_burn}`", "Per replica: `{itl_p95}`"],
        act=["Find the slow replicas and follow VllmHighTimePerOutputToken."],
    ),
    "Watchdog": Section(
        meaning=(
            "Always firing, on purpose: the dead man's switch of the whole pipeline. Alertmanager "
            "sends it to a heartbeat service, which pages when the heartbeat stops."
        ),
        confirm=["Alertmanager's UI lists it as firing; the heartbeat service shows recent pings."],
        act=[
            "Never silence it. If the heartbeat stopped: check Prometheus, its rule evaluation, "
            "Alertmanager and the network between them.",
        ],
    ),
}
SECTIONS.update(features.runbook_sections())  # what the source turns on: spec decode, admission...
SECTIONS.update(gpu.runbook_sections())  # VllmGpu*: the GPU layer keeps its own


def runbook(groups: list[Group], res: Resolution, cfg: BundleConfig) -> str:
    names: list[str] = []
    dashboards: dict[str, str] = {}
    for group in groups:
        for rule in group.rules:
            if isinstance(rule, Alert) and rule.name not in names:
                names.append(rule.name)
                dashboards[rule.name] = rule.dashboard
    missing = [n for n in names if n not in SECTIONS]
    if missing:
        raise KeyError(f"no runbook section for {', '.join(missing)}")
    values = _placeholders(res, cfg)
    lines = [
        "<!-- Generated by vllm-obs; do not edit. Regenerate with `vllm-obs generate`. -->",
        "# vLLM alert runbooks",
        "",
        f"Built for {res.source.summary}. Every alert links here through its `runbook_url`;",
        "the queries use this bundle's recording rules and the series names of that source.",
        "",
        "| Alert | Severity | Dashboard |",
        "| --- | --- | --- |",
    ]
    severities = _severities(groups)
    for name in names:
        lines.append(f"| [{name}](#{name.lower()}) | {severities[name]} | {DASHBOARDS[dashboards[name]]} |")
    for name in names:
        section = SECTIONS[name]
        lines += ["", f"## {name}", "", f"**Meaning.** {section.meaning}", "", "**Confirm.**", ""]
        lines += [f"- {item.format(**values)}" for item in section.confirm]
        lines += ["", "**Act.**", ""]
        lines += [f"- {item}" for item in section.act]
    return "\n".join(lines) + "\n"


def _severities(groups: list[Group]) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    for group in groups:
        for rule in group.rules:
            if isinstance(rule, Alert):
                out.setdefault(rule.name, [])
                if rule.severity not in out[rule.name]:
                    out[rule.name].append(rule.severity)
    return {k: " / ".join(v) for k, v in out.items()}


def _placeholders(res: Resolution, cfg: BundleConfig) -> dict[str, str]:
    n = Names(cfg.alerts.rate_window)

    def name_of(key: str, attr: str = "name") -> str:
        sig = res.signals.get(key)
        return getattr(sig, attr) if sig is not None else f"(no {key} series in this source)"

    return {
        "ttft_p95": n.quantile("time_to_first_token", "p95"),
        "itl_p95": n.quantile("inter_token_latency", "p95"),
        "queue_p95": n.quantile("request_queue_time", "p95"),
        "prefill_p95": n.quantile("request_prefill_time", "p95"),
        "waiting": n.requests_waiting,
        "running": n.requests_running,
        "kv": n.kv_cache_usage,
        "kv_series": name_of("kv_cache_usage"),
        "preemptions": n.preemptions,
        "preemptions_ratio": n.preemptions_per_request,
        "errors": n.request_errors,
        "http_errors": n.http_errors,
        "generation_series": name_of("generation_tokens"),
        "running_series": name_of("requests_running"),
        "selector": cfg.vllm_selector,
        "probe_selector": cfg.probe_selector,
        "probe_success": f"vllm_probe_success{{{cfg.probe_selector}}}",
        "probe_failures": f"increase(vllm_probe_failures_total{{{cfg.probe_selector}}}[10m])",
        "probe_health": f"vllm_probe_health_up{{{cfg.probe_selector}}}",
        "waiting_series": name_of("requests_waiting"),
        "state": f"vllm_log_server_state{{{cfg.exporter_selector}}} == 1",
        "since_start": (
            f'time() - vllm_log_last_event_timestamp_seconds{{{cfg.exporter_selector}, event="startup_begin"}}'
        ),
        "startup_durations": f"vllm_log_last_startup_duration_seconds{{{cfg.exporter_selector}}}",
        "starts": f'increase(vllm_log_events_total{{{cfg.exporter_selector}, event="startup_begin"}}[1h])',
        "startup_failures": f"increase(vllm_log_startup_failures_total{{{cfg.exporter_selector}}}[1h])",
        "version_info": f"vllm_log_vllm_version_info{{{cfg.exporter_selector}}}",
        **features.placeholders(cfg),
        "exporter_selector": cfg.exporter_selector,
        "ttft_burn": "job_model:vllm_time_to_first_token_seconds:slo_miss_ratio_1h",
        "itl_burn": "job_model:vllm_inter_token_latency_seconds:slo_miss_ratio_1h",
    }
