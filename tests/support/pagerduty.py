"""PagerDuty's events API as a loopback server: a labelled fake (the real service cannot be reached
from a test) that keeps each event the real Alertmanager posts to it, as PagerDuty would get it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import yaml

from .loopback import LoopbackServer

ENQUEUE = "/v2/enqueue"  # the events API v2 path Alertmanager posts a trigger or resolve to


def pagerduty_on_loopback(alertmanager_yml: Path, events: LoopbackServer) -> int:
    """Point every PagerDuty receiver of a generated alertmanager.yml at `events`; how many."""
    config = yaml.safe_load(alertmanager_yml.read_text())
    pointed = 0
    for receiver in config["receivers"]:
        for pd in receiver.get("pagerduty_configs", []):
            pd["url"] = f"{events.url}{ENQUEUE}"
            pointed += 1
    alertmanager_yml.write_text(yaml.safe_dump(config, sort_keys=False))
    return pointed


def enqueued(events: LoopbackServer) -> list[dict]:
    """The PagerDuty events posted so far, oldest first."""
    return [body for path, body in list(events.posted) if path == ENQUEUE]


def wait_for_event(events: LoopbackServer, matches: Callable[[dict], bool], timeout: float) -> dict:
    """The first posted event `matches` accepts, polled for up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in enqueued(events) if matches(e)]
        if found:
            return found[0]
        time.sleep(0.25)
    summaries = [e.get("payload", {}).get("summary") for e in enqueued(events)]
    raise AssertionError(f"no matching PagerDuty event within {timeout}s; got: {summaries}")
