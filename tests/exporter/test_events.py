"""The rules of counting: one incident counts once, startup failures are not engine
deaths, a normal shutdown is not a failure, probes and validation errors are not errors."""

from __future__ import annotations

from vllm_log_exporter.events import (
    DEAD,
    FAILED,
    SERVING,
    STARTING,
    STOPPING,
    UNKNOWN,
    engine_label,
)
from vllm_log_exporter.patterns import EVENTS

from .helpers import FakeClock, feed_text, make_pipeline


def line(
    ts: str, msg: str, level: str = "ERROR", proc: str = "EngineCore pid=7", src: str = "core.py:1"
) -> str:
    """A vLLM 0.32 logger line at 11-29 <ts>."""
    return f"({proc}) {level} 11-29 {ts} [{src}] {msg}\n"


def api(ts: str, msg: str, level: str = "INFO") -> str:
    return line(ts, msg, level, proc="APIServer pid=1", src="api.py:1")


START = api("10:00:00", "non-default args: {'model': 'm'}") + "INFO:     Application startup complete.\n"
OOM = (
    "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. "
    "DefaultCPUAllocator: can't allocate memory: you tried"
)
DEAD_ERROR = (
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above)."
)


def events(text: str, **kwargs) -> dict[str, int]:
    pipeline = make_pipeline(**kwargs)
    feed_text(pipeline, text)
    return {k: v for k, v in pipeline.counts.events.items() if v}


def run(text: str, clock: FakeClock | None = None):
    pipeline = make_pipeline(clock)
    feed_text(pipeline, text)
    return pipeline


def test_all_events_exist_at_zero_from_the_start() -> None:
    pipeline = make_pipeline()
    assert pipeline.counts.events == dict.fromkeys(EVENTS, 0)
    assert pipeline.counts.last_event_time == dict.fromkeys(EVENTS, 0.0)


def test_one_runtime_oom_repeated_by_four_processes_counts_once_with_engine_dead() -> None:
    text = START + (
        line("10:05:00", "WorkerProc hit an exception.", proc="Worker pid=9")
        + line("10:05:00", OOM, proc="Worker pid=9")
        + line("10:05:00", OOM, proc="Worker pid=9")
        + line("10:05:00", "EngineCore encountered a fatal error.")
        + line("10:05:00", f"RuntimeError: Worker failed with error '{OOM}'")
        + "Process EngineCore:\n"
        + OOM
        + "\n"
        + api("10:05:01", "AsyncLLM output_handler failed.", "ERROR")
        + api("10:05:01", DEAD_ERROR, "ERROR")
    )
    assert events(text) == {"startup_begin": 1, "startup_complete": 1, "oom": 1, "engine_dead": 1}


def test_ooms_further_apart_than_the_window_are_two_incidents() -> None:
    text = START + line("10:05:00", OOM) + line("10:05:20", OOM) + line("10:06:00", OOM)
    assert events(text)["oom"] == 2  # 10:05:20 is inside the 30 s window, 10:06:00 is not


def test_the_dedup_window_is_configurable() -> None:
    from vllm_log_exporter.events import Settings

    text = START + line("10:05:00", OOM) + line("10:05:20", OOM)
    assert events(text, settings=Settings(window=10))["oom"] == 2


def test_engine_dies_once_per_life_however_often_it_is_repeated() -> None:
    """0.4.x keeps serving a dead engine: each later request repeats AsyncEngineDeadError."""
    dead = "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.\n"
    text = START + api("10:05:00", "Engine background task failed", "ERROR") + dead
    text += api("10:08:00", "Received request cmpl-2: prompt: 'x'") + dead
    text += api("10:12:00", "Received request cmpl-3: prompt: 'y'") + dead
    assert events(text) == {"startup_begin": 1, "startup_complete": 1, "engine_dead": 1}


def test_a_new_server_start_allows_a_new_death() -> None:
    death = api("10:05:00", "AsyncLLM output_handler failed.", "ERROR")
    text = START + death + START.replace("10:00:00", "10:06:00") + death.replace("10:05:00", "10:07:00")
    assert events(text) == {"startup_begin": 2, "startup_complete": 2, "engine_dead": 2}


STATS = (
    "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
    "Running: 1 reqs, "
    "Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%"
)


def test_dead_state_expires_after_the_hold_without_startup_markers() -> None:
    """Log time advances with the lines the scanner selects, e.g. a stats line."""
    death = "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop is stopped.\n"
    pipeline = make_pipeline()
    source = pipeline.new_source()
    pipeline.feed(source, (api("10:05:00", "Engine background task failed", "ERROR") + death).encode())
    pipeline.feed(source, (api("10:14:00", STATS) + death).encode())  # 9 min: still the same death
    assert pipeline.counts.events["engine_dead"] == 1
    pipeline.feed(source, (api("10:30:00", STATS) + death).encode())  # 16 min without death lines
    assert pipeline.counts.events["engine_dead"] == 2


def test_normal_shutdown_noise_is_not_a_death() -> None:
    """vLLM 0.32 on SIGTERM: shutdown first, then output_handler failed + EngineDeadError."""
    text = START + (
        api("10:30:00", "[shutdown] API server: shutdown triggered")
        + api("10:30:00", "AsyncLLM output_handler failed.", "ERROR")
        + api("10:30:00", DEAD_ERROR, "ERROR")
        + api("10:30:00", "[shutdown] API server: shutting down FastAPI HTTP server")
        + "INFO:     Shutting down\nINFO:     Application shutdown complete.\n"
    )
    pipeline = run(text)
    assert {k: v for k, v in pipeline.counts.events.items() if v} == {
        "startup_begin": 1,
        "startup_complete": 1,
        "shutdown": 1,
    }
    assert pipeline.machine.phase == STOPPING


def test_death_before_shutdown_counts_and_the_shutdown_too() -> None:
    """kill -9 of the engine core (captured): the death comes first, then uvicorn stops."""
    text = START + (
        api(
            "10:30:00",
            "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup",
            "WARNING",
        )
        + api("10:30:00", "AsyncLLM output_handler failed.", "ERROR")
        + 'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
        + "INFO:     Shutting down\n"
    )
    assert events(text) == {"startup_begin": 1, "startup_complete": 1, "engine_dead": 1, "shutdown": 1}


def test_shutdown_marker_expires_so_a_later_death_counts() -> None:
    text = (
        START
        + api("10:30:00", "[shutdown] API server: shutdown triggered")
        + (api("10:35:00", "AsyncLLM output_handler failed.", "ERROR"))
    )
    assert events(text) == {"startup_begin": 1, "startup_complete": 1, "shutdown": 1, "engine_dead": 1}


def test_startup_failure_is_never_an_engine_death_and_takes_the_specific_reason() -> None:
    kv = (
        "ValueError: To serve at least one request with the model's max seq len (16777216), "
        "(32.0 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (1.0 GiB)."
    )
    text = (
        api("10:00:00", "non-default args: {'model': 'm'}")
        + line("10:00:30", "EngineCore failed to start.")
        + line("10:00:30", kv)
        + line(
            "10:00:33",
            "Worker proc VllmWorker-0 died unexpectedly (exit code: 0), shutting down executor.",
        )
        + "Process EngineCore:\n"
        + kv
        + "\n"
        + "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}\n"
    )
    pipeline = run(text)
    assert {k: v for k, v in pipeline.counts.events.items() if v} == {"startup_begin": 1, "startup_failed": 1}
    assert {k: v for k, v in pipeline.counts.startup_failures.items() if v} == {"kv_cache_too_small": 1}
    assert pipeline.machine.phase == FAILED


def test_oom_during_startup_is_an_oom_and_a_startup_failure() -> None:
    text = (
        api("10:00:00", "non-default args: {'model': 'm'}")
        + line("10:00:30", "EngineCore failed to start.")
        + line(
            "10:00:30",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has",
        )
    )
    pipeline = run(text)
    assert {k: v for k, v in pipeline.counts.events.items() if v} == {
        "startup_begin": 1,
        "startup_failed": 1,
        "oom": 1,
    }
    assert {k: v for k, v in pipeline.counts.startup_failures.items() if v} == {"out_of_memory": 1}


def test_generic_reason_waits_for_the_incident_to_end() -> None:
    clock = FakeClock()
    pipeline = make_pipeline(clock)
    source = pipeline.new_source()
    pipeline.feed(
        source,
        (api("10:00:00", "non-default args: {}") + line("10:00:30", "EngineCore failed to start.")).encode(),
    )
    assert pipeline.counts.events["startup_failed"] == 1
    assert sum(pipeline.counts.startup_failures.values()) == 0  # the cause may still follow
    pipeline.tick()
    assert sum(pipeline.counts.startup_failures.values()) == 0
    clock.advance(10)
    pipeline.tick()  # settle_after wall-clock seconds without the cause: it stays generic
    assert {k: v for k, v in pipeline.counts.startup_failures.items() if v} == {"engine_init_failed": 1}
    pipeline.feed(source, line("10:00:31", "ValueError: No available memory for the cache blocks.").encode())
    assert sum(pipeline.counts.startup_failures.values()) == 1  # settled reasons never change


def test_generic_reason_settles_when_the_log_moves_past_the_window() -> None:
    text = (
        api("10:00:00", "non-default args: {}")
        + "ERROR:    Application startup failed. Exiting.\n"
        + api("10:00:05", "something else")
    )
    pipeline = make_pipeline()
    source = pipeline.new_source()
    pipeline.feed(source, text.encode())
    assert sum(pipeline.counts.startup_failures.values()) == 0
    pipeline.feed(source, api("10:01:00", STATS).encode())
    assert {k: v for k, v in pipeline.counts.startup_failures.items() if v} == {"other": 1}


def test_request_errors_count_server_failures_but_not_probes_or_validation() -> None:
    text = START + (
        'INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 400 Bad Request\n'
        'INFO:     127.0.0.1:2 - "POST /v1/completions HTTP/1.1" 404 Not Found\n'
        'INFO:     127.0.0.1:3 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error\n'
        'INFO:     127.0.0.1:4 - "POST /v1/chat/completions?x=1 HTTP/1.1" 503 Service Unavailable\n'
        'INFO:     127.0.0.1:5 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
        'INFO:     127.0.0.1:6 - "GET /ping HTTP/1.1" 500 Internal Server Error\n'
        + api("10:01:00", "Error in chat completion stream generator.", "ERROR")
        + api("10:01:00", "Error in completion stream generator.", "ERROR")
    )
    assert events(text) == {"startup_begin": 1, "startup_complete": 1, "request_error": 4}


def test_v0_preemption_total_is_a_running_count() -> None:
    def warning(total: int) -> str:
        return (
            f"WARNING 05-26 22:21:02 scheduler.py:1076] Sequence group cmpl-1 is preempted by "
            "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can "
            "affect the end-to-end performance. Increase gpu_memory_utilization. "
            f"total_num_cumulative_preemption={total}\n"
        )

    restart = "INFO 05-26 23:00:00 api_server.py:177] vLLM API server version 0.4.3\n"
    assert events(warning(1) + warning(51) + warning(101))["preemption"] == 101
    assert events(warning(1) + warning(51) + restart + warning(1))["preemption"] == 52


def test_v1_preemptions_add_up_from_every_stats_line() -> None:
    def stats(preemptions: int | None, running: int) -> str:
        extra = f", Preemptions: {preemptions}" if preemptions is not None else ""
        return api(
            "10:01:00",
            "Engine 000: Avg prompt throughput: 1.0 tokens/s, "
            "Avg generation throughput: 2.0 tokens/s, "
            f"Running: {running} reqs, Waiting: 0 reqs{extra}, GPU KV cache usage: 50.0%, "
            "Prefix cache hit "
            "rate: 0.0%",
        )

    pipeline = run(stats(3, 1) + stats(None, 2) + stats(5, 3) + stats(None, 4))
    assert pipeline.counts.events["preemption"] == 8
    assert pipeline.counts.stats["0"]["running"] == 4


def test_stats_gauges_per_engine_and_aggregated() -> None:
    def stats(prefix: str, running: int, kv: str) -> str:
        return api(
            "10:01:00",
            f"{prefix}Avg prompt throughput: 1.0 tokens/s, "
            "Avg generation throughput: 2.0 tokens/s, "
            f"Running: {running} reqs, Waiting: 1 reqs, XPU KV cache usage: {kv}%",
        )

    clock = FakeClock(1_900_000_000)
    pipeline = run(
        stats("Engine 000: ", 1, "10.0")
        + stats("Engine 001: ", 2, "20.5")
        + stats("Engine 000: ", 3, "30.0")
        + stats("2 Engines Aggregated: ", 5, "25.0")
        + stats("Engine 987654: ", 9, "99.0"),
        clock,
    )
    assert pipeline.counts.stats == {
        "0": {
            "running": 3,
            "waiting": 1,
            "kv_cache_usage_ratio": 0.3,
            "prompt_throughput": 1.0,
            "generation_throughput": 2.0,
            "timestamp": 1_900_000_000,
        },
        "1": {
            "running": 2,
            "waiting": 1,
            "kv_cache_usage_ratio": 0.205,
            "prompt_throughput": 1.0,
            "generation_throughput": 2.0,
            "timestamp": 1_900_000_000,
        },
        "all": {
            "running": 5,
            "waiting": 1,
            "kv_cache_usage_ratio": 0.25,
            "prompt_throughput": 1.0,
            "generation_throughput": 2.0,
            "timestamp": 1_900_000_000,
        },
    }


def test_engine_labels_are_bounded() -> None:
    assert engine_label("000") == "0"
    assert engine_label("007") == "7"
    assert engine_label(None) == "0"
    assert engine_label("255") == "255"
    assert engine_label("256") is None
    assert engine_label("12", aggregated=True) == "all"


def test_last_event_timestamps_come_from_the_wall_clock() -> None:
    clock = FakeClock(1_850_000_000)
    pipeline = make_pipeline(clock)
    source = pipeline.new_source()
    pipeline.feed(source, START.encode())
    clock.advance(42)
    pipeline.feed(source, api("10:05:00", "AsyncLLM output_handler failed.", "ERROR").encode())
    assert pipeline.counts.last_event_time["startup_complete"] == 1_850_000_000
    assert pipeline.counts.last_event_time["engine_dead"] == 1_850_000_042
    assert pipeline.counts.last_event_time["oom"] == 0
    assert pipeline.counts.last_read_time == 1_850_000_042


def test_phases_follow_the_lifecycle() -> None:
    pipeline = make_pipeline()
    source = pipeline.new_source()
    assert pipeline.machine.phase == UNKNOWN
    pipeline.feed(source, api("10:00:00", "non-default args: {}").encode())
    assert pipeline.machine.phase == STARTING
    pipeline.feed(source, b"INFO:     Application startup complete.\n")
    assert pipeline.machine.phase == SERVING
    pipeline.feed(source, line("10:05:00", "EngineCore encountered a fatal error.").encode())
    assert pipeline.machine.phase == DEAD
    pipeline.feed(source, b"INFO:     Shutting down\n")
    assert pipeline.machine.phase == STOPPING


def test_multiple_api_servers_report_startup_complete_once() -> None:
    text = api("10:00:00", "non-default args: {}") + "INFO:     Application startup complete.\n" * 4
    assert events(text) == {"startup_begin": 1, "startup_complete": 1}


def test_event_state_survives_a_round_trip() -> None:
    pipeline = make_pipeline()
    feed_text(
        pipeline,
        START + line("10:05:00", OOM) + api("10:05:00", "AsyncLLM output_handler failed.", "ERROR"),
    )
    saved = pipeline.machine.to_json()
    other = make_pipeline()
    other.machine.restore(saved)
    assert other.machine.to_json() == saved
    feed_text(other, line("10:05:10", OOM) + api("10:05:10", DEAD_ERROR, "ERROR"))
    assert other.counts.events["oom"] == 0 and other.counts.events["engine_dead"] == 0  # same incident


HIT = "EngineCore hit an exception: Traceback (most recent call last):"
LOOP_FRAME = '  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 701, in run_busy_loop'
BUILD_FRAME = '  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 316, in __init__'


def test_an_engine_exception_out_of_view_of_the_start_is_told_by_its_traceback() -> None:
    """`EngineCore hit an exception` prints before the traceback that says where: through the
    engine's loop it is a death, through its constructor a failed start."""
    serving = run(line("10:00:00", HIT) + line("10:00:00", LOOP_FRAME))
    assert {k: v for k, v in serving.counts.events.items() if v} == {"engine_dead": 1}
    starting = run(line("10:00:00", HIT) + line("10:00:00", BUILD_FRAME))
    assert {k: v for k, v in starting.counts.events.items() if v} == {"startup_failed": 1}
    assert {k: v for k, v in starting.counts.startup_failures.items() if v} == {"engine_init_failed": 1}
    # With the start in view, the phase decides at once.
    assert events(START + line("10:05:00", HIT)) == {
        "startup_begin": 1,
        "startup_complete": 1,
        "engine_dead": 1,
    }


def test_an_engine_exception_nothing_tells_apart_is_a_death_once_it_settles() -> None:
    clock = FakeClock()
    pipeline = make_pipeline(clock)
    source = pipeline.new_source()
    pipeline.feed(source, line("10:00:00", HIT).encode())
    assert pipeline.counts.events["engine_dead"] == 0  # the traceback may still say where
    clock.advance(10)
    pipeline.tick()
    assert pipeline.counts.events["engine_dead"] == 1
    pipeline.feed(source, (line("10:00:01", LOOP_FRAME) + api("10:00:01", DEAD_ERROR, "ERROR")).encode())
    assert pipeline.counts.events["engine_dead"] == 1  # the same death
    # A later line outside the window settles it too, in log time.
    later = run(line("10:00:00", HIT) + api("10:01:00", STATS))
    assert later.counts.events["engine_dead"] == 1


def test_a_start_method_in_a_traceback_makes_an_oom_a_failed_start_in_either_order() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 2 has"
    frame = '  File "/x/vllm/v1/worker/gpu_worker.py", line 507, in compile_or_warm_up_model'
    for text in (
        line("10:00:00", oom) + line("10:00:00", frame),
        line("10:00:00", frame) + line("10:00:00", oom),
    ):
        pipeline = run(text)
        assert {k: v for k, v in pipeline.counts.events.items() if v} == {"oom": 1, "startup_failed": 1}
        assert {k: v for k, v in pipeline.counts.startup_failures.items() if v} == {"out_of_memory": 1}
    # While serving, the same frame is not a failed start (a new start would show its marker).
    assert events(START + line("10:05:00", frame) + line("10:05:00", oom)) == {
        "startup_begin": 1,
        "startup_complete": 1,
        "oom": 1,
    }


def test_an_oom_just_before_a_generic_start_failure_is_its_reason() -> None:
    text = line("10:00:00", "Cuda failure 2 'out of memory'", proc="VllmWorker rank=3 pid=2") + line(
        "10:00:00", "EngineCore failed to start."
    )
    pipeline = run(text)
    assert {k: v for k, v in pipeline.counts.events.items() if v} == {"oom": 1, "startup_failed": 1}
    assert {k: v for k, v in pipeline.counts.startup_failures.items() if v} == {"out_of_memory": 1}
    # Further apart than the window, the OOM is another incident.
    apart = run(
        line("10:00:00", "Cuda failure 2 'out of memory'", proc="VllmWorker rank=3 pid=2")
        + line("10:05:00", "EngineCore failed to start.")
    )
    assert {k: v for k, v in apart.counts.startup_failures.items() if v} == {"engine_init_failed": 1}


def test_a_pending_engine_exception_survives_a_round_trip() -> None:
    clock = FakeClock()
    pipeline = make_pipeline(clock)
    pipeline.feed(pipeline.new_source(), line("10:00:00", HIT).encode())
    saved = pipeline.machine.to_json()
    other = make_pipeline(clock)
    other.machine.restore(saved)
    assert other.machine.to_json() == saved
    feed_text(other, line("10:00:00", BUILD_FRAME))
    assert other.counts.events["startup_failed"] == 1 and other.counts.events["engine_dead"] == 0


def deaths(pipeline) -> dict[str, int]:
    return {k: v for k, v in pipeline.counts.engine_deaths.items() if v}


FAULT = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
TIMEOUT = "[Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE) ran for 600059 milliseconds before timing out."
FATAL = "EngineCore encountered a fatal error."


def test_a_death_takes_the_cause_printed_before_or_after_it() -> None:
    before = run(START + line("10:05:00", OOM) + api("10:05:00", DEAD_ERROR, "ERROR"))
    assert deaths(before) == {"out_of_memory": 1}
    # The engine core's record names the death first; its traceback ends in the cause.
    after = run(
        START + line("10:05:00", FATAL) + line("10:05:00", FAULT) + api("10:05:01", DEAD_ERROR, "ERROR")
    )
    assert deaths(after) == {"gpu_fault": 1}
    assert after.counts.events["engine_dead"] == 1
    own = run(
        START + line("10:05:00", TIMEOUT, proc="RayWorkerVllm pid=9") + api("10:05:01", DEAD_ERROR, "ERROR")
    )
    assert deaths(own) == {"nccl_timeout": 1}
    assert deaths(run(START + api("10:05:00", DEAD_ERROR, "ERROR"))) == {"other": 1}


def test_a_cause_outside_the_window_is_another_incident() -> None:
    earlier = run(START + line("10:05:00", FAULT) + api("10:06:00", DEAD_ERROR, "ERROR"))
    assert deaths(earlier) == {"other": 1}
    later = run(START + api("10:05:00", DEAD_ERROR, "ERROR") + line("10:06:00", FAULT))
    assert deaths(later) == {"other": 1}


def test_a_death_waits_for_its_cause_only_as_long_as_a_startup_reason_does() -> None:
    clock = FakeClock()
    pipeline = make_pipeline(clock)
    source = pipeline.new_source()
    pipeline.feed(source, (START + line("10:05:00", FATAL)).encode())
    assert pipeline.counts.events["engine_dead"] == 1  # the death counts at once
    assert deaths(pipeline) == {}  # its cause may still follow
    clock.advance(10)
    pipeline.tick()
    assert deaths(pipeline) == {"other": 1}
    pipeline.feed(source, line("10:05:01", FAULT).encode())
    assert deaths(pipeline) == {"other": 1}  # settled reasons never change


def test_a_gpu_fault_during_a_start_is_a_failed_start_not_a_death() -> None:
    pipeline = run(
        api("10:00:00", "non-default args: {'model': 'm'}")
        + line("10:00:30", FAULT, proc="Worker_PP0 pid=3")
        + line("10:00:30", "EngineCore failed to start.")
    )
    assert {k: v for k, v in pipeline.counts.events.items() if v} == {"startup_begin": 1, "startup_failed": 1}
    assert deaths(pipeline) == {}
