"""The command line as a real subprocess: usage errors, exit statuses, signals, --once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.exporter.helpers import HONOUR_FILE_MODES
from tests.support.vllm_server import free_port

from .helpers import Reply, StandIn, completion_reply, probe_command, running_probe, samples, wait_until

pytestmark = pytest.mark.slow

URL = "http://127.0.0.1:8000"


def run(
    *args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", "VLLM_PROBE_MODEL")}
    return subprocess.run(
        [*prefix, *probe_command(*args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environment, **(env or {})},
    )


def assert_one_sentence(result: subprocess.CompletedProcess, status: int, message: str) -> None:
    assert result.returncode == status, (result.returncode, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vllm-probe: error: "), result.stderr
    assert message in lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no target: give at least one --target URL"),
        (["--target", "vllm:8000"], "is not an http:// or https:// URL"),
        (["--target", "ftp://vllm:8000"], "is not an http:// or https:// URL"),
        (["--target", "http://"], "has no host name"),
        (["--target", "http://vllm:99999"], "has an invalid port"),
        (["--target", "http://user:secret@vllm:8000"], "carries credentials in the URL"),
        (["--target", "http://vllm:8000/?x=1"], "has a query or fragment"),
        (["--target", "=http://vllm:8000"], "has an empty name before '='"),
        (["--target", URL, "--target", URL + "/"], "two targets have the label '127.0.0.1:8000'"),
        (["--target", "a=" + URL, "--target", "a=http://other:8000"], "two targets have the label 'a'"),
        (["--target", URL, "--interval", "-1"], "--interval and --timeout must be positive"),
        (["--target", URL, "--timeout", "0"], "--interval and --timeout must be positive"),
        (
            ["--target", URL, "--interval", "5", "--timeout", "5"],
            "--timeout (5 s) must be less than --interval (5 s)",
        ),
        (["--target", URL, "--timeout", "20"], "--timeout (20 s) must be less than --interval (15 s)"),
        (["--target", URL, "--interval", "nan"], "'nan' is not a finite number"),
        (["--target", URL, "--interval", "soon"], "'soon' is not a number"),
        (["--target", URL, "--jitter", "1"], "--jitter must be a fraction from 0 to below 1"),
        (["--target", URL, "--jitter", "-0.1"], "--jitter must be a fraction from 0 to below 1"),
        (["--target", URL, "--listen", "9401"], "--listen expects HOST:PORT"),
        (["--target", URL, "--listen", "127.0.0.1:0"], "--listen expects HOST:PORT"),
        (["--target", URL, "--listen", "127.0.0.1:http"], "--listen expects HOST:PORT"),
        (["--target", URL, "--mode", "embeddings"], "invalid choice: 'embeddings'"),
        (["--target", URL, "--model", " "], "--model is empty"),
        (["--target", URL, "--health-path", "health"], "--health-path must start with '/'"),
        (["--target", URL, "--not-ready-after", "0"], "--not-ready-after must be 1 or more probes, got 0"),
        (["--target", URL, "--not-ready-after", "three"], "argument --not-ready-after: invalid int value"),
        (
            ["--target", URL, "--api-key-file", "/nonexistent/key"],
            "cannot read --api-key-file /nonexistent/key",
        ),
        (["--target", URL, "--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_usage_errors_are_one_sentence_and_exit_2(args: list[str], message: str) -> None:
    assert_one_sentence(run(*args), 2, message)


def test_api_key_file_problems_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert_one_sentence(run("--target", URL, "--api-key-file", str(empty)), 2, "is empty")
    assert_one_sentence(
        run("--target", URL, "--api-key-file", str(tmp_path)), 2, f"cannot read --api-key-file {tmp_path}"
    )
    two = tmp_path / "two"
    two.write_text("key-one\nkey-two\n")
    assert_one_sentence(run("--target", URL, "--api-key-file", str(two)), 2, "holds more than one key")
    secret = tmp_path / "secret"
    secret.write_text("sk-test\n")
    secret.chmod(0o000)
    result = run("--target", URL, "--api-key-file", str(secret), prefix=HONOUR_FILE_MODES)
    assert_one_sentence(result, 2, f"cannot read --api-key-file {secret}: Permission denied")


def test_cannot_listen_exits_1_in_one_sentence() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("--target", URL, "--listen", f"127.0.0.1:{port}")
    assert_one_sentence(result, 1, f"cannot listen on 127.0.0.1:{port}: Address already in use")


def test_version_from_the_module_and_the_console_script() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == "vllm-probe 0.1.0"
    script = Path(sys.executable).with_name("vllm-probe")
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "vllm-probe 0.1.0"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_0_at_once_with_a_probe_in_flight(sig: int) -> None:
    # The canary request would take 20 s; the probe must not wait for it (or its 25 s timeout).
    with StandIn(script=[Reply(delay=20, body=completion_reply().body)]) as standin:
        with running_probe(
            "--target", standin.url, "--model", "m", "--interval", "30", "--timeout", "25"
        ) as probe:
            probe.text()
            wait_until(lambda: standin.in_flight == 1, what="the canary request to be in flight")
            sent = time.monotonic()
            status = probe.terminate(sig)
            took = time.monotonic() - sent
    assert status == 0, probe.stderr()
    assert took < 3, f"the probe took {took:.2f} s to exit"


def test_once_prints_the_exposition_and_exits_0_when_every_probe_succeeds() -> None:
    with StandIn() as good:
        result = run("--target", "good=" + good.url, "--once")
    assert result.returncode == 0, result.stderr
    values = samples(result.stdout)
    assert values['vllm_probe_success{model_name="standin",target="good"}'] == 1
    assert values['vllm_probe_requests_total{model_name="standin",target="good"}'] == 1
    assert values['vllm_probe_health_up{target="good"}'] == 1
    assert values['vllm_probe_build_info{version="0.1.0"}'] == 1


def test_once_exits_1_when_any_probe_fails() -> None:
    refused = f"http://127.0.0.1:{free_port()}"
    with StandIn() as good:
        started = time.monotonic()
        result = run("--target", "good=" + good.url, "--target", "gone=" + refused, "--once")
        took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    values = samples(result.stdout)
    assert values['vllm_probe_success{model_name="standin",target="good"}'] == 1
    assert values['vllm_probe_success{model_name="unknown",target="gone"}'] == 0
    assert values['vllm_probe_failures_total{model_name="unknown",reason="refused",target="gone"}'] == 1
    assert took < 10  # once means once: no retry loop on the refused port
