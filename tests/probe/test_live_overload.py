"""/ready against a real vLLM past its capacity: canaries time out in the queue but the engine's
counters move, so /ready stays 200; `kill -STOP` of EngineCore (a real hang) turns it 503 within
the README's bound, `kill -CONT` back to 200. The queue: locust replaying traffic (overload.py)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.support.overload import locust_python, replaying, schedule
from tests.support.vllm_server import MODEL_NAME, VllmServer, http_get

from .helpers import hang_bound, running_probe, samples, series, wait_until

pytestmark = pytest.mark.vllm

N, INTERVAL, TIMEOUT, JITTER = 3, 2.0, 1.5, 0.1  # the /metrics read after a failure: up to 1.5 s too
BOUND = hang_bound(N, INTERVAL, JITTER, TIMEOUT)  # the README's
SLACK = 5.0  # the probe's own threads waiting for a core on a loaded two-core machine
# One sequence at a time: 8 requests a second of the trace's lengths (a few a second fill it on a
# quiet machine) keep a queue of 9 (locust holds 10 open), in which a canary waits seconds.
SERVER = ("--max-num-seqs", "1", "--max-num-batched-tokens", "1024", "--no-enable-prefix-caching")
RATE, LOAD_SECONDS = 8.0, 90.0
IN_A_ROW = re.compile(r"(\d+) probes in a row failed")


def vllm_values(server: VllmServer, name: str) -> float:
    status, text = http_get(server.metrics_url, timeout=10)
    assert status == 200, text[:200]
    return sum(v for k, v in samples(text).items() if k.startswith(name + "{"))


def test_an_overloaded_engine_stays_ready_and_a_hung_one_leaves(tmp_path: Path) -> None:
    locust_python()  # fails naming `make locust-venv` before a server starts
    server = VllmServer(tmp_path / "vllm.log", extra_args=SERVER)
    server.start()
    try:
        check(server, tmp_path)
    finally:
        server.stop()


def check(server: VllmServer, work: Path) -> None:
    target = f"127.0.0.1:{server.port}"
    labels = {"target": target, "model_name": MODEL_NAME}
    timeouts = series("vllm_probe_failures_total", reason="timeout", **labels)
    requests = series("vllm_probe_requests_total", **labels)
    timing = ("--interval", str(INTERVAL), "--timeout", str(TIMEOUT), "--jitter", str(JITTER))
    with running_probe("--target", server.url, *timing, "--not-ready-after", str(N)) as probe:
        ready_url = f"http://127.0.0.1:{probe.port}/ready"
        probe.wait_for(lambda v: v.get(series("vllm_probe_success", **labels)) == 1, what="a first success")

        # 1. Overload: poll /ready until the canary has failed N + 2 times in a row; every answer 200.
        rows, source = schedule(RATE, LOAD_SECONDS)
        answers, most_waiting, most_in_row = [], 0.0, 0
        with replaying(server.url, MODEL_NAME, rows, work / "locust") as locust:
            deadline = time.monotonic() + LOAD_SECONDS
            while most_in_row < N + 2:
                assert locust.poll() is None, (work / "locust" / "locust.log").read_text()[-2000:]
                assert time.monotonic() < deadline, (source, answers[-5:], most_waiting)
                status, why = http_get(ready_url)
                answers.append((status, why.strip()))
                found = IN_A_ROW.search(why)
                most_in_row = max(most_in_row, int(found.group(1)) if found else 0)
                most_waiting = max(most_waiting, vllm_values(server, "vllm:num_requests_waiting"))
                time.sleep(0.25)
        during = probe.metrics()
        assert {status for status, _ in answers} == {200}, [a for a in answers if a[0] != 200]
        assert most_waiting >= 2, most_waiting  # a real queue, which the canary waited in
        assert during[timeouts] >= N + 2, during  # they timed out: the old rule would say 503

        # The load stopped, its requests aborted: the engine idles and the canary succeeds again.
        wait_until(
            lambda: vllm_values(server, "vllm:num_requests_running")
            + vllm_values(server, "vllm:num_requests_waiting")
            == 0,
            timeout=60,
            what="vLLM to drop the load's requests",
        )
        wait_until(lambda: http_get(ready_url) == (200, f"{target}: ready\n"), timeout=30, what="a success")

        # 2. A hang: 503 within the bound, though /health says 200; back at SIGCONT.
        engine = server.engine_core_pid()
        os.kill(engine, signal.SIGSTOP)
        try:
            stopped_at, at_stop = time.monotonic(), probe.metrics()[requests]
            hung = wait_until(
                lambda: (answer := http_get(ready_url))[0] == 503 and answer,
                timeout=BOUND + 30,
                what="/ready to answer 503",
            )
            took = time.monotonic() - stopped_at
            at_503 = probe.metrics()
            assert f"the last {N} with no engine progress" in hung[1], hung
            assert http_get(server.url + "/health")[0] == 200  # vLLM itself says healthy
        finally:
            os.kill(engine, signal.SIGCONT)
        assert took <= BOUND + SLACK, (took, BOUND)
        # At most N + 1 probes after the stop: one in flight at it, then the N failed in a row.
        assert at_503[requests] - at_stop <= N + 1, (at_503[requests], at_stop)
        wait_until(lambda: http_get(ready_url)[0] == 200, timeout=30, what="/ready 200 after SIGCONT")
