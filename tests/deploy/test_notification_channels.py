"""A failing receiver, for real: the bundle's Prometheus and Alertmanager deliver to a PagerDuty
events API and a Slack webhook served on loopback, one of which refuses. A rate-limited chat warns
and pages nobody; a failing pager pages, in chat only, never through that pager."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from tests.support.bundles import generate
from tests.support.loopback import LoopbackServer, Page
from tests.support.monitoring import Alertmanager, Prometheus
from tests.support.polling import wait_until
from tests.support.vllm_server import free_port

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

ALERT = "VllmObsNotificationsFailing"
FAST = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
# A short window and `for`, so a run takes about a minute; the ratio and the floor are the defaults.
KNOBS = {"notification_window": "2m", "pipeline_for": "10s"}


@dataclass
class Pipeline:
    prom: Prometheus
    am: Alertmanager
    pager: LoopbackServer  # PagerDuty's events API
    chat: LoopbackServer  # the Slack webhook

    def about_the_alert(self, server: LoopbackServer) -> list[dict]:
        """What a receiver was sent (accepted or refused) that names the pipeline alert."""
        return [body for _, body in list(server.posted) if ALERT in json.dumps(body)]

    def firing_in_alertmanager(self, integration: str) -> dict | None:
        for a in self.am.alerts():
            labels = a["labels"]
            if labels.get("alertname") == ALERT and labels.get("integration") == integration:
                return a
        return None

    def post(self, name: str, severity: str) -> None:
        """An alert of the fleet's, for the receivers to be sent (and to refuse)."""
        ends = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        labels = {"alertname": name, "severity": severity, "job": "vllm", "model_name": "m"}
        self.am.post_alerts([{"labels": {**labels, "instance": "vllm-0:8000"}, "endsAt": ends}])


@contextmanager
def pipeline(tmp_path: Path, pager_status: int, chat_status: int) -> Iterator[Pipeline]:
    am_port, prom_port = free_port(), free_port()
    with ExitStack() as stack:
        pager = stack.enter_context(LoopbackServer(status=pager_status))
        chat = stack.enter_context(LoopbackServer(status=chat_status))
        other = stack.enter_context(LoopbackServer(pages={"/metrics": Page(200, "")}))
        key = tmp_path / "pagerduty-routing-key"
        key.write_text("0123456789abcdef0123456789abcdef\n")
        webhook = tmp_path / "slack-webhook-url"
        webhook.write_text(f"{chat.url}/slack\n")
        config = {
            "prometheus": {
                **FAST,
                "vllm_targets": [other.address],
                "log_exporters": [],
                "probes": [],
                "alertmanagers": [f"127.0.0.1:{am_port}"],
                "prometheus_targets": [f"127.0.0.1:{prom_port}"],
            },
            "alerts": KNOBS,
            "alertmanager": {
                "critical": {"type": "pagerduty", "secret_file": str(key)},
                "warning": {"type": "slack", "secret_file": str(webhook), "channel": "#vllm"},
                "watchdog": {"type": "webhook", "url": f"{other.url}/heartbeat"},
                "group_wait": "1s",
                "warning_group_wait": "1s",
                "group_interval": "1s",
                "page_group_interval": "1s",
            },
        }
        bundle = generate(tmp_path / "bundle", config=config)
        path = bundle / "alerts" / "alertmanager.yml"
        am_config = yaml.safe_load(path.read_text())
        for receiver in am_config["receivers"]:
            for pd in receiver.get("pagerduty_configs", []):
                pd["url"] = f"{pager.url}/v2/enqueue"  # PagerDuty's events API, on loopback
        path.write_text(yaml.safe_dump(am_config))
        am = stack.enter_context(Alertmanager(path, tmp_path, port=am_port))
        prom_config = bundle / "prometheus" / "prometheus.yml"
        prom = stack.enter_context(Prometheus(prom_config, tmp_path, port=prom_port))
        yield Pipeline(prom, am, pager, chat)


def firing(prom: Prometheus, integration: str) -> list[dict]:
    return prom.query(f'ALERTS{{alertname="{ALERT}", alertstate="firing", integration="{integration}"}}')


def test_a_rate_limited_chat_warns_and_pages_nobody(tmp_path):
    with pipeline(tmp_path, pager_status=200, chat_status=429) as p:
        p.post("VllmQueueDepthHigh", "warning")
        (alert,) = wait_until(lambda: firing(p.prom, "slack"), 150, "the failing chat to be alerted")
        assert alert["metric"]["severity"] == "warning" and alert["metric"]["channel"] == "chat"
        held = wait_until(lambda: p.firing_in_alertmanager("slack"), 30, "Alertmanager to hold it")
        assert [r["name"] for r in held["receivers"]] == ["warning-slack"]
        # Two notifications of it tried in chat: any to the pager would have gone out by then.
        wait_until(lambda: len(p.about_the_alert(p.chat)) >= 2, 60, "chat to be sent the alert twice")
        assert p.about_the_alert(p.pager) == []
        assert not firing(p.prom, "pagerduty")


def test_a_failing_pager_pages_in_chat_never_through_itself(tmp_path):
    with pipeline(tmp_path, pager_status=500, chat_status=200) as p:
        p.post("VllmModelCapacityLow", "critical")
        (alert,) = wait_until(lambda: firing(p.prom, "pagerduty"), 150, "the failing pager to be alerted")
        assert alert["metric"]["severity"] == "critical" and alert["metric"]["channel"] == "pager"
        held = wait_until(lambda: p.firing_in_alertmanager("pagerduty"), 30, "Alertmanager to hold it")
        assert [r["name"] for r in held["receivers"]] == ["warning-slack"]
        (note, *_) = wait_until(lambda: p.about_the_alert(p.chat), 60, "chat to be sent the alert")
        assert "pagerduty" in json.dumps(note)
        # The pager kept being tried (and refusing) for the fleet's page, never for this alert.
        start = len(p.pager.posted)
        wait_until(lambda: len(p.pager.posted) > start, 60, "the pager to be tried again")
        assert p.about_the_alert(p.pager) == []
        assert not firing(p.prom, "slack")
        # Sanity: the pager did receive the fleet's page it refused.
        assert any("VllmModelCapacityLow" in json.dumps(body) for _, body in p.pager.posted)
