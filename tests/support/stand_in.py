"""A loopback HTTP server answering /metrics with a page: a labelled stand-in for an exporter
(a DCGM exporter, a feature vLLM cannot turn on here) that Prometheus scrapes for real."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def stand_in(page: Callable[[], str | bytes]) -> Iterator[str]:
    """Answers GET /metrics with page() (404 elsewhere); yields its host:port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page()
            body = body.encode() if isinstance(body, str) else body
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
