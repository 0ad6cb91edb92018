"""The exporter following a real vLLM CPU server's log from its start until the engine is killed:
while loading, vLLM has no /metrics yet, and after `kill -9` of EngineCore it answers 503 and
exits; the exporter, reading the log, tells both."""

from __future__ import annotations

import pytest

from tests.support.vllm_server import VllmServer, free_port, http_get, send_traffic

from .helpers import exporter, scrape, wait_until


def event(name: str) -> str:
    return f'vllm_log_events_total{{event="{name}"}}'


def state(name: str) -> str:
    return f'vllm_log_server_state{{state="{name}"}}'


@pytest.mark.vllm
def test_exporter_reports_a_killed_engine_after_vllm_is_gone(tmp_path) -> None:
    log = tmp_path / "vllm.log"
    server = VllmServer(log)
    with exporter("--log-file", str(log), port=free_port()) as running:
        server.launch()
        try:
            # Before vLLM listens, the log already says it is loading its model.
            loading = running.wait_for(state("loading"), 1, timeout=240)
            assert scrape(server.metrics_url) is None
            assert loading[event("startup_begin")] == 1
            assert loading['vllm_log_vllm_version_info{version="0.32.0"}'] == 1
            server.wait_ready()
            ready = running.wait_for(state("ready"), 1, timeout=60)
            assert ready[event("startup_complete")] == 1
            assert (
                ready["vllm_log_server_state_since_timestamp_seconds"]
                >= loading["vllm_log_server_state_since_timestamp_seconds"]
            )
            # This startup's figures: the weights, the engine, and the total by the log's times.
            for phase in ("weights", "engine_init", "total"):
                assert ready[f'vllm_log_startup_duration_seconds_count{{phase="{phase}"}}'] == 1
            assert 0 < ready['vllm_log_last_startup_duration_seconds{phase="total"}'] <= server.started_in + 2
            counts = send_traffic(server)
            assert counts.get("200", 0) >= 8 and counts.get("400", 0) >= 2, counts
            # The periodic stats line comes within one 10 s interval after traffic.
            metrics = running.wait_for('vllm_log_requests_waiting{engine="0"}', 0, timeout=60)
            assert 0 <= metrics['vllm_log_kv_cache_usage_ratio{engine="0"}'] <= 1
            assert metrics[event("request_error")] == 0  # 400/404 are validation errors
            assert metrics[event("engine_dead")] == 0
            assert http_get(server.metrics_url)[0] == 200

            server.kill_engine_core()
            running.wait_for(event("engine_dead"), 1, timeout=60)
            assert server.wait_exit(timeout=120) == 0  # vLLM exits "successfully" after the death
        finally:
            server.stop()
        assert wait_until(lambda: scrape(server.metrics_url) is None, what="vLLM's /metrics to vanish")
        metrics = running.wait_for(event("shutdown"), 1, timeout=30)
        assert metrics[state("dead")] == 1  # uvicorn's shutdown after the death is no planned stop
        assert {
            e: metrics[event(e)] for e in ("oom", "engine_dead", "startup_failed", "startup_complete")
        } == {
            "oom": 0,
            "engine_dead": 1,
            "startup_failed": 0,
            "startup_complete": 1,
        }
        # Every line of the finished log is read (the last ones may come after the exit).
        running.wait_for("vllm_log_lines_total", log.read_bytes().count(b"\n"), timeout=30)
        assert running.terminate() == 0
