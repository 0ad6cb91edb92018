"""On-call routing: amtool checks, a routing table, and inhibition on a real Alertmanager."""

from __future__ import annotations

import re

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from vllm_obs.promql import seconds

from tests.support.bundles import generate
from tests.support.loopback import LoopbackServer
from tests.support.monitoring import Alertmanager, binary
from tests.support.notifications import NotificationRecorder

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).parent.parent.parent
# A new group's first notification, page or warning, within a second.
FAST_WAITS = {"group_wait": "1s", "warning_group_wait": "1s"}

EVERY_RECEIVER = {
    "alertmanager": {
        "critical": {"type": "opsgenie", "secret_file": "/run/secrets/opsgenie-key"},
        "warning": {
            "type": "webhook",
            "url": "http://chat-relay:8080/hook",
            "secret_file": "/run/secrets/relay-token",
        },
        "info": {"type": "email", "to": "vllm-tickets@example.org"},
        "watchdog": {"type": "webhook", "url": "https://hc-ping.example/ping"},
        "smtp_smarthost": "smtp.example.org:587",
        "smtp_from": "alertmanager@example.org",
        "smtp_auth_username": "alertmanager",
        "smtp_auth_password_file": "/run/secrets/smtp-password",
        "teams": [
            {
                "matchers": ['team="search"'],
                "critical": {"type": "pagerduty", "secret_file": "/run/secrets/search-pd"},
                "warning": {
                    "type": "slack",
                    "secret_file": "/run/secrets/search-slack",
                    "channel": "#search",
                },
            },
            {
                "matchers": ['model_name=~"llama.*"'],
                "warning": {"type": "slack", "secret_file": "/run/secrets/llama"},
            },
        ],
    }
}


def amtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary("amtool"), *args], capture_output=True, text=True)


def routes(config: Path, labels: dict[str, str]) -> list[str]:
    result = amtool(
        "config", "routes", "test", f"--config.file={config}", *(f"{k}={v}" for k, v in labels.items())
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(",")


@pytest.fixture(scope="module")
def every_receiver(tmp_path_factory) -> Path:
    return (
        generate(tmp_path_factory.mktemp("am") / "bundle", config=EVERY_RECEIVER)
        / "alerts"
        / "alertmanager.yml"
    )


def test_amtool_accepts_the_committed_default_and_every_receiver_type(every_receiver):
    for config in (REPO / "alerts" / "alertmanager.yml", every_receiver):
        result = amtool("check-config", str(config))
        assert result.returncode == 0, result.stdout + result.stderr


def test_no_secret_is_written_into_the_config(every_receiver):
    text = every_receiver.read_text()
    for field in (
        "routing_key_file",
        "api_key_file",
        "api_url_file",
        "credentials_file",
        "smtp_auth_password_file",
    ):
        assert field in text
    for literal in ("routing_key:", "api_key:", "api_url:", "smtp_auth_password:"):
        assert literal not in text


DEFAULT_TABLE = [
    ({"alertname": "WatchdogVllmObs", "severity": "info"}, ["watchdog-webhook"]),
    # A page: the pager, and chat where the rest of the team sees it.
    (
        {
            "alertname": "VllmModelCapacityLow",
            "severity": "critical",
            "model_name": "m",
            "instance": "vllm-0:8000",
        },
        ["critical-pagerduty", "warning-slack"],
    ),
    # A cause on one replica is a ticket in chat, never the pager.
    ({"alertname": "VllmEngineDead", "severity": "warning", "instance": "vllm-0:8000"}, ["warning-slack"]),
    (
        {"alertname": "VllmQueueDepthHigh", "severity": "warning", "instance": "vllm-0:8000"},
        ["warning-slack"],
    ),
    ({"alertname": "VllmSomethingInformational", "severity": "info"}, ["info-none"]),
    ({"alertname": "VllmUnlabelled"}, ["warning-slack"]),  # no severity: chat, never dropped
    # A failing pager is told in chat, never through that pager; a failing chat is a warning.
    (
        {"alertname": "VllmObsNotificationsFailing", "severity": "critical", "integration": "pagerduty"},
        ["warning-slack"],
    ),
    (
        {"alertname": "VllmObsNotificationsFailing", "severity": "critical", "stage": "prometheus"},
        ["critical-pagerduty", "warning-slack"],
    ),
]


EVERY_TABLE = [
    ({"alertname": "WatchdogVllmObs", "severity": "info"}, ["watchdog-webhook"]),
    (
        {"alertname": "VllmAvailabilityBudgetBurn", "severity": "critical"},
        ["critical-opsgenie", "warning-webhook"],
    ),
    ({"alertname": "VllmPreemptions", "severity": "warning"}, ["warning-webhook"]),
    ({"alertname": "VllmX", "severity": "info"}, ["info-email"]),
    (
        {"alertname": "VllmModelCapacityLow", "severity": "critical", "team": "search"},
        ["team0-critical-pagerduty", "team0-warning-slack"],
    ),
    ({"alertname": "VllmQueueDepthHigh", "severity": "warning", "team": "search"}, ["team0-warning-slack"]),
    # A team without its own pager keeps the shared one.
    (
        {"alertname": "VllmModelCapacityLow", "severity": "critical", "model_name": "llama-3"},
        ["critical-opsgenie", "team1-warning-slack"],
    ),
    ({"alertname": "WatchdogVllmObs", "severity": "info", "team": "search"}, ["watchdog-webhook"]),
    # Every pager's integration (the shared one's and each team's) fails into the shared chat.
    (
        {"alertname": "VllmObsNotificationsFailing", "severity": "critical", "integration": "opsgenie"},
        ["warning-webhook"],
    ),
    (
        {"alertname": "VllmObsNotificationsFailing", "severity": "critical", "integration": "pagerduty"},
        ["warning-webhook"],
    ),
    (
        {"alertname": "VllmObsNotificationsFailing", "severity": "warning", "integration": "slack"},
        ["warning-webhook"],
    ),
]


@pytest.mark.parametrize("labels, receivers", DEFAULT_TABLE, ids=lambda v: str(v))
def test_routing_of_the_committed_default(labels, receivers):
    assert routes(REPO / "alerts" / "alertmanager.yml", labels) == receivers


def test_a_replica_s_warning_waits_for_the_capacity_page_that_would_inhibit_it():
    # The page lags a replica's own alert by up to a scrape (up turning 0) and two evaluations
    # (the readiness record's group, then the capacity group's, each at its own phase).
    am = yaml.safe_load((REPO / "alerts" / "alertmanager.yml").read_text())
    prometheus = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())["global"]
    lag = seconds(prometheus["scrape_interval"]) + 2 * seconds(prometheus["evaluation_interval"])
    (warning,) = [r for r in am["route"]["routes"] if r["matchers"] == ['severity="warning"']]
    assert seconds(warning["group_wait"]) > lag
    assert seconds(am["route"]["group_wait"]) <= lag  # pages do not wait for it


def test_a_log_event_waits_for_the_capacity_alerts_even_when_its_chat_group_lives_on():
    """Prometheus re-sends a resolved alert for 15 minutes, so an earlier death's group lives on
    and sends the next replica's death at its next interval, without group_wait: the rule's `for`
    is what keeps it out of Alertmanager until the capacity alerts that inhibit it are there."""
    rules = yaml.safe_load((REPO / "alerts" / "vllm-alerts.rules.yml").read_text())
    prometheus = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())["global"]
    lag = seconds(prometheus["scrape_interval"]) + 2 * seconds(prometheus["evaluation_interval"])
    # The alerts that fire on the evaluation after one log line (a restart loop, its third start,
    # comes minutes after the death whose capacity alerts hold it back).
    one_line = re.compile(r"increase\(vllm_log_events_total\{[^}]*\}\[\w+\]\) > 0")
    events = {
        r["alert"]: r.get("for", "0s")
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("alert") and one_line.fullmatch(r["expr"])
    }
    assert set(events) == {"VllmEngineDead", "VllmOutOfMemory", "VllmStartupFailed"}
    assert all(seconds(wait) > lag for wait in events.values()), events


def test_a_warning_wait_the_capacity_page_can_outrun_is_said_at_generation(tmp_path, capsys):
    slow = {"prometheus": {"scrape_interval": "30s", "scrape_timeout": "10s", "evaluation_interval": "30s"}}
    capsys.readouterr()
    generate(tmp_path / "slow", config=slow)
    said = [line for line in capsys.readouterr().err.splitlines() if "two rule evaluations" in line]
    assert said == [
        f"vllm-obs: warning: {key} (1m) is not longer than a scrape and two rule evaluations (90s): a "
        "replica's ticket can reach chat before its model's capacity alerts inhibit it; make it longer "
        "than 90s."
        for key in ("alertmanager.warning_group_wait", "alerts.log_event_for")
    ]
    generate(tmp_path / "default", config={})
    assert "two rule evaluations" not in capsys.readouterr().err


@pytest.mark.parametrize("labels, receivers", EVERY_TABLE, ids=lambda v: str(v))
def test_routing_with_every_receiver_type_and_team_routes(every_receiver, labels, receivers):
    assert routes(every_receiver, labels) == receivers


def alert(case: str, name: str, severity: str, **labels: str) -> dict:
    # `case` only names the alert for this test; no inhibition rule compares it.
    return {"labels": {"alertname": name, "severity": severity, "job": "vllm", "case": case, **labels}}


POSTED = [
    # A dead engine on one replica of model a: its own symptoms are the same incident.
    alert("dead", "VllmEngineDead", "warning", instance="a-0:8000", event="engine_dead"),
    alert("down", "VllmTargetDown", "warning", instance="a-0:8000"),
    alert("ttft", "VllmHighTimeToFirstToken", "warning", instance="a-0:8000", model_name="a"),
    alert("queue", "VllmQueueDepthHigh", "warning", instance="a-0:8000", model_name="a"),
    alert("stalled", "VllmEngineStalled", "warning", instance="a-0:8000", model_name="a"),
    # Another replica of the same model: its alerts must not be silenced.
    alert("other-replica", "VllmHighTimeToFirstToken", "warning", instance="a-1:8000", model_name="a"),
    # An SLO page for model b silences its own warning tier and b's per-replica latency and
    # error warnings; model `other` keeps its own (fleet alerts have no instance: the model must
    # still match, the `equal` caution).
    alert(
        "burn-critical", "VllmTimeToFirstTokenBudgetBurn", "critical", model_name="b", long="1h", short="5m"
    ),
    alert("burn-warning", "VllmTimeToFirstTokenBudgetBurn", "warning", model_name="b", long="1d", short="2h"),
    alert("b-slow", "VllmHighTimeToFirstToken", "warning", instance="b-1:8000", model_name="b"),
    alert("b-errors", "VllmRequestErrors", "warning", instance="b-2:8000", model_name="b"),
    # The burn page also tells b's load: its replicas' queue and KV-cache pressure warnings.
    alert("b-queue", "VllmQueueDepthHigh", "warning", instance="b-1:8000", model_name="b"),
    alert("b-kv", "VllmKVCachePressure", "warning", instance="b-2:8000", model_name="b"),
    alert(
        "burn-other-model",
        "VllmTimeToFirstTokenBudgetBurn",
        "warning",
        model_name="other",
        long="1d",
        short="2h",
    ),
    alert("other-slow", "VllmHighTimeToFirstToken", "warning", instance="o-1:8000", model_name="other"),
    # A burn ticket (warning tier) silences no load warning: only a page says users wait.
    alert("other-queue", "VllmQueueDepthHigh", "warning", instance="o-1:8000", model_name="other"),
    # An availability page for model c: its latency pages are the same outage.
    alert("c-availability", "VllmAvailabilityBudgetBurn", "critical", model_name="c", long="1h", short="5m"),
    alert("c-ttft", "VllmTimeToFirstTokenBudgetBurn", "critical", model_name="c", long="1h", short="5m"),
    alert("c-itl", "VllmTimePerOutputTokenBudgetBurn", "critical", model_name="c", long="6h", short="30m"),
    # Model d below its capacity floor: one page for the model, and (info, routed nowhere) each
    # replica it lost with why. That replica's warnings and the model's other replicas' are the
    # same incident; its SLO pages join the page group (the page shows users are hurt).
    alert("d-capacity", "VllmModelCapacityLow", "critical", model_name="d"),
    alert("d-lost", "VllmReplicaLost", "info", instance="d-0:8000", model_name="d", cause="dead"),
    alert("d-dead", "VllmEngineDead", "warning", instance="d-0:8000", event="engine_dead"),
    alert("d-queue", "VllmQueueDepthHigh", "warning", instance="d-1:8000", model_name="d"),
    alert("d-availability", "VllmAvailabilityBudgetBurn", "critical", model_name="d", long="1h", short="5m"),
    # An OOM that killed the engine warns once, for the OOM.
    alert("oom", "VllmOutOfMemory", "warning", instance="e-0:8000", event="oom"),
    alert("oom-dead", "VllmEngineDead", "warning", instance="e-0:8000", event="engine_dead"),
    # An OOM during a start is that start's failure: one warning, for the OOM.
    alert("start-oom", "VllmOutOfMemory", "warning", instance="i-0:8000", event="oom"),
    alert("start-oom-failed", "VllmStartupFailed", "warning", instance="i-0:8000", event="startup_failed"),
    # A hung engine explains its replica's symptoms too.
    alert("hung", "VllmEngineHung", "warning", instance="f-0:8000", model_name="f"),
    alert("hung-errors", "VllmRequestErrors", "warning", instance="f-0:8000", model_name="f"),
    # A restart loop warns once: its failed starts, slow start and down target are the loop.
    alert("loop", "VllmRestartLoop", "warning", instance="g-0:8000"),
    alert("loop-failed", "VllmStartupFailed", "warning", instance="g-0:8000", event="startup_failed"),
    alert("loop-slow", "VllmStartupSlow", "warning", instance="g-0:8000"),
    alert("loop-down", "VllmTargetDown", "warning", instance="g-0:8000"),
    # A slow start on another server still warns.
    alert("slow-elsewhere", "VllmStartupSlow", "warning", instance="h-0:8000"),
    # The pager and the chat failing together: the chat warning is not the pager alert's lower
    # tier, and must stay (it may still get out another way).
    alert("pager-failing", "VllmObsNotificationsFailing", "critical", instance="am:9093", integration="pagerduty"),
    alert("chat-failing", "VllmObsNotificationsFailing", "warning", instance="am:9093", integration="slack"),
]
INHIBITED = {
    "down",
    "ttft",
    "queue",
    "stalled",
    "burn-warning",
    "b-slow",
    "b-errors",
    "b-queue",
    "b-kv",
    "c-ttft",
    "c-itl",
    "d-dead",
    "d-queue",
    "oom-dead",
    "start-oom-failed",
    "hung-errors",
    "loop-failed",
    "loop-slow",
    "loop-down",
}


def test_inhibition_on_a_real_alertmanager(tmp_path):
    config = tmp_path / "alertmanager.yml"
    config.write_text((REPO / "alerts" / "alertmanager.yml").read_text())
    with Alertmanager(config, tmp_path) as am:
        state, inhibited = am.inhibitions(POSTED, INHIBITED)
    assert set(state) == {a["labels"]["case"] for a in POSTED}
    assert inhibited == INHIBITED
    # What stays: one page or ticket per incident, and the healthy replica's and model's own.
    assert set(state) - inhibited == {
        "dead",
        "other-replica",
        "burn-critical",
        "burn-other-model",
        "other-slow",
        "other-queue",
        "c-availability",
        "d-capacity",
        "d-lost",
        "d-availability",
        "oom",
        "start-oom",
        "hung",
        "loop",
        "slow-elsewhere",
        "pager-failing",
        "chat-failing",
    }


# The GPU layer's rule: a faulted GPU (a hardware XID) explains its server's dead, stalled or hung
# engine and its slots held on an idle GPU, on that server only; an application XID explains nothing.
GPU = {"gpu": "0", "modelName": "NVIDIA H100 80GB HBM3"}
GPU_POSTED = [
    alert("xid", "VllmGpuXidError", "warning", instance="vllm-8:8000", UUID="GPU-a", fault="hardware", **GPU),
    alert("xid-dead", "VllmEngineDead", "warning", instance="vllm-8:8000", event="engine_dead"),
    alert("xid-stalled", "VllmEngineStalled", "warning", instance="vllm-8:8000", model_name="m"),
    alert("xid-hung", "VllmEngineHung", "warning", instance="vllm-8:8000", model_name="m"),
    alert("xid-idle", "VllmGpuIdleWhileBusy", "warning", instance="vllm-8:8000", model_name="m"),
    # Another server's GPU idles under held slots: not this GPU's doing.
    alert("idle-elsewhere", "VllmGpuIdleWhileBusy", "warning", instance="vllm-9:8000", model_name="m"),
    # An application XID (a program's error) does not explain an engine death.
    alert(
        "xid-app",
        "VllmGpuXidError",
        "warning",
        instance="vllm-10:8000",
        UUID="GPU-b",
        fault="application",
        **GPU,
    ),
    alert("app-dead", "VllmEngineDead", "warning", instance="vllm-10:8000", event="engine_dead"),
]
GPU_INHIBITED = {"xid-dead", "xid-stalled", "xid-hung", "xid-idle"}


def test_gpu_inhibition_on_a_real_alertmanager(tmp_path):
    bundle = generate(tmp_path / "bundle", config={"gpu": {"enabled": True}})
    config = bundle / "alerts" / "alertmanager.yml"
    posted = POSTED + GPU_POSTED
    expected = INHIBITED | GPU_INHIBITED
    with Alertmanager(config, tmp_path) as am:
        am.post_alerts(posted)
        deadline = time.monotonic() + 20
        while True:
            state = {a["labels"]["case"]: a for a in am.alerts()}
            inhibited = {case for case, a in state.items() if a["status"]["inhibitedBy"]}
            if (len(state) == len(posted) and inhibited == expected) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert set(state) == {a["labels"]["case"] for a in posted}
    # The GPU rule adds its own silences and leaves every other rule's as they were.
    assert inhibited == expected
    assert {"xid", "idle-elsewhere", "xid-app", "app-dead"} <= set(state) - inhibited


def test_twenty_replicas_failing_together_make_one_page(tmp_path):
    """A bad rollout takes 20 replicas of a model down at once: the pager gets one notification
    (the model's capacity page and the availability burn it causes, one group), chat gets that page
    once, and no replica's own warning notifies anyone (each lost replica holds them back)."""
    with NotificationRecorder() as hook:
        config = {
            "alertmanager": {
                "critical": {"type": "webhook", "url": f"{hook.url}/critical"},
                "warning": {"type": "webhook", "url": f"{hook.url}/warning"},
                "watchdog": {"type": "webhook", "url": f"{hook.url}/watchdog"},
                "group_wait": "2s",
                "warning_group_wait": "2s",
                "group_interval": "1m",
            }
        }
        bundle = generate(tmp_path / "bundle", config=config)
        replicas = [f"vllm-{i}:8000" for i in range(20)]
        posted = [
            alert("capacity", "VllmModelCapacityLow", "critical", model_name="m"),
            *(
                alert(f"lost-{i}", "VllmReplicaLost", "info", instance=r, model_name="m", cause="dead")
                for i, r in enumerate(replicas)
            ),
            *(alert(f"dead-{i}", "VllmEngineDead", "warning", instance=r) for i, r in enumerate(replicas)),
            *(alert(f"down-{i}", "VllmTargetDown", "warning", instance=r) for i, r in enumerate(replicas)),
            alert(
                "availability",
                "VllmAvailabilityBudgetBurn",
                "critical",
                model_name="m",
                long="1h",
                short="5m",
            ),
            alert(
                "ttft", "VllmTimeToFirstTokenBudgetBurn", "critical", model_name="m", long="1h", short="5m"
            ),
        ]
        with Alertmanager(bundle / "alerts" / "alertmanager.yml", tmp_path) as am:
            am.post_alerts(posted)
            deadline = time.monotonic() + 30
            while not [n for n in hook.records() if n.receiver == "critical"] and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(8)  # four group_waits more: anything else would have come by now
            notes = hook.records()
    pager = [n for n in notes if n.receiver == "critical"]
    chat = [n for n in notes if n.receiver == "warning"]
    assert len(pager) == 1, [len(n.alerts) for n in pager]
    names = {a["labels"]["alertname"] for a in pager[0].alerts}
    assert names == {"VllmModelCapacityLow", "VllmAvailabilityBudgetBurn"}, names
    assert len(chat) == 1, [[a["labels"]["alertname"] for a in n.alerts] for n in chat]
    assert {a["labels"]["alertname"] for a in chat[0].alerts} == names


@contextmanager
def pagerduty_pager(
    tmp_path: Path, prometheus: dict | None = None, **knobs: str
) -> Iterator[tuple[Alertmanager, LoopbackServer]]:
    """The bundle's Alertmanager paging through PagerDuty's events API, served on loopback."""
    key = tmp_path / "routing-key"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    with LoopbackServer() as events:
        config = {
            "alertmanager": {
                "critical": {"type": "pagerduty", "secret_file": str(key)},
                "warning": {"type": "webhook", "url": f"{events.url}/chat"},
                "watchdog": {"type": "webhook", "url": f"{events.url}/watchdog"},
                **knobs,
            },
            "prometheus": prometheus or {},
        }
        bundle = generate(tmp_path / "bundle", config=config)
        path = bundle / "alerts" / "alertmanager.yml"
        am_config = yaml.safe_load(path.read_text())
        for receiver in am_config["receivers"]:
            for pd in receiver.get("pagerduty_configs", []):
                pd["url"] = f"{events.url}/v2/enqueue"
        path.write_text(yaml.safe_dump(am_config))
        with Alertmanager(path, tmp_path) as am:
            yield am, events


def enqueued(events: LoopbackServer) -> list[dict]:
    return [body for p, body in events.posted if p == "/v2/enqueue"]


def wait_for_events(events: LoopbackServer, count: int, timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(enqueued(events)) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    return enqueued(events)


def test_a_page_to_pagerduty_lists_every_replica_of_the_group(tmp_path):
    """The PagerDuty event Alertmanager really sends (to a loopback events API) carries the
    description of every alert in the page's group, not only the first one's."""
    with pagerduty_pager(tmp_path, **FAST_WAITS) as (am, events):
        replicas = ["vllm-0:8000", "vllm-1:8000", "vllm-2:8000"]
        posted = [
            {
                **alert(
                    f"cap-{i}", "VllmModelCapacityLow", "critical", instance=r, model_name="m", cause="dead"
                ),
                "annotations": {
                    "summary": "Model m is below its capacity floor",
                    "description": f"Model m has 0 ready replicas; {r} is dead.",
                    "runbook_url": "https://runbooks.example/vllm#vllmmodelcapacitylow",
                },
            }
            for i, r in enumerate(replicas)
        ]
        am.post_alerts(posted)
        pages = wait_for_events(events, 1)
    assert len(pages) == 1, pages
    assert pages[0]["payload"]["summary"] == (
        "VllmModelCapacityLow: model m (3 firing of 3): Model m is below its capacity floor"
    )
    details = pages[0]["payload"]["custom_details"]
    assert details["firing"] == "3"
    assert sorted(details["descriptions"].strip().splitlines()) == [
        f"Model m has 0 ready replicas; {r} is dead." for r in replicas
    ]
    assert details["runbook"] == "https://runbooks.example/vllm#vllmmodelcapacitylow"
    assert pages[0]["routing_key"] == "0123456789abcdef0123456789abcdef"


def test_a_page_s_title_names_its_alerts_model_cluster_and_namespace(tmp_path):
    prometheus = {"multi_cluster": True, "cluster_label": "k8s_cluster", "pod_labels": True}
    with pagerduty_pager(tmp_path, prometheus, **FAST_WAITS) as (am, events):
        where = {"model_name": "m", "k8s_cluster": "east", "namespace": "team-a"}
        am.post_alerts(
            [
                {
                    **alert(f"a-{name}", name, "critical", instance="vllm-0:8000", **where),
                    "annotations": {"summary": f"{name} summary"},
                }
                for name in ("VllmAvailabilityBudgetBurn", "VllmModelCapacityLow")
            ]
        )
        (page,) = wait_for_events(events, 1)
    title = page["payload"]["summary"]
    first = title.split(" and others")[0]
    assert first in ("VllmAvailabilityBudgetBurn", "VllmModelCapacityLow"), title
    assert (
        title
        == f"{first} and others: model m, namespace team-a, k8s_cluster east (2 firing of 2): {first} summary"
    )


def test_the_burn_a_capacity_page_leaves_behind_is_the_same_pagerduty_incident(tmp_path):
    """Replicas come back and the capacity page resolves while the availability burn it caused
    still fires: Alertmanager posts the burn under the page's dedup key, so PagerDuty keeps it in
    the incident already open instead of waking someone again; another model pages on its own."""

    def described(a: dict, text: str) -> dict:
        return {**a, "annotations": {"description": text}}

    capacity = described(
        alert(
            "cap", "VllmModelCapacityLow", "critical", instance="vllm-0:8000", model_name="m", cause="dead"
        ),
        "m lost capacity",
    )
    burn = described(
        alert("burn", "VllmAvailabilityBudgetBurn", "critical", model_name="m", long="1h", short="5m"),
        "m burns its budget",
    )
    other = described(
        alert(
            "other", "VllmModelCapacityLow", "critical", instance="vllm-9:8000", model_name="n", cause="dead"
        ),
        "n lost capacity",
    )

    def saying(events: list[dict], text: str) -> list[dict]:
        return [e for e in events if text in e["payload"]["custom_details"]["descriptions"]]

    with pagerduty_pager(tmp_path, **FAST_WAITS, group_interval="2s") as (am, events):
        am.post_alerts([capacity, burn, other])
        first = wait_for_events(events, 2)
        am.post_alerts([{**capacity, "endsAt": datetime.now(UTC).isoformat()}, burn])

        def burn_alone() -> list[dict]:
            burning = saying(enqueued(events), "m burns its budget")
            return [
                e for e in burning if "m lost capacity" not in e["payload"]["custom_details"]["descriptions"]
            ]

        deadline = time.monotonic() + 30
        while not burn_alone() and time.monotonic() < deadline:
            time.sleep(0.2)
        update = burn_alone()[0]
    # One page for m: its capacity and the burn it causes, in one group.
    [page_m], [page_n] = saying(first, "m lost capacity"), saying(first, "n lost capacity")
    assert "m burns its budget" in page_m["payload"]["custom_details"]["descriptions"]
    assert update["event_action"] == "trigger"
    assert update["dedup_key"] == page_m["dedup_key"] != page_n["dedup_key"]


def test_a_model_s_next_outage_pages_soon_while_its_resolved_page_group_lives_on(tmp_path):
    """A resolved page's group lives on while Prometheus re-sends the resolved alert; the model's next
    loss of capacity joins it, is posted after the page group's interval (not the tickets'), and
    PagerDuty opens a new incident under the group's dedup key."""
    first = alert(
        "cap-0", "VllmModelCapacityLow", "critical", instance="vllm-0:8000", model_name="m", cause="dead"
    )
    again = alert(
        "cap-1", "VllmModelCapacityLow", "critical", instance="vllm-1:8000", model_name="m", cause="dead"
    )
    knobs = {**FAST_WAITS, "group_interval": "1m", "page_group_interval": "2s"}
    with pagerduty_pager(tmp_path, **knobs) as (am, events):
        am.post_alerts([first])
        [page] = wait_for_events(events, 1)
        resolved = {**first, "endsAt": datetime.now(UTC).isoformat()}
        am.post_alerts([resolved])
        wait_for_events(events, 2)
        am.post_alerts([resolved, again])
        deadline = time.monotonic() + 20
        while len(enqueued(events)) < 3 and time.monotonic() < deadline:
            am.post_alerts([resolved])  # as Prometheus re-sends it
            time.sleep(0.5)
        posted = enqueued(events)
    assert [e["event_action"] for e in posted[:2]] == ["trigger", "resolve"]
    assert len(posted) == 3, [e["event_action"] for e in posted]
    assert posted[2]["event_action"] == "trigger"
    assert posted[2]["dedup_key"] == page["dedup_key"]
    assert posted[2]["payload"]["custom_details"]["firing"] == "1"


@contextmanager
def slack_chat(tmp_path: Path, **knobs: str) -> Iterator[tuple[Alertmanager, LoopbackServer]]:
    """The bundle's Alertmanager posting chat through its Slack receiver to a webhook on loopback."""
    with LoopbackServer() as slack:
        url = tmp_path / "slack-url"
        url.write_text(f"{slack.url}/slack\n")
        config = {
            "alertmanager": {
                "critical": {"type": "webhook", "url": f"{slack.url}/pager"},
                "warning": {"type": "slack", "secret_file": str(url), "channel": "#vllm"},
                "watchdog": {"type": "webhook", "url": f"{slack.url}/watchdog"},
                **knobs,
            }
        }
        bundle = generate(tmp_path / "bundle", config=config)
        with Alertmanager(bundle / "alerts" / "alertmanager.yml", tmp_path) as am:
            yield am, slack


def slack_posts(slack: LoopbackServer, count: int, timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len([b for p, b in slack.posted if p == "/slack"]) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    return [b["attachments"][0] for p, b in slack.posted if p == "/slack"]


def described(a: dict, text: str) -> dict:
    return {**a, "annotations": {"summary": f"{a['labels']['alertname']} summary", "description": text}}


def test_chat_posts_one_message_per_model_and_cause_listing_each_replica_once(tmp_path):
    """Three replicas of model m (one with two engines) under KV-cache pressure are one Slack
    message naming the alert, the model and 3 replicas, each replica listed once; model n's
    pressure is a message of its own, naming its one replica."""
    posted = [
        described(
            alert(f"kv-{r}-{e}", "VllmKVCachePressure", "warning", instance=r, model_name="m", engine=e),
            f"KV cache of {r} engine {e} is full.",
        )
        for r, e in (("vllm-0:8000", "0"), ("vllm-0:8000", "1"), ("vllm-1:8000", "0"), ("vllm-2:8000", "0"))
    ]
    posted.append(
        described(
            alert("kv-n", "VllmKVCachePressure", "warning", instance="n-0:8000", model_name="n"),
            "KV cache of n-0:8000 is full.",
        )
    )
    with slack_chat(tmp_path, **FAST_WAITS) as (am, slack):
        am.post_alerts(posted)
        posts = slack_posts(slack, 2)
    assert len(posts) == 2, posts
    by_title = {p["title"]: p["text"] for p in posts}
    assert set(by_title) == {
        "[FIRING:4] VllmKVCachePressure model m on 3 replicas",
        "[FIRING:1] VllmKVCachePressure model n on n-0:8000",
    }, by_title
    text = by_title["[FIRING:4] VllmKVCachePressure model m on 3 replicas"]
    listed = [line for line in text.splitlines() if line.startswith("- ")]
    assert [line.split(":", 2)[0] + ":" + line.split(":", 2)[1] for line in listed] == [
        "- vllm-0:8000",
        "- vllm-1:8000",
        "- vllm-2:8000",
    ], listed
    assert "- vllm-1:8000: KV cache of vllm-1:8000 engine 0 is full." in listed


def test_a_page_s_chat_copy_says_and_others_and_waits_its_own_interval(tmp_path):
    """A page of two alerts is one chat message ("and others"); a change to the page group reaches
    the pager after page_group_interval, chat only after page_chat_interval."""
    capacity = described(
        alert("cap", "VllmModelCapacityLow", "critical", instance="vllm-0:8000", model_name="m", cause="dead"),
        "m lost vllm-0:8000.",
    )
    burn = described(
        alert("burn", "VllmAvailabilityBudgetBurn", "critical", model_name="m", long="1h", short="5m"),
        "m burns its budget.",
    )
    more = described(
        alert("cap-1", "VllmModelCapacityLow", "critical", instance="vllm-1:8000", model_name="m", cause="dead"),
        "m lost vllm-1:8000.",
    )
    knobs = {**FAST_WAITS, "page_group_interval": "2s", "page_chat_interval": "1h"}
    with slack_chat(tmp_path, **knobs) as (am, slack):
        am.post_alerts([capacity, burn])
        [first] = slack_posts(slack, 1)
        am.post_alerts([capacity, burn, more])
        deadline = time.monotonic() + 20
        while len([p for p, _ in slack.posted if p == "/pager"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # a page_group_interval more: a chat post would have come with the pager's
        pager = [b for p, b in slack.posted if p == "/pager"]
        chat = slack_posts(slack, 1)
    assert first["title"].startswith("[FIRING:2] "), first
    assert first["title"].endswith(" and others model m on vllm-0:8000"), first
    assert "- m burns its budget." in first["text"].splitlines(), first["text"]
    assert len(pager) == 2, pager
    assert len(pager[1]["alerts"]) == 3
    assert len(chat) == 1, chat
