"""A webhook that records every notification Alertmanager sends, by receiver."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .loopback import LoopbackServer

# The bundle's receivers (vllm-obs config keys under `alertmanager`), each posting to its path.
RECEIVERS = ("critical", "warning", "info", "watchdog")


def webhook_receivers(url: str) -> dict[str, dict]:
    """Every receiver of a bundle's configuration pointed at the recorder at `url`."""
    return {r: {"type": "webhook", "url": f"{url}/{r}"} for r in RECEIVERS}


@dataclass(frozen=True)
class Notification:
    """One webhook call of Alertmanager: a receiver, a group's status and its alerts."""

    received: float  # Unix time it arrived
    receiver: str  # critical (the pager), warning (chat), info, watchdog
    status: str
    alerts: tuple[dict, ...]
    group_key: str = ""  # Alertmanager's group key: PagerDuty's dedup key for the group

    def firing(self, alertname: str, naming: str | None = None, **labels: str) -> bool:
        """An alert of this name fires with these labels (and a description that says `naming`)."""
        return any(
            a["status"] == "firing"
            and a["labels"].get("alertname") == alertname
            and all(a["labels"].get(k) == v for k, v in labels.items())
            and (naming is None or naming in a.get("annotations", {}).get("description", ""))
            for a in self.alerts
        )


class NotificationRecorder(LoopbackServer):
    """The webhook every receiver points at (/critical, /warning, /info, /watchdog)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[Notification] = []
        super().__init__(on_post=self._received)

    def _received(self, path: str, payload: dict) -> None:
        note = Notification(
            time.time(),
            path.strip("/"),
            payload.get("status", ""),
            tuple(payload.get("alerts", [])),
            payload.get("groupKey", ""),
        )
        with self._lock:
            self._records.append(note)

    def records(self, since: float = 0.0, until: float = float("inf")) -> list[Notification]:
        with self._lock:
            return [n for n in self._records if since <= n.received <= until]

    def first_firing(
        self,
        alertname: str,
        receiver: str,
        since: float,
        until: float = float("inf"),
        naming: str | None = None,
        **labels: str,
    ) -> Notification | None:
        for note in self.records(since, until):
            if note.receiver == receiver and note.firing(alertname, naming, **labels):
                return note
        return None
