"""Failures the probe must classify, against real HTTP servers on loopback: refused connections on
a free port; answers a healthy vLLM does not give on demand (500, HTML, no `choices`, 401, trickled
or reset) from the stand-in server of helpers.py."""

from __future__ import annotations

import json
import time

import pytest
from prometheus_client.utils import floatToGoString
from vllm_probe.metrics import BUCKETS
from vllm_probe.outcome import REASONS

from tests.support.vllm_server import free_port

from .helpers import (
    Reply,
    StandIn,
    chat_reply,
    completion_reply,
    embedding_reply,
    label_sets,
    models_reply,
    running_probe,
    series,
)

pytestmark = pytest.mark.slow

# Short cycles, with a timeout a loopback answer meets even on a loaded machine.
FAST = ("--interval", "0.5", "--timeout", "0.45")


def failures(values: dict[str, float], target: str, model: str) -> dict[str, float]:
    return {
        reason: values[series("vllm_probe_failures_total", target=target, model_name=model, reason=reason)]
        for reason in REASONS
    }


def test_500_html_no_choices_and_401_each_get_their_reason() -> None:
    html = Reply(body=b"<html><body>Bad gateway</body></html>", content_type="text/html")
    no_choices = Reply(body=json.dumps({"object": "text_completion", "choices": []}).encode())
    script = [
        Reply(500, b'{"error": "internal"}'),
        html,
        no_choices,
        Reply(401, b'{"error": "Unauthorized"}'),
        completion_reply(),
    ]
    with StandIn(script=script) as standin:
        with running_probe("--target", "s=" + standin.url, "--model", "standin", *FAST) as probe:
            requests = series("vllm_probe_requests_total", target="s", model_name="standin")
            values = probe.wait_for(lambda v: v.get(requests, 0) >= 6, what="six probes")
            sent = len(standin.canary_requests())
    assert failures(values, "s", "standin") == {
        "timeout": 0,
        "refused": 0,
        "http_4xx": 1,
        "http_5xx": 1,
        "bad_body": 2,
        "error": 0,
    }
    assert values[series("vllm_probe_success", target="s", model_name="standin")] == 1
    # Counted when finished: the stand-in may hold one more request than the probe counted.
    assert values[requests] <= sent <= values[requests] + 1
    answered = values[requests] - sum(failures(values, "s", "standin").values())
    assert answered == values[series("vllm_probe_duration_seconds_count", target="s", model_name="standin")]
    assert answered == values[requests] - 4


def test_reset_is_error_and_slow_answer_is_timeout() -> None:
    script = [Reply(reset=True), Reply(delay=1.0, body=completion_reply().body), completion_reply()]
    with StandIn(script=script) as standin:
        with running_probe("--target", "s=" + standin.url, "--model", "standin", *FAST) as probe:
            success = series("vllm_probe_success", target="s", model_name="standin")
            values = probe.wait_for(lambda v: v.get(success) == 1, what="a success after the failures")
    assert failures(values, "s", "standin") == {
        "timeout": 1,
        "refused": 0,
        "http_4xx": 0,
        "http_5xx": 0,
        "bad_body": 0,
        "error": 1,
    }


def test_refused_port_is_refused_and_not_retried_in_a_loop() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with running_probe("--target", "gone=" + url, *FAST) as probe:
        first = probe.wait_for(
            lambda v: v.get(series("vllm_probe_requests_total", target="gone", model_name="unknown"), 0) >= 1
        )
        started = time.monotonic()
        time.sleep(3)
        values = probe.metrics()
        elapsed = time.monotonic() - started
    requests = series("vllm_probe_requests_total", target="gone", model_name="unknown")
    made = values[requests] - first[requests]
    # One probe per tick, ticks at least 0.45 s apart (0.5 s - 10% jitter): at most 7 in 3 s.
    assert 3 <= made <= elapsed / 0.45 + 1, made
    assert failures(values, "gone", "unknown")["refused"] == values[requests]
    assert values[series("vllm_probe_success", target="gone", model_name="unknown")] == 0
    assert values[series("vllm_probe_health_up", target="gone")] == 0
    assert (
        values[series("vllm_probe_last_success_timestamp_seconds", target="gone", model_name="unknown")] == 0
    )
    assert values[series("vllm_probe_last_probe_timestamp_seconds", target="gone")] > time.time() - 5


def test_a_trickled_answer_makes_the_next_ticks_skip_and_never_stack() -> None:
    # The header bytes arrive one by one over 2.5 s: no single read waits 0.45 s, so only the
    # whole-probe budget ends it; ticks meanwhile are skipped, not queued.
    script = [Reply(trickle_headers=2.5, body=completion_reply().body), completion_reply()]
    with StandIn(script=script) as standin:
        with running_probe("--target", "s=" + standin.url, "--model", "standin", *FAST) as probe:
            success = series("vllm_probe_success", target="s", model_name="standin")
            values = probe.wait_for(
                lambda v: (
                    v.get(success) == 1
                    and v[
                        series(
                            "vllm_probe_failures_total", target="s", model_name="standin", reason="timeout"
                        )
                    ]
                    == 1
                ),
                what="the trickled probe to fail and the next to succeed",
            )
    assert values[series("vllm_probe_skipped_total", target="s")] >= 3
    assert standin.max_in_flight == 1


def test_health_is_reported_apart_from_the_canary() -> None:
    with StandIn(health=Reply(503, b"")) as standin:
        with running_probe("--target", "s=" + standin.url, "--model", "standin", *FAST) as probe:
            values = probe.wait_for(
                lambda v: v.get(series("vllm_probe_success", target="s", model_name="standin")) == 1
            )
    assert values[series("vllm_probe_health_up", target="s")] == 0
    assert {s.path for s in standin.seen if s.method == "GET"} == {"/health"}


def test_custom_health_path() -> None:
    with StandIn() as standin:
        with running_probe(
            "--target", "s=" + standin.url, "--model", "standin", "--health-path", "/ping", *FAST
        ) as probe:
            values = probe.wait_for(
                lambda v: v.get(series("vllm_probe_success", target="s", model_name="standin")) == 1
            )
    assert values[series("vllm_probe_health_up", target="s")] == 0  # the stand-in has no /ping
    assert "/ping" in {s.path for s in standin.seen}


def test_api_key_from_file_and_from_environment(tmp_path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n")
    with StandIn() as standin:
        for args, env, expected in (
            (("--api-key-file", str(key_file)), {}, "Bearer sk-from-file"),
            ((), {"VLLM_API_KEY": "sk-from-env"}, "Bearer sk-from-env"),
            (("--api-key-file", str(key_file)), {"VLLM_API_KEY": "sk-from-env"}, "Bearer sk-from-file"),
        ):
            standin.seen.clear()
            with running_probe("--target", "s=" + standin.url, *FAST, *args, env=env) as probe:
                probe.wait_for(
                    lambda v: v.get(series("vllm_probe_success", target="s", model_name="standin")) == 1
                )
            paths = {s.path for s in standin.seen}
            assert {"/health", "/v1/models", "/v1/completions"} <= paths
            assert {s.headers.get("Authorization") for s in standin.seen} == {expected}


def test_embed_mode_asks_for_an_embedding_and_checks_for_one() -> None:
    # A completion answer (choices, no data) is not an embedding; a 404 says what to try.
    script = [completion_reply(), Reply(404, b'{"detail": "Not Found"}'), embedding_reply()]
    with StandIn(script=script) as standin:
        with running_probe("--target", "s=" + standin.url, "--mode", "embed", *FAST) as probe:
            values = probe.wait_for(
                lambda v: v.get(series("vllm_probe_success", target="s", model_name="standin")) == 1
            )
            assert probe.terminate() == 0
            log = probe.stderr()
    assert failures(values, "s", "standin")["bad_body"] == 1
    assert failures(values, "s", "standin")["http_4xx"] == 1
    assert "answered HTTP 404 (a wrong --model or path, or a generating model: drop --mode embed)" in log
    request = standin.canary_requests()[0]
    assert request.path == "/v1/embeddings"
    assert json.loads(request.body) == {"model": "standin", "input": "ping", "encoding_format": "base64"}


def test_a_404_to_a_completion_suggests_embed_mode_for_a_pooling_model() -> None:
    with StandIn(script=[Reply(404, b'{"detail": "Not Found"}')]) as standin:
        with running_probe("--target", "s=" + standin.url, "--model", "standin", *FAST) as probe:
            labels = {"target": "s", "model_name": "standin", "reason": "http_4xx"}
            rejected = series("vllm_probe_failures_total", **labels)
            probe.wait_for(lambda v: v.get(rejected, 0) >= 1)
            assert probe.terminate() == 0
            log = probe.stderr()
    assert "answered HTTP 404 (a wrong --model or path, or a pooling model: use --mode embed)" in log


def test_no_key_sends_no_authorization(tmp_path) -> None:
    with StandIn() as standin:
        with running_probe("--target", "s=" + standin.url, *FAST, env={"VLLM_API_KEY": ""}) as probe:
            probe.wait_for(
                lambda v: v.get(series("vllm_probe_success", target="s", model_name="standin")) == 1
            )
    assert all("Authorization" not in s.headers for s in standin.seen)


def test_the_request_is_one_token_and_chat_mode_checks_for_a_message() -> None:
    with StandIn(script=[completion_reply(), chat_reply()]) as standin:
        with running_probe("--target", "s=" + standin.url, "--mode", "chat", *FAST) as probe:
            # The first answer is a completion (text, no message): not a chat answer.
            values = probe.wait_for(
                lambda v: v.get(series("vllm_probe_success", target="s", model_name="standin")) == 1
            )
    assert failures(values, "s", "standin")["bad_body"] == 1
    request = json.loads(standin.canary_requests()[0].body)
    assert standin.canary_requests()[0].path == "/v1/chat/completions"
    assert request == {
        "model": "standin",
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
        "temperature": 0,
    }


def test_a_404_makes_the_probe_ask_for_the_model_again() -> None:
    not_found = Reply(404, b'{"error": "The model `alpha` does not exist."}')
    with StandIn(
        script=[completion_reply("alpha"), not_found, completion_reply("beta")],
        models=[models_reply("alpha"), models_reply("beta")],
    ) as standin:
        with running_probe("--target", "s=" + standin.url, *FAST) as probe:
            values = probe.wait_for(
                lambda v: v.get(series("vllm_probe_success", target="s", model_name="beta")) == 1,
                what="the probe to switch to model beta",
            )
            text = probe.text()
    sent = [json.loads(s.body)["model"] for s in standin.canary_requests()]
    assert sent[:3] == ["alpha", "alpha", "beta"]
    assert [s.path for s in standin.seen if s.path == "/v1/models"] == ["/v1/models"] * 2
    # The series of the old name are gone, not left behind with stale values.
    assert {labels.get("model_name") for _, labels in label_sets(text)} - {None} == {"beta"}
    assert values[series("vllm_probe_requests_total", target="s", model_name="beta")] >= 1


def test_series_exist_at_zero_before_the_first_probe_ends() -> None:
    with StandIn(health=Reply(delay=2.0)) as standin:
        with running_probe("--target", "s=" + standin.url, "--interval", "5", "--timeout", "3") as probe:
            values = probe.metrics()
    labels = {"target": "s", "model_name": "unknown"}
    assert values[series("vllm_probe_success", **labels)] == 0
    assert values[series("vllm_probe_requests_total", **labels)] == 0
    assert values[series("vllm_probe_duration_seconds_count", **labels)] == 0
    assert values[series("vllm_probe_duration_seconds_bucket", le="+Inf", **labels)] == 0
    assert failures(values, "s", "unknown") == dict.fromkeys(REASONS, 0)
    assert values[series("vllm_probe_skipped_total", target="s")] == 0
    assert values[series("vllm_probe_health_up", target="s")] == 0
    assert values[series("vllm_probe_last_probe_timestamp_seconds", target="s")] == 0


def test_one_log_line_per_state_change() -> None:
    script = [completion_reply(), completion_reply(), *[Reply(500, b"{}")] * 4, completion_reply()]
    with StandIn(script=script) as standin:
        with running_probe("--target", "s=" + standin.url, "--model", "standin", *FAST) as probe:
            requests = series("vllm_probe_requests_total", target="s", model_name="standin")
            probe.wait_for(lambda v: v.get(requests, 0) >= 9, what="nine probes")
            assert probe.terminate() == 0
            log = probe.stderr().splitlines()
    # Latencies vary: compare the lines with "(N.NNN s)" cut off.
    messages = [line.split("vllm-probe: ", 1)[1].split(" (0.", 1)[0] for line in log]
    assert messages == [
        messages[0],
        "target s: probes succeed",
        "target s: health check answers 200",
        "target s: probes fail: http_5xx (POST /v1/completions answered HTTP 500)",
        # Once for the four: the stand-in has no /metrics, so /ready follows the canary alone.
        "target s: engine progress unknown (GET /metrics answered HTTP 404)",
        "target s: probes succeed after 4 failed probes",
    ], log
    assert messages[0].startswith("serving /metrics and /ready on 127.0.0.1:")


def test_label_values_stay_a_fixed_set_whatever_happens() -> None:
    rotating_models = [models_reply(name) for name in ("m1", "m2", "m3", "m1")]
    script = [
        Reply(500, b"{}"),
        Reply(body=b"<html>", content_type="text/html"),
        Reply(reset=True),
        Reply(404, b"{}"),
        Reply(401, b"{}"),
        Reply(delay=1.0),
        Reply(404, b"{}"),
        Reply(200, b'{"choices": "x"}'),
        Reply(404, b"{}"),
        completion_reply(),
    ]
    refused = f"http://127.0.0.1:{free_port()}"
    with StandIn(script=script, models=rotating_models) as standin:
        with running_probe("--target", "bad=" + standin.url, "--target", "gone=" + refused, *FAST) as probe:
            probe.wait_for(
                lambda v: v.get(series("vllm_probe_success", target="bad", model_name="m1")) == 1,
                timeout=60,
                what="every scripted failure, then a success",
            )
            text = probe.text()
    found: dict[str, set[str]] = {}
    for name, labels in label_sets(text):
        assert name.startswith("vllm_probe_"), name
        for key, value in labels.items():
            found.setdefault(key, set()).add(value)
    assert found == {
        "target": {"bad", "gone"},
        "model_name": {"m1", "unknown"},
        "reason": set(REASONS),
        # The contract's bounds, as prometheus_client writes them, and +Inf.
        "le": {floatToGoString(b) for b in BUCKETS} | {"+Inf"},
        "version": {"0.1.0"},
    }
    # Per target: success, the buckets with +Inf, sum and count, last success, requests,
    # 6 failure reasons, skipped, health, last probe; and the build info.
    assert len(label_sets(text)) == 2 * (len(BUCKETS) + 1 + 2 + 3 + 6 + 3) + 1


def test_a_model_that_keeps_answering_404_is_logged_once() -> None:
    with StandIn(script=[Reply(404, b"{}")], models=[models_reply("alpha")]) as standin:
        with running_probe("--target", "s=" + standin.url, *FAST) as probe:
            requests = series("vllm_probe_requests_total", target="s", model_name="alpha")
            probe.wait_for(lambda v: v.get(requests, 0) >= 4, what="four probes")
            assert probe.terminate() == 0
            log = probe.stderr()
    # Asked again after every 404 (one GET per cycle, no more), but logged once.
    asked, sent = len([s for s in standin.seen if s.path == "/v1/models"]), len(standin.canary_requests())
    assert sent >= 4 and sent <= asked <= sent + 1  # the last cycle may have been cut short
    assert log.count("serves model alpha") == 1
    assert log.count("probes fail: http_4xx") == 1


def test_model_from_the_environment_is_sent_without_discovery() -> None:
    with StandIn() as standin:
        with running_probe("--target", "s=" + standin.url, *FAST, env={"VLLM_PROBE_MODEL": "given"}) as probe:
            probe.wait_for(lambda v: v.get(series("vllm_probe_success", target="s", model_name="given")) == 1)
    assert {json.loads(s.body)["model"] for s in standin.canary_requests()} == {"given"}
    assert "/v1/models" not in {s.path for s in standin.seen}
