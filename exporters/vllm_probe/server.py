"""The probe's HTTP endpoints: /metrics for Prometheus, /ready for a Kubernetes readiness probe.
/ready (`?target=NAME` with several targets) answers 200 while the target may take traffic, else 503
(ProbeMetrics.readiness): a hung engine leaves a Service's endpoints, a merely overloaded one stays.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .metrics import ProbeMetrics, build_registry


class ProbeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], metrics: ProbeMetrics, not_ready_after: int) -> None:
        self.metrics = metrics
        self.registry = build_registry(metrics)
        self.not_ready_after = not_ready_after
        super().__init__(address, _Handler)

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="probe http", daemon=True).start()


class _Handler(BaseHTTPRequestHandler):
    server: ProbeServer

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path in ("/metrics", "/metrics/"):
            self._answer(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif url.path == "/ready":
            self._ready(parse_qs(url.query).get("target", []))
        else:
            self._answer(404, b"not found: the probe serves /metrics and /ready\n")

    def _ready(self, asked: list[str]) -> None:
        targets = list(self.server.metrics.targets)
        if asked:
            target = asked[0]
        elif len(targets) == 1:
            target = targets[0]
        else:
            self._answer(400, f"name a target: /ready?target= one of {', '.join(targets)}\n".encode())
            return
        if target not in targets:
            self._answer(404, f"no target {target!r}; known: {', '.join(targets)}\n".encode())
            return
        ready, why = self.server.metrics.readiness(target, self.server.not_ready_after)
        self._answer(200 if ready else 503, f"{target}: {why}\n".encode())

    def _answer(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a scrape or kubelet check every few seconds is not news
