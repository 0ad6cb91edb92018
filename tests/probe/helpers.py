"""Helpers for the probe tests: the probe as a real subprocess, a scrape parser, and a
small real HTTP server on loopback that stands in for a misbehaving proxy in front of vLLM."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.parser import text_string_to_metric_families

from tests.support.polling import wait_until
from tests.support.vllm_server import free_port

Series = dict[str, float]


def probe_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "vllm_probe", *args]


def samples(exposition: str) -> Series:
    """{'name{label="v",...}': value} for every sample of a text exposition."""
    out = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def label_sets(exposition: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (sample.name, dict(sample.labels))
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    ]


def series(name: str, **labels: str) -> str:
    """The key `samples` uses for a series: labels sorted by name."""
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def hang_bound(n: int, interval: float, jitter: float, timeout: float) -> float:
    """The README's bound on a hang's time to 503: (N + 1) probes, the last one's timeout, and its
    health check and /metrics read (2 s each at most)."""
    return (n + 1) * interval * (1 + jitter) + timeout + 4


def fetch(url: str, timeout: float = 5.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read().decode()
    except (urllib.error.URLError, ConnectionError, OSError):
        return None


class ProbeProcess:
    """`vllm-probe` as a real subprocess serving /metrics on a free loopback port."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.process = subprocess.Popen(
            probe_command("--listen", f"127.0.0.1:{self.port}", *args),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )

    def text(self) -> str:
        return wait_until(self._alive_fetch, what=f"{self.url} to answer")  # type: ignore[return-value]

    def metrics(self) -> Series:
        return samples(self.text())

    def _alive_fetch(self) -> str | None:
        if self.process.poll() is not None:
            raise AssertionError(f"probe exited with {self.process.returncode}: {self.stderr()}")
        return fetch(self.url)

    def wait_for(self, check: Callable[[Series], bool], timeout: float = 30.0, what: str = "") -> Series:
        def current() -> Series | None:
            text = self._alive_fetch()
            if text is None:
                return None
            values = samples(text)
            return values if check(values) else None

        return wait_until(current, timeout, what or "the probe's metrics")  # type: ignore[return-value]

    def terminate(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read().decode(errors="replace")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=10)
        if self.process.stderr is not None:
            with contextlib.suppress(OSError):
                self.process.stderr.close()


@contextlib.contextmanager
def running_probe(*args: str, env: dict[str, str] | None = None) -> Iterator[ProbeProcess]:
    probe = ProbeProcess(*args, env=env)
    try:
        yield probe
    finally:
        probe.close()


# -- the stand-in server ---------------------------------------------------------------------


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay: float = 0.0  # seconds before anything is sent
    trickle_headers: float = 0.0  # seconds over which the header bytes are sent one at a time
    reset: bool = False  # close the connection without answering


def completion_reply(model: str = "standin") -> Reply:
    body = {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": model,
        "choices": [{"index": 0, "text": "!", "finish_reason": "length"}],
    }
    return Reply(body=json.dumps(body).encode())


def chat_reply(model: str = "standin") -> Reply:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "!"}, "finish_reason": "length"}
        ],
    }
    return Reply(body=json.dumps(body).encode())


def embedding_reply(model: str = "standin") -> Reply:
    datum = {"index": 0, "object": "embedding", "embedding": "AAAA"}  # base64, as asked for
    body = {"object": "list", "model": model, "data": [datum]}
    return Reply(body=json.dumps(body).encode())


def models_reply(model: str = "standin") -> Reply:
    return Reply(body=json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode())


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class StandIn:
    """A real HTTP/1.1 server on loopback standing in for a misbehaving proxy in front of vLLM.
    `script` lists the replies to the canary requests in order (the last one repeats); /v1/models,
    /metrics and /health answer from `models`, `metrics` and `health`."""

    script: list[Reply] = field(default_factory=lambda: [completion_reply()])
    models: list[Reply] = field(default_factory=lambda: [models_reply()])
    health: Reply = field(default_factory=Reply)
    metrics: list[Reply] = field(default_factory=lambda: [Reply(404, b"not found", "text/plain")])
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def canary_requests(self) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.method == "POST"]

    def _next(self, path: str) -> Reply:
        with self.lock:
            if path == "/v1/models":
                return self.models.pop(0) if len(self.models) > 1 else self.models[0]
            if path == "/metrics":
                return self.metrics.pop(0) if len(self.metrics) > 1 else self.metrics[0]
            if path.startswith("/v1/"):
                return self.script.pop(0) if len(self.script) > 1 else self.script[0]
            return self.health if path == "/health" else Reply(404, b"not found", "text/plain")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn in front of vLLM

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._answer(b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._answer(self.rfile.read(length))

            def _answer(self, body: bytes) -> None:
                canary = self.command == "POST"
                with standin.lock:
                    standin.seen.append(Seen(self.command, self.path, dict(self.headers.items()), body))
                    if canary:
                        standin.in_flight += 1
                        standin.max_in_flight = max(standin.max_in_flight, standin.in_flight)
                try:
                    self._send(standin._next(self.path))
                except OSError:
                    self.close_connection = True  # the client gave up first
                finally:
                    if canary:
                        with standin.lock:
                            standin.in_flight -= 1

            def _send(self, reply: Reply) -> None:
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.reset:
                    # Linger 0: closing sends a TCP reset, as a crashing proxy does.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                head = (
                    f"HTTP/1.1 {reply.status} X\r\nContent-Type: {reply.content_type}\r\n"
                    f"Content-Length: {len(reply.body)}\r\n\r\n"
                ).encode()
                if reply.trickle_headers:
                    pause = reply.trickle_headers / len(head)
                    for i in range(len(head)):
                        self.wfile.write(head[i : i + 1])
                        self.wfile.flush()
                        time.sleep(pause)
                else:
                    self.wfile.write(head)
                self.wfile.write(reply.body)
                self.wfile.flush()

        return Handler
