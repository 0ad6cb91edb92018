"""On-call routing: amtool checks, a routing table, and inhibition on a real Alertmanager."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support.bundles import generate
from tests.support.monitoring import Alertmanager, binary

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).parent.parent.parent

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
    ({"alertname": "Watchdog", "severity": "info"}, ["watchdog-webhook"]),
    (
        {"alertname": "VllmEngineDead", "severity": "critical", "instance": "vllm-0:8000"},
        ["critical-pagerduty", "warning-slack"],
    ),
    (
        {"alertname": "VllmQueueDepthHigh", "severity": "warning", "instance": "vllm-0:8000"},
        ["warning-slack"],
    ),
    ({"alertname": "VllmSomethingInformational", "severity": "info"}, ["info-none"]),
    ({"alertname": "VllmUnlabelled"}, ["warning-slack"]),  # no severity: chat, never dropped
]


@pytest.mark.parametrize("labels, receivers", DEFAULT_TABLE, ids=lambda v: str(v))
def test_default_routing_table(labels, receivers):
    config = REPO / "alerts" / "alertmanager.yml"
    assert routes(config, labels) == receivers
    verify = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={config}",
        f"--verify.receivers={','.join(receivers)}",
        *(f"{k}={v}" for k, v in labels.items()),
    )
    assert verify.returncode == 0, verify.stdout


EVERY_TABLE = [
    ({"alertname": "Watchdog", "severity": "info"}, ["watchdog-webhook"]),
    ({"alertname": "VllmTargetDown", "severity": "critical"}, ["critical-opsgenie", "warning-webhook"]),
    ({"alertname": "VllmPreemptions", "severity": "warning"}, ["warning-webhook"]),
    ({"alertname": "VllmX", "severity": "info"}, ["info-email"]),
    (
        {"alertname": "VllmEngineDead", "severity": "critical", "team": "search"},
        ["team0-critical-pagerduty", "team0-warning-slack"],
    ),
    ({"alertname": "VllmQueueDepthHigh", "severity": "warning", "team": "search"}, ["team0-warning-slack"]),
    # A team without its own pager keeps the shared one.
    (
        {"alertname": "VllmEngineDead", "severity": "critical", "model_name": "llama-3"},
        ["critical-opsgenie", "team1-warning-slack"],
    ),
    ({"alertname": "Watchdog", "severity": "info", "team": "search"}, ["watchdog-webhook"]),
]


@pytest.mark.parametrize("labels, receivers", EVERY_TABLE, ids=lambda v: str(v))
def test_routing_with_every_receiver_type_and_team_routes(every_receiver, labels, receivers):
    assert routes(every_receiver, labels) == receivers


def alert(case: str, name: str, severity: str, **labels: str) -> dict:
    # `case` only names the alert for this test; no inhibition rule compares it.
    return {"labels": {"alertname": name, "severity": severity, "job": "vllm", "case": case, **labels}}


POSTED = [
    alert("dead", "VllmEngineDead", "critical", instance="vllm-0:8000", event="engine_dead"),
    alert("down", "VllmTargetDown", "critical", instance="vllm-0:8000"),
    alert("ttft", "VllmHighTimeToFirstToken", "warning", instance="vllm-0:8000", model_name="m"),
    alert("queue", "VllmQueueDepthHigh", "warning", instance="vllm-0:8000", model_name="m"),
    alert("stalled", "VllmEngineStalled", "critical", instance="vllm-0:8000", model_name="m"),
    # Another replica of the same model: its alerts must not be silenced.
    alert("other-replica", "VllmHighTimeToFirstToken", "warning", instance="vllm-1:8000", model_name="m"),
    # Critical silences the warning of the same alert on the same replica only.
    alert("tpot-critical", "VllmHighTimePerOutputToken", "critical", instance="vllm-2:8000", model_name="m"),
    alert("tpot-warning", "VllmHighTimePerOutputToken", "warning", instance="vllm-2:8000", model_name="m"),
    alert("tpot-elsewhere", "VllmHighTimePerOutputToken", "warning", instance="vllm-3:8000", model_name="m"),
    # Fleet-level alerts have no instance: the model must still match (the `equal` caution).
    alert(
        "burn-critical", "VllmTimeToFirstTokenBudgetBurn", "critical", model_name="m", long="1h", short="5m"
    ),
    alert("burn-warning", "VllmTimeToFirstTokenBudgetBurn", "warning", model_name="m", long="1d", short="2h"),
    alert(
        "burn-other-model",
        "VllmTimeToFirstTokenBudgetBurn",
        "warning",
        model_name="other",
        long="1d",
        short="2h",
    ),
    # An OOM that killed the engine pages once, for the OOM.
    alert("oom", "VllmOutOfMemory", "critical", instance="vllm-4:8000", event="oom"),
    alert("oom-dead", "VllmEngineDead", "critical", instance="vllm-4:8000", event="engine_dead"),
    # A hung engine explains its replica's symptoms too.
    alert("hung", "VllmEngineHung", "critical", instance="vllm-5:8000", model_name="m"),
    alert(
        "hung-errors", "VllmRequestErrors", "warning", instance="vllm-5:8000", model_name="m", source="http"
    ),
    # A restart loop pages once: its failed starts, slow start and down target are the loop.
    alert("loop", "VllmRestartLoop", "critical", instance="vllm-6:8000"),
    alert("loop-failed", "VllmStartupFailed", "critical", instance="vllm-6:8000", event="startup_failed"),
    alert("loop-slow", "VllmStartupSlow", "warning", instance="vllm-6:8000"),
    alert("loop-down", "VllmTargetDown", "critical", instance="vllm-6:8000"),
    # A slow start on another server still warns.
    alert("slow-elsewhere", "VllmStartupSlow", "warning", instance="vllm-7:8000"),
]
INHIBITED = {
    "down",
    "ttft",
    "queue",
    "stalled",
    "tpot-warning",
    "burn-warning",
    "oom-dead",
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
    # What stays: one page per incident, and the healthy replica's own alert.
    assert {
        "dead",
        "other-replica",
        "tpot-critical",
        "tpot-elsewhere",
        "burn-other-model",
        "oom",
        "hung",
        "loop",
        "slow-elsewhere",
    } <= set(state) - inhibited


# The GPU layer's rule: a faulted GPU (critical XID) explains its server's dead, stalled or hung
# engine and its slots held on an idle GPU, on that server only; a warning XID explains nothing.
GPU = {"gpu": "0", "modelName": "NVIDIA H100 80GB HBM3"}
GPU_POSTED = [
    alert("xid", "VllmGpuXidError", "critical", instance="vllm-8:8000", UUID="GPU-a", **GPU),
    alert("xid-dead", "VllmEngineDead", "critical", instance="vllm-8:8000", event="engine_dead"),
    alert("xid-stalled", "VllmEngineStalled", "critical", instance="vllm-8:8000", model_name="m"),
    alert("xid-hung", "VllmEngineHung", "critical", instance="vllm-8:8000", model_name="m"),
    alert("xid-idle", "VllmGpuIdleWhileBusy", "warning", instance="vllm-8:8000", model_name="m"),
    # Another server's GPU idles under held slots: not this GPU's doing.
    alert("idle-elsewhere", "VllmGpuIdleWhileBusy", "warning", instance="vllm-9:8000", model_name="m"),
    # A warning XID (an application error) does not explain an engine death.
    alert("xid-app", "VllmGpuXidError", "warning", instance="vllm-10:8000", UUID="GPU-b", **GPU),
    alert("app-dead", "VllmEngineDead", "critical", instance="vllm-10:8000", event="engine_dead"),
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
