"""A webhook that records every notification Alertmanager sends, by receiver."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.vllm_server import free_port


@dataclass(frozen=True)
class Notification:
    """One webhook call of Alertmanager: a receiver, a group's status and its alerts."""

    received: float  # Unix time it arrived
    receiver: str  # critical (the pager), warning (chat), info, watchdog
    status: str
    alerts: tuple[dict, ...]

    def firing(self, alertname: str, **labels: str) -> bool:
        return any(
            a["status"] == "firing"
            and a["labels"].get("alertname") == alertname
            and all(a["labels"].get(k) == v for k, v in labels.items())
            for a in self.alerts
        )


class NotificationRecorder:
    """The webhook every receiver points at (/critical, /warning, /info, /watchdog)."""

    def __init__(self) -> None:
        self.port = free_port()
        self._lock = threading.Lock()
        self._records: list[Notification] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                with contextlib.suppress(ValueError):
                    payload = json.loads(raw)
                    recorder._add(
                        Notification(
                            time.time(),
                            self.path.strip("/"),
                            payload.get("status", ""),
                            tuple(payload.get("alerts", [])),
                        )
                    )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def _add(self, note: Notification) -> None:
        with self._lock:
            self._records.append(note)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def records(self, since: float = 0.0, until: float = float("inf")) -> list[Notification]:
        with self._lock:
            return [n for n in self._records if since <= n.received <= until]

    def first_firing(
        self, alertname: str, receiver: str, since: float, until: float = float("inf"), **labels: str
    ) -> Notification | None:
        for note in self.records(since, until):
            if note.receiver == receiver and note.firing(alertname, **labels):
                return note
        return None

    def __enter__(self) -> NotificationRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
