"""vLLM 0.34's new log lines and the fault-tolerance lines around them, rule by rule. Each line is
the 0.34 source's format string with made-up values, as its logger prints it (no public log of a
0.34 server shows them yet)."""

from __future__ import annotations

from prometheus_client import generate_latest
from vllm_log_exporter.events import DEAD, FAULTED, SERVING, STOPPING, UNKNOWN, Settings
from vllm_log_exporter.metrics import build_registry

from .helpers import LOGS, FakeClock, feed_text, make_pipeline, run_once

SITE = "/usr/local/lib/python3.12/dist-packages/vllm"


def line(proc: str, level: str, ts: str, src: str, message: str) -> str:
    return f"({proc}) {level} 11-20 {ts} [{src}] {message}\n"


def api(ts: str, message: str, level: str = "INFO", src: str = "async_llm.py:359") -> str:
    return line("APIServer pid=1", level, ts, src, message)


def core(ts: str, message: str, level: str = "ERROR", src: str = "engine_core_sentinel.py:144") -> str:
    return line("EngineCore_DP0 pid=880", level, ts, src, message)


def start(args: str = "{'model': 'm'}") -> str:
    return (
        api("09:00:00", f"non-default args: {args}", src="startup.py:96")
        + line(
            "Worker_TP0 pid=2228", "INFO", "09:00:20", "model_runner.py:412", "Loading model from scratch..."
        )
        + "(APIServer pid=1) INFO:     Application startup complete.\n"
    )


START_ONLY = start()
FT_START = start("{'model': 'm', 'enable_fault_tolerance': True}")
FAULT = core("09:30:01", "[FT] Busy loop raised RuntimeError. Waiting for recovery.", "WARNING")
STATUS = core("09:30:01", "[FT] Engine 0 status -> UNHEALTHY:", "INFO", "engine_core_sentinel.py:171")
LOOP_FRAME = core(
    "09:30:01",
    f'  File "{SITE}/v1/engine/core.py", line 1803, in run_busy_loop',
    "INFO",
    "engine_core_sentinel.py:171",
)
RECOVERED = core("09:31:12", "[FT] Engine 0 status -> HEALTHY", "INFO", "engine_core_sentinel.py:465")
WORKER_HIT = line(
    "Worker_TP1 pid=2229", "ERROR", "09:30:00", "multiproc_executor.py:1223", "WorkerProc hit an exception."
)
FATAL = core("09:42:00", "EngineCore encountered a fatal error.", src="core.py:1759")
SHUTDOWN = api("10:00:00", "[shutdown] API server: shutdown triggered", src="launcher.py:254")


def dead_error(ts: str) -> str:
    return api(
        ts,
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above).",
        "ERROR",
        src="async_llm.py:957",
    )


def refused(ts: str, request: str) -> str:
    return (
        api(ts, f"Engine unhealthy - rejecting request {request}.")
        + '(APIServer pid=1) INFO:     10.0.0.7:40102 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable\n'
    )


def counted(text: str, clock: FakeClock | None = None, **settings):
    pipeline = make_pipeline(clock or FakeClock(), settings=Settings(**settings))
    feed_text(pipeline, text)
    return pipeline


def events(pipeline) -> dict[str, int]:
    return {k: v for k, v in pipeline.counts.events.items() if v}


def test_a_faulted_engine_refusing_requests_is_a_fault_and_refusals_not_a_death_or_errors() -> None:
    pipeline = counted(
        FT_START
        + WORKER_HIT
        + FAULT
        + STATUS
        + LOOP_FRAME
        + refused("09:30:05", "chatcmpl-5d3a8f0c2b9e4c1a")
        + refused("09:30:09", "cmpl-0b7e6d5c4a3f4e2d")
    )
    assert events(pipeline) == {
        "startup_begin": 1,
        "startup_complete": 1,
        "engine_faulted": 1,
        "request_refused": 2,
    }
    assert pipeline.machine.phase == FAULTED and pipeline.counts.server_state == "faulted"
    feed_text(pipeline, RECOVERED)
    assert pipeline.machine.phase == SERVING and pipeline.counts.server_state == "ready"
    exposition = generate_latest(build_registry(pipeline.counts, pipeline.lock)).decode()
    assert "chatcmpl-" not in exposition and "cmpl-0b7e" not in exposition  # request ids are no labels


def test_a_refusal_seen_without_the_fault_still_tells_the_state() -> None:
    """The exporter started after the fault: the API server's refusals alone say it."""
    pipeline = counted(refused("09:30:05", "chatcmpl-1"))
    assert events(pipeline) == {"engine_faulted": 1, "request_refused": 1}
    assert pipeline.counts.server_state == "faulted"


def test_a_503_with_no_refusal_logged_is_still_a_request_error() -> None:
    text = (
        '(APIServer pid=1) INFO:     10.0.0.7:1 - "POST /v1/completions HTTP/1.1" 503 Service Unavailable\n'
    )
    assert events(counted(START_ONLY + text)) == {
        "startup_begin": 1,
        "startup_complete": 1,
        "request_error": 1,
    }


def test_a_fault_not_recovered_in_time_is_the_death() -> None:
    pipeline = counted(
        FT_START
        + FAULT
        + refused("09:30:05", "chatcmpl-1")
        + core("09:42:00", "[FT] No recovery within 120s timeout.", src="engine_core_sentinel.py:530")
        + FATAL
        + dead_error("09:42:00")
    )
    assert events(pipeline) == {
        "startup_begin": 1,
        "startup_complete": 1,
        "engine_faulted": 1,
        "request_refused": 1,
        "engine_dead": 1,
    }
    assert pipeline.machine.phase == DEAD and pipeline.counts.server_state == "dead"


def test_with_fault_tolerance_on_a_worker_exception_waits_for_the_line_that_tells() -> None:
    clock = FakeClock()

    def following(text: str):
        pipeline = make_pipeline(clock)
        source = pipeline.new_source()
        pipeline.feed(source, text.encode())
        return pipeline, source

    held, source = following(FT_START + WORKER_HIT)
    assert held.counts.events["engine_dead"] == 0  # fault tolerance may hold it
    held.feed(source, FAULT.encode())
    assert held.counts.events["engine_dead"] == 0 and held.counts.events["engine_faulted"] == 1
    # Nothing follows it: a death once it settles, as an exception nothing tells apart.
    alone, _ = following(FT_START + WORKER_HIT)
    clock.advance(10)
    alone.tick()
    assert alone.counts.events["engine_dead"] == 1
    # Fault tolerance off (the arguments do not turn it on): a death at once, as before 0.33.
    assert following(START_ONLY + WORKER_HIT)[0].counts.events["engine_dead"] == 1
    config = start("{'model': 'm', 'fault_tolerance_config': {'engine_recovery_timeout_sec': 60}}")
    assert following(config + WORKER_HIT)[0].counts.events["engine_dead"] == 0


def test_a_faulted_server_stopped_on_purpose_is_stopping() -> None:
    pipeline = counted(FT_START + FAULT + SHUTDOWN.replace("10:00:00", "09:31:00") + dead_error("09:31:01"))
    assert events(pipeline)["shutdown"] == 1 and pipeline.counts.events["engine_dead"] == 0
    assert pipeline.machine.phase == STOPPING and pipeline.counts.server_state == "stopping"


def test_a_fault_nothing_more_is_said_of_is_forgotten_after_the_hold() -> None:
    """Recovery or death comes within vLLM's recovery timeout (120 s by default): a fault the log
    says nothing more of for the hold (its recovery line filtered out) is no longer known."""
    stats = (
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, "
        "Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%"
    )
    pipeline = counted(FT_START + FAULT + api("09:35:00", stats, src="loggers.py:335"), hold=600.0)
    assert pipeline.counts.server_state == "faulted"
    feed_text(pipeline, api("09:41:00", stats, src="loggers.py:335"))
    assert pipeline.machine.phase == UNKNOWN and pipeline.counts.server_state == "unknown"


def test_the_fault_state_survives_a_round_trip() -> None:
    pipeline = counted(FT_START + FAULT + api("09:30:05", "Engine unhealthy - rejecting request chatcmpl-1."))
    saved = pipeline.machine.to_json()
    other = make_pipeline(FakeClock())
    other.machine.restore(saved)
    assert other.machine.to_json() == saved
    feed_text(
        other,
        '(APIServer pid=1) INFO:     10.0.0.7:1 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable\n',
    )
    assert other.counts.events["request_error"] == 0  # the refusal's own 503


def test_a_worker_that_does_not_exit_is_a_death_while_serving_and_part_of_a_stop_or_failed_start() -> None:
    stuck = core(
        "09:45:10",
        "Worker pid=2231 did not exit within cleanup deadline",
        src="cuda_checkpoint_executor.py:216",
    )
    assert events(counted(START_ONLY + stuck)) == {
        "startup_begin": 1,
        "startup_complete": 1,
        "engine_dead": 1,
    }
    stopping = counted(START_ONLY + SHUTDOWN + stuck.replace("09:45:10", "10:00:05"))
    assert events(stopping) == {"startup_begin": 1, "startup_complete": 1, "shutdown": 1}
    starting = api("09:00:00", "non-default args: {'model': 'm'}", src="startup.py:96") + stuck
    assert events(counted(starting)) == {"startup_begin": 1, "startup_failed": 1}


def test_a_weight_cache_daemon_exit_and_eplb_going_on_count_nothing() -> None:
    lines = (
        line(
            "MainProcess pid=4102",
            "ERROR",
            "09:20:00",
            "preload.py:415",
            "Weight cache daemon rank(s) exited during serving (exitcodes=[-9]); shutting down.",
        )
        + line(
            "MainProcess pid=4102",
            "ERROR",
            "08:50:00",
            "preload.py:415",
            "Weight cache daemon rank(s) exited during startup (exitcodes=[1]); shutting down.",
        )
        + line(
            "Worker_TP0 pid=2228",
            "WARNING",
            "09:20:00",
            "ipc_loader.py:590",
            "Weight cache daemon at /tmp/w/vllm_weight_cache_gpu0.sock exited. This engine keeps serving: the "
            "CUDA driver keeps its mapped weights alive until the engine exits.",
        )
        + line(
            "Worker_TP3 pid=2231",
            "ERROR",
            "09:40:07",
            "async_worker.py:91",
            "async loop error (Rank 3); continuing under fault tolerance",
        )
    )
    pipeline = counted(START_ONLY + lines)
    assert events(pipeline) == {"startup_begin": 1, "startup_complete": 1}
    assert pipeline.counts.server_state == "ready"


def test_the_grpc_drain_is_a_planned_stop_and_its_noise_no_death() -> None:
    drain = api("10:00:00", "Draining in-flight requests (shutdown_timeout=30s)", src="grpc_server.py:147")
    pipeline = counted(START_ONLY + drain + dead_error("10:00:01"))
    assert events(pipeline) == {"startup_begin": 1, "startup_complete": 1, "shutdown": 1}
    assert pipeline.counts.server_state == "stopping"


def test_a_0_34_start_without_starting_to_load_model_is_recognised() -> None:
    pipeline = counted(
        api("09:00:00", "non-default args: {'model': 'm'}", src="startup.py:96")
        + line(
            "Worker_TP0 pid=2228", "INFO", "09:00:20", "model_runner.py:412", "Loading model from scratch..."
        )
    )
    assert pipeline.counts.server_state == "loading"
    memory = counted(
        api("09:00:00", "non-default args: {'model': 'm'}", src="startup.py:96")
        + line(
            "Worker_TP0 pid=2228",
            "INFO",
            "09:01:30",
            "extensible_kv_cache.py:693",
            "Memory after warmup: 1.2 GiB free, 14.1 GiB committed to the KV cache, 3.1 GiB kept for transient "
            "activations (2.6 GiB allocated at peak, 0.5 GiB of torch reservation growth); 903 KV cache blocks "
            "(14.1 GiB) fit within the requested 15.0 GiB. Torch may reserve up to 19.8 GiB.",
        )
    )
    assert memory.counts.server_state == "loading"


def test_stats_out_of_order_counts_nothing_at_debug_or_warning() -> None:
    message = "Received stats for out-of-order step (0, 5121) from engine 1 (expected > (0, 5122))"
    for level in ("DEBUG", "WARNING"):
        pipeline = counted(START_ONLY + api("09:31:20", message, level, src="coordinator.py:396"))
        assert events(pipeline) == {"startup_begin": 1, "startup_complete": 1}


def test_the_constructed_0_34_logs_count_what_the_golden_test_pins() -> None:
    """The exporter program itself on the 0.34 fixtures (the golden test pins every count)."""
    text = run_once(LOGS / "constructed-v0.34-fault-tolerance.log")
    assert 'vllm_log_events_total{event="request_refused"} 5.0' in text
    assert 'vllm_log_server_state{state="dead"} 1.0' in text
