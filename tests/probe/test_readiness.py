"""/ready: what a Kubernetes readiness probe asks the canary instead of vLLM's /health. The rule
step by step on the probe's state, then a real probe process against the stand-in in states that
hold (no race with a probe cycle); the real SIGSTOP hang is in test_live_vllm.py."""

from __future__ import annotations

import pytest
from vllm_probe.metrics import ProbeMetrics
from vllm_probe.outcome import HTTP_4XX, HTTP_5XX, REFUSED, TIMEOUT, Outcome

from tests.support.vllm_server import http_get

from .helpers import Reply, StandIn, completion_reply, running_probe, series

pytestmark = pytest.mark.slow

FAST = ("--interval", "0.5", "--timeout", "0.45")
OK = Outcome.success(0.1, 200)


def fail(reason: str) -> Outcome:
    return Outcome.failure(reason, "test")


def test_ready_after_a_success_and_until_n_failures_in_a_row() -> None:
    metrics = ProbeMetrics({"a": "m"}, lambda: 0.0)
    steps = [
        (fail(REFUSED), False),  # still loading: not before the first success
        (OK, True),
        (fail(TIMEOUT), True),
        (fail(HTTP_5XX), True),
        (fail(TIMEOUT), False),  # the third in a row
        (fail(TIMEOUT), False),
        (OK, True),  # back at the next success
        (fail(TIMEOUT), True),
        (fail(HTTP_4XX), True),  # turned away: the probe's problem, not the server's
        (fail(HTTP_4XX), True),
        (fail(HTTP_4XX), True),
        (fail(TIMEOUT), True),  # two server failures in a row, the 4xx between them not counted
        (fail(TIMEOUT), False),
    ]
    for i, (outcome, ready) in enumerate(steps):
        metrics.record_probe("a", "m", outcome, health_up=True)
        assert metrics.readiness("a", 3)[0] is ready, (i, metrics.readiness("a", 3))
    assert metrics.readiness("a", 3)[1] == "3 probes in a row failed (not ready after 3)"
    assert metrics.readiness("a", 4)[0] is True


def ready(port: int, query: str = "") -> tuple[int, str]:
    return http_get(f"http://127.0.0.1:{port}/ready{query}")


def test_the_endpoint_answers_503_for_a_failing_target_and_200_for_a_serving_one() -> None:
    failing = [completion_reply(), Reply(500, b"<html>oops</html>", "text/html")]
    with StandIn() as good, StandIn(script=failing) as bad:
        targets = ("--target", "good=" + good.url, "--target", "bad=" + bad.url, "--model", "standin")
        with running_probe(*targets, *FAST) as probe:
            bad_requests = series("vllm_probe_requests_total", target="bad", model_name="standin")
            probe.wait_for(lambda v: v.get(bad_requests, 0) >= 5, what="five probes of the failing target")
            assert ready(probe.port, "?target=good") == (200, "good: ready\n")
            status, text = ready(probe.port, "?target=bad")
            assert status == 503 and text.startswith("bad: ") and "probes in a row failed" in text
            status, text = ready(probe.port)
            assert status == 400 and "name a target" in text and "good" in text
            assert ready(probe.port, "?target=nope")[0] == 404
            assert http_get(f"http://127.0.0.1:{probe.port}/elsewhere")[0] == 404
            assert http_get(probe.url)[0] == 200


def test_one_target_needs_no_name_and_is_not_ready_before_its_first_success() -> None:
    with StandIn(script=[Reply(500, b"starting", "text/plain")]) as loading:
        with running_probe("--target", loading.url, "--model", "standin", *FAST) as probe:
            requests = series(
                "vllm_probe_requests_total", target=f"127.0.0.1:{loading.port}", model_name="standin"
            )
            probe.wait_for(lambda v: v.get(requests, 0) >= 1, what="a first probe")
            status, text = ready(probe.port)
            assert status == 503 and "no probe has succeeded yet" in text
