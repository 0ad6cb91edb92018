"""A tiny HTTP server on loopback: fixed pages by path, and a webhook receiver."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

from .vllm_server import free_port


@dataclass
class Page:
    status: int
    body: str
    content_type: str = "text/plain; version=0.0.4; charset=utf-8"


class LoopbackServer:
    """Serves fixed pages by path (GET) and keeps what is POSTed to it (a webhook receiver)."""

    def __init__(
        self,
        pages: dict[str, Page] | None = None,
        on_post: Callable[[str, dict], None] | None = None,
        status: int = 200,
    ) -> None:
        """on_post: called with each POST's path and JSON body (else they are kept in .posted);
        status: what every POST is answered (429, 500: a receiver refusing), kept either way."""
        self.pages = dict(pages or {})
        self.status = status
        self.posted: list[tuple[str, dict]] = []
        self.port = free_port()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = server.pages.get(self.path.split("?", 1)[0]) or Page(404, "not found\n")
                body = page.body.encode()
                self.send_response(page.status)
                self.send_header("Content-Type", page.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                with contextlib.suppress(ValueError):
                    payload = json.loads(raw)
                    if on_post:
                        on_post(self.path, payload)
                    else:
                        server.posted.append((self.path, payload))
                self.send_response(server.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
