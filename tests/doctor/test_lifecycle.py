"""The lifecycle check: start-up times, server states and announced version from the real log
exporter on fixture logs (two starts then 0.26.0, a failed start, a 0.34 fault held), and probe
budgets from Kubernetes manifests. The vLLM target is test_broken_stacks' stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from vllm_obs.doctor.checks.kube_probes import Budget, read

from tests.support.doctor_stack import FIXTURES, stand_in_stack

REPO = Path(__file__).parent.parent.parent
UPGRADE_LOG = FIXTURES / "logs" / "constructed-v0.20-upgrade-to-v0.26.log"
FAILED_START_LOG = FIXTURES / "logs" / "vllm-0.32.0-cpu-startup-failed.log"
FAULTED_LOG = FIXTURES / "logs" / "constructed-v0.34-fault-tolerance.log"


def deployment(path: Path, container: dict) -> Path:
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm"},
        "spec": {"template": {"spec": {"containers": [{"name": "vllm", "image": "vllm", **container}]}}},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_probe_budgets_of_the_shipped_deployment():
    (vllm,) = read(str(REPO / "kubernetes" / "vllm.yaml"))
    assert (vllm.workload, vllm.container) == ("Deployment/vllm", "vllm")
    docs = [d for d in yaml.safe_load_all((REPO / "kubernetes" / "vllm.yaml").read_text()) if d]
    spec = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = next(c for c in spec["containers"] if c["name"] == "vllm")
    for budget, probe in (
        (vllm.startup, container["startupProbe"]),
        (vllm.liveness, container["livenessProbe"]),
    ):
        assert budget.seconds == probe.get("initialDelaySeconds", 0) + probe.get(
            "failureThreshold", 3
        ) * probe.get("periodSeconds", 10)
    # The start-up budget holds a slow model load; the liveness probe waits for it.
    assert vllm.startup.seconds >= 300


def test_kubernetes_defaults(tmp_path):
    (probes,) = read(
        str(deployment(tmp_path / "d.yaml", {"livenessProbe": {"httpGet": {"path": "/health"}}}))
    )
    assert probes.startup is None and probes.liveness == Budget(0, 10, 3)


@pytest.mark.prometheus
def test_start_up_times_drift_and_probe_budgets(tmp_path):
    tight = deployment(
        tmp_path / "tight.yaml",
        {
            "startupProbe": {"periodSeconds": 10, "failureThreshold": 6},
            "livenessProbe": {"periodSeconds": 10},
        },
    )
    liveness_only = deployment(
        tmp_path / "liveness.yaml", {"livenessProbe": {"initialDelaySeconds": 15, "periodSeconds": 15}}
    )
    config = tmp_path / "doctor-config.yml"
    config.write_text(yaml.safe_dump({"prometheus": {"probes": []}, "alerts": {"expected_startup": "50s"}}))
    with stand_in_stack(tmp_path, log=UPGRADE_LOG) as stack:
        shipped = stack.doctor("--kubernetes-manifest", str(REPO / "kubernetes" / "vllm.yaml"))
        short = stack.doctor("--kubernetes-manifest", str(tight), "--config", str(config))
        killed = stack.doctor("--kubernetes-manifest", str(liveness_only))
    checks = {c["subject"]: c for c in shipped.checks(family="lifecycle")}
    times = checks["start-up time"]
    assert times["status"] == "info"
    assert "2 start-up(s) measured, mean 63.0 s" in times["message"]
    assert "between 60 s and 120 s" in times["message"] and "45.0 s" in times["message"]
    drift = checks["vLLM version"]
    assert drift["status"] == "warn" and drift["items"] == ["0.26.0"]
    assert "regenerate the bundle" in drift["action"]
    assert checks["servers stopping"]["status"] == "warn" and checks["servers stopping"]["items"] == [
        stack.vllm
    ]
    assert checks["Deployment/vllm vllm startupProbe"]["status"] == "ok"  # 600 s against 60 s + 30 s
    assert shipped.code == 0, shipped.text_of("fail")

    short_checks = {c["subject"]: c for c in short.checks(family="lifecycle")}
    budget = short_checks["Deployment/vllm vllm startupProbe"]
    assert budget["status"] == "fail" and "6 x 10 s = 60 s" in budget["message"]
    assert "failureThreshold to at least 9" in budget["action"]  # (60 s + 30 s) / 10 s
    expected = short_checks["alerts.expected_startup"]
    assert expected["status"] == "warn" and "VllmStartupSlow" in expected["message"]
    assert short.code == 1

    (liveness,) = [c for c in killed.checks("fail", "lifecycle")]
    assert liveness["subject"] == "Deployment/vllm vllm livenessProbe"
    assert "no startupProbe" in liveness["message"] and "add a startupProbe" in liveness["action"]


@pytest.mark.prometheus
def test_a_server_that_failed_to_start(tmp_path):
    with stand_in_stack(tmp_path, log=FAILED_START_LOG) as stack:
        run = stack.doctor()
    (failed,) = [c for c in run.checks("fail", "lifecycle")]
    assert failed["subject"] == "servers failed_start" and failed["items"] == [stack.vllm]
    start = next(c for c in run.checks(family="lifecycle") if c["subject"] == "start-up time")
    assert "no completed start-up" in start["message"]
    assert run.code == 1


@pytest.mark.prometheus
def test_a_server_whose_engine_fault_tolerance_holds(tmp_path):
    """The 0.34 fault-tolerance log cut after its first refused request: the server is up, its
    engine faulted (the log exporter's state `faulted`), which the doctor names as a failure."""
    lines = FAULTED_LOG.read_bytes().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if b" - rejecting request " in line) + 1
    log = tmp_path / "faulted.log"
    log.write_bytes(b"".join(lines[:end]))
    with stand_in_stack(tmp_path, log=log) as stack:
        run = stack.doctor()
    (faulted,) = [c for c in run.checks("fail", "lifecycle")]
    assert faulted["subject"] == "servers faulted" and faulted["items"] == [stack.vllm]
    assert "fault tolerance" in faulted["message"] and "/v1/fault_tolerance/status" in faulted["action"]
    assert run.code == 1
