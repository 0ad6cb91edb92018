"""The probe against a real vLLM CPU server: answers, accounting, API key, a hung engine. `kill -STOP`
of EngineCore is a real hang (/health still 200, completions never return, gauges frozen): the probe
must say so, and its /ready take the server out of service until `kill -CONT`."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.vllm_server import MODEL_NAME, VllmServer, http_get

from .helpers import probe_command, running_probe, samples, series, wait_until

pytestmark = pytest.mark.vllm

API_KEY = "sk-probe-test-0123"
# Roomy for a loaded 2-core machine: the tiny model answers one token in 10-600 ms there.
TIMING = ("--interval", "2", "--timeout", "1.5")


def vllm_finished(server: VllmServer) -> float:
    """Requests vLLM counts as finished (every finished_reason), from its own /metrics."""
    status, text = http_get(server.metrics_url)
    assert status == 200, text[:200]
    return sum(v for k, v in samples(text).items() if k.startswith("vllm:request_success_total{"))


def vllm_sample(server: VllmServer, name: str) -> float:
    status, text = http_get(server.metrics_url)
    assert status == 200, text[:200]
    return sum(v for k, v in samples(text).items() if k.startswith(name + "{"))


def run_once(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", "VLLM_PROBE_MODEL")}
    return subprocess.run(
        probe_command("--once", *args),
        capture_output=True,
        text=True,
        timeout=120,
        env={**environment, **(env or {})},
    )


def answered(values: dict[str, float], target: str, model: str = MODEL_NAME) -> float:
    requests = values[series("vllm_probe_requests_total", target=target, model_name=model)]
    failed = sum(
        v
        for k, v in values.items()
        if k.startswith("vllm_probe_failures_total{") and f'target="{target}"' in k
    )
    return requests - failed


def test_probes_of_a_real_vllm_succeed_and_vllm_counts_exactly_those(vllm_server: VllmServer) -> None:
    target = f"127.0.0.1:{vllm_server.port}"
    labels = {"target": target, "model_name": MODEL_NAME}
    before = vllm_finished(vllm_server)
    inter_token_before = vllm_sample(vllm_server, "vllm:inter_token_latency_seconds_count")
    tokens_before = vllm_sample(vllm_server, "vllm:generation_tokens_total")
    successes = 0
    for mode in ("completion", "completion", "chat"):
        started = time.time()
        result = run_once("--target", vllm_server.url, "--mode", mode, "--timeout", "30", "--interval", "60")
        assert result.returncode == 0, result.stderr
        values = samples(result.stdout)
        # No --model: the name came from /v1/models.
        assert values[series("vllm_probe_success", **labels)] == 1, result.stdout
        assert values[series("vllm_probe_requests_total", **labels)] == 1
        assert values[series("vllm_probe_duration_seconds_count", **labels)] == 1
        assert 0 < values[series("vllm_probe_duration_seconds_sum", **labels)] < 30
        assert started <= values[series("vllm_probe_last_success_timestamp_seconds", **labels)] <= time.time()
        assert values[series("vllm_probe_health_up", target=target)] == 1
        assert f"target {target}: serves model {MODEL_NAME} (from /v1/models)" in result.stderr
        successes += answered(values, target)
    assert successes == 3
    # vLLM records the finished request just after answering: wait for it, then check it is
    # exactly the probes (what the recording rules subtract) and stays so.
    wait_until(lambda: vllm_finished(vllm_server) >= before + successes, timeout=10, what="vLLM's count")
    time.sleep(1)
    assert vllm_finished(vllm_server) == before + successes
    # One token each: no inter-token latency observation, one generated token per probe.
    assert vllm_sample(vllm_server, "vllm:inter_token_latency_seconds_count") == inter_token_before
    assert vllm_sample(vllm_server, "vllm:generation_tokens_total") == tokens_before + successes


def test_the_running_probe_reports_a_real_vllm(vllm_server: VllmServer) -> None:
    target = f"127.0.0.1:{vllm_server.port}"
    labels = {"target": target, "model_name": MODEL_NAME}
    with running_probe("--target", vllm_server.url, *TIMING, "--jitter", "0.2") as probe:
        values = probe.wait_for(
            lambda v: v.get(series("vllm_probe_requests_total", **labels), 0) >= 3, what="three probes"
        )
    assert values[series("vllm_probe_success", **labels)] == 1
    assert answered(values, target) == values[series("vllm_probe_requests_total", **labels)], values
    assert values[series("vllm_probe_duration_seconds_count", **labels)] == answered(values, target)
    assert values[series("vllm_probe_health_up", target=target)] == 1
    assert values[series("vllm_probe_skipped_total", target=target)] == 0
    assert time.time() - values[series("vllm_probe_last_success_timestamp_seconds", **labels)] < 10


# -- a dedicated server (started with --api-key) that the tests may freeze -------------------


@pytest.fixture(scope="module")
def keyed_vllm(tmp_path_factory: pytest.TempPathFactory):
    server = VllmServer(tmp_path_factory.mktemp("vllm-keyed") / "vllm.log", extra_args=("--api-key", API_KEY))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "vllm-api-key"
    path.write_text(API_KEY + "\n")
    return path


def test_api_key_against_a_real_vllm(keyed_vllm: VllmServer, key_file: Path) -> None:
    target = f"127.0.0.1:{keyed_vllm.port}"
    without = run_once(
        "--target", keyed_vllm.url, "--model", MODEL_NAME, "--timeout", "30", "--interval", "60"
    )
    assert without.returncode == 1
    values = samples(without.stdout)
    assert (
        values[series("vllm_probe_failures_total", target=target, model_name=MODEL_NAME, reason="http_4xx")]
        == 1
    )
    assert values[series("vllm_probe_health_up", target=target)] == 1  # /health needs no key

    for args, env in ((("--api-key-file", str(key_file)), {}), ((), {"VLLM_API_KEY": API_KEY})):
        result = run_once("--target", keyed_vllm.url, "--timeout", "30", "--interval", "60", *args, env=env)
        assert result.returncode == 0, result.stderr
        values = samples(result.stdout)
        assert values[series("vllm_probe_success", target=target, model_name=MODEL_NAME)] == 1


def established_connections(pid: int, port: int) -> int:
    """TCP connections the process `pid` has open to `port` on loopback, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[3] == "01" and remote_port == port and fields[9] in inodes:
                count += 1
    return count


def test_a_hung_engine_shows_as_timeouts_while_health_says_200(
    keyed_vllm: VllmServer, key_file: Path
) -> None:
    target = f"127.0.0.1:{keyed_vllm.port}"
    labels = {"target": target, "model_name": MODEL_NAME}
    success, timeouts = (
        series("vllm_probe_success", **labels),
        series("vllm_probe_failures_total", reason="timeout", **labels),
    )
    requests = series("vllm_probe_requests_total", **labels)
    finished_before = vllm_finished(keyed_vllm)
    with running_probe("--target", keyed_vllm.url, "--api-key-file", str(key_file), *TIMING) as probe:
        probe.wait_for(lambda v: v.get(success) == 1, timeout=60, what="a first success")
        ready = f"http://127.0.0.1:{probe.port}/ready"
        assert http_get(ready)[0] == 200
        engine = keyed_vllm.engine_core_pid()
        os.kill(engine, signal.SIGSTOP)
        try:
            stopped_at = time.monotonic()
            at_stop = probe.metrics()
            most_connections, seen_connection = 0, False
            deadline = time.monotonic() + 60
            while True:
                open_now = established_connections(probe.process.pid, keyed_vllm.port)
                most_connections = max(most_connections, open_now)
                seen_connection = seen_connection or open_now == 1
                scrape_started = time.monotonic()
                during = probe.metrics()  # the probe's /metrics answers during the hang
                scrape_took = time.monotonic() - scrape_started
                if during[timeouts] >= at_stop[timeouts] + 3 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            hung_for = time.monotonic() - stopped_at
            assert during[timeouts] >= at_stop[timeouts] + 3, during
            # Three failed probes in a row (--not-ready-after's default): out of the Service's
            # endpoints, though /health answers 200.
            status, why = http_get(ready)
            assert status == 503 and "probes in a row failed" in why, why
            # Within the stated bound: 3 x interval x (1 + jitter) + timeout = 8.1 s, plus one
            # interval before the first tick after the stop; 25 s leaves room for a loaded machine.
            assert hung_for < 25, hung_for
            assert during[success] == 0
            assert during[series("vllm_probe_health_up", target=target)] == 1
            assert http_get(keyed_vllm.url + "/health")[0] == 200  # vLLM itself says healthy
            assert http_get(keyed_vllm.url + "/ping")[0] == 200
            assert scrape_took < 1
            # Never more than one probe at a time: one connection at most, one request per tick.
            assert seen_connection and most_connections == 1
            sent = (
                during[requests]
                - at_stop[requests]
                + during[series("vllm_probe_skipped_total", target=target)]
            )
            assert sent <= hung_for / (2 * 0.9) + 1, (sent, hung_for)
            # While the engine is stopped nothing more is answered, and what the probe counts as
            # answered is exactly what vLLM counts as finished (the rules subtract this).
            assert vllm_finished(keyed_vllm) - finished_before == answered(during, target)
        finally:
            os.kill(engine, signal.SIGCONT)
        recovered = probe.wait_for(
            lambda v: v.get(success) == 1 and v[requests] > during[requests], timeout=60, what="recovery"
        )
        assert http_get(ready)[0] == 200  # back in at the first success
        last = probe.metrics()
        assert probe.terminate() == 0
        log = probe.stderr()
    assert recovered[timeouts] >= 3
    # The timed-out probes were aborted, not answered, once the engine resumed: vLLM's count
    # exceeds the probe's only by what finished between the last scrape and the exit.
    wait_until(lambda: vllm_sample(keyed_vllm, "vllm:num_requests_running") == 0, what="vLLM to settle")
    extra = vllm_finished(keyed_vllm) - finished_before - answered(last, target)
    assert 0 <= extra <= 2 < last[timeouts], (extra, last[timeouts])
    assert f"target {target}: probes fail: timeout (POST /v1/completions: no answer within 1.5 s)" in log
    assert f"target {target}: probes succeed after" in log
