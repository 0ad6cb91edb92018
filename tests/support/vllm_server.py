"""Start a real vLLM (CPU build) server on loopback with a tiny local model, for the test suite and
the fixture-capture script. `make vllm-venv` builds its virtualenv (DEVELOPERS.md);
`VLLM_OBS_VLLM_PYTHON` points at its python if it lives elsewhere."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

CACHE_DIR = Path(os.environ.get("VLLM_OBS_CACHE", Path.home() / ".cache" / "vllm-obs"))
VLLM_VERSION = "0.32.0"
MODEL_NAME = "tiny-llama"
_BUILD_SCRIPT = Path(__file__).with_name("build_tiny_model.py")


class VllmUnavailable(RuntimeError):
    """The vLLM virtualenv is missing: run `make vllm-venv` (the test command does)."""


def vllm_python() -> Path:
    configured = os.environ.get("VLLM_OBS_VLLM_PYTHON")
    path = Path(configured) if configured else CACHE_DIR / f"vllm-{VLLM_VERSION}" / "bin" / "python"
    if not path.exists():
        raise VllmUnavailable(
            f"no vLLM virtualenv at {path}; run `make vllm-venv` or set VLLM_OBS_VLLM_PYTHON"
        )
    return path


def tiny_model_dir() -> Path:
    """Build the tiny model once per recipe (the build script's hash names the folder)."""
    digest = hashlib.sha256(_BUILD_SCRIPT.read_bytes()).hexdigest()[:12]
    target = CACHE_DIR / f"tiny-model-{digest}"
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / "tiny-model.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "config.json").exists():
            staging = target.with_name(target.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            subprocess.run(
                [str(vllm_python()), str(_BUILD_SCRIPT), str(staging)],
                check=True,
                capture_output=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
                timeout=300,
            )
            staging.rename(target)
    return target


# Listening ports come from below the kernel's ephemeral range (32768 up by default): a port it
# handed out could be taken by an outgoing connection before the server binds it.
_PORTS = range(20000, 32000)
_next_port = itertools.count(os.getpid())


def free_port() -> int:
    """A free port for a test server, from a block of 2,000 of its own per pytest-xdist worker
    (gw0-gw4; block 0 outside xdist), so parallel workers never pick the same one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    block = 2000 * (int(worker[2:]) % 5 + 1 if worker[2:].isdigit() else 0)
    for _ in range(2000):
        port = _PORTS[block + next(_next_port) % 2000]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORTS[block]}-{_PORTS[block] + 1999}")


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def http_post_json(url: str, body: dict, timeout: float = 60.0) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


# float32, not bfloat16: on a CPU advertising AMX, vLLM 0.32's CPU attention takes its AMX kernel,
# and a VM advertising AMX without running it (a Firecracker guest) kills the worker with SIGILL.
# Nothing the tests watch depends on the dtype.
TEST_DTYPE = ("--dtype", "float32")


@dataclass
class VllmServer:
    """One vLLM API server process (and its engine-core and worker children)."""

    log_path: Path
    extra_args: Sequence[str] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    startup_timeout: float = 240.0
    model_name: str = MODEL_NAME  # the name it serves the model under
    process: subprocess.Popen | None = None
    started_in: float | None = None
    # "ab": restarts append to one log, as a restart policy writing to one file does.
    log_mode: str = "wb"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def command(self) -> list[str]:
        return [
            str(vllm_python()),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(tiny_model_dir()),
            "--served-model-name",
            self.model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            "1024",
            "--enforce-eager",
            *TEST_DTYPE,
            *self.extra_args,
        ]

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
        }
        env.pop("VLLM_OBS_VLLM_PYTHON", None)
        env.update(self.extra_env)
        return env

    def launch(self, *, preexec_fn=None) -> None:
        """Start the process without waiting for it to become ready."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, self.log_mode) as log:
            self._started_at = time.monotonic()
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,  # one process group: stop() takes the children too
                preexec_fn=preexec_fn,
            )

    def start(self) -> VllmServer:
        self.launch()
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited with status {self.process.returncode} while starting; "
                    f"log tail:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError):
                if http_get(self.url + "/health", timeout=2)[0] == 200:
                    self.started_in = time.monotonic() - self._started_at
                    self.pin_engine()
                    return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"vLLM did not become ready in {self.startup_timeout}s; log tail:\n{self.log_tail()}"
        )

    def pin_engine(self, cpu: int | None = None) -> None:
        """Keep the engine processes (every thread of EngineCore and its workers) on one CPU, so the API
        server, free to use every core, still answers /metrics under load: unpinned on two cores, scrapes
        timed out and restarted the alerts' `for` (DEVELOPERS.md)."""
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) < 2:
            return
        if cpu is None:
            # Under pytest-xdist each worker's servers get their own CPU (gw0 -> the first, gw1 -> the second).
            worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
            cpu = allowed[int(worker[2:] or 0) % len(allowed)]
        for pid, cmd in self.descendants():
            if "VLLM::" not in cmd and "EngineCore" not in cmd:
                continue
            with contextlib.suppress(OSError):
                for thread in (Path("/proc") / str(pid) / "task").iterdir():
                    with contextlib.suppress(OSError):
                        os.sched_setaffinity(int(thread.name), {cpu})

    def wait_exit(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text("utf-8", "replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def descendants(self) -> list[tuple[int, str]]:
        """(pid, command line) of every process under the server, from /proc."""
        assert self.process is not None
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
        out, todo = [], [self.process.pid]
        while todo:
            pid = todo.pop()
            for child in children.get(pid, []):
                with contextlib.suppress(OSError):
                    cmd = (Path("/proc") / str(child) / "cmdline").read_bytes().replace(b"\0", b" ")
                    out.append((child, cmd.decode("utf-8", "replace").strip()))
                todo.append(child)
        return out

    def engine_core_pid(self) -> int:
        for pid, cmd in self.descendants():
            if "EngineCore" in cmd:
                return pid
        raise RuntimeError("no EngineCore process under the vLLM server")

    def kill_engine_core(self) -> int:
        """SIGKILL the engine core: a real engine death, as an OOM killer would cause."""
        pid = self.engine_core_pid()
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def send_traffic(
    server: VllmServer, requests: int = 6, errors: bool = True, prompt: str = "Hello number {i}, how are you"
) -> dict[str, int]:
    """A little real traffic: completions, chat, streaming, and (optionally) bad requests.

    Returns the HTTP status counts so callers can assert the traffic really happened.
    """
    counts: dict[str, int] = {}

    def record(status: int) -> None:
        counts[str(status)] = counts.get(str(status), 0) + 1

    for i in range(requests):
        body = {"model": MODEL_NAME, "prompt": prompt.format(i=i), "max_tokens": 24}
        record(http_post_json(server.url + "/v1/completions", body)[0])
    chat = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    record(http_post_json(server.url + "/v1/chat/completions", chat)[0])
    record(http_post_json(server.url + "/v1/chat/completions", {**chat, "stream": True})[0])
    if errors:
        too_long = {"model": MODEL_NAME, "prompt": "x", "max_tokens": 5000}
        record(http_post_json(server.url + "/v1/completions", too_long)[0])
        bad_temperature = {"model": MODEL_NAME, "prompt": "x", "temperature": -1}
        record(http_post_json(server.url + "/v1/completions", bad_temperature)[0])
        wrong_model = {"model": "no-such-model", "prompt": "x", "max_tokens": 4}
        record(http_post_json(server.url + "/v1/completions", wrong_model)[0])
    return counts
