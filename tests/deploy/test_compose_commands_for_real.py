"""The compose file's commands and healthchecks, run for real outside Docker: Prometheus and
Alertmanager start with their services' flags and pass their healthchecks (Prometheus keeps both
retention limits, refuses the lifecycle API); the exporter's and probe's fail when nothing listens."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.exporter.helpers import ExporterProcess, wait_until
from tests.support.monitoring import _start, _wait_ready, binary
from tests.support.vllm_server import free_port, http_get

from .stackfiles import map_paths, stacks, volume_sources

pytestmark = pytest.mark.prometheus
SERVICES = stacks()["docker-compose.yml"]["services"]
BINARIES = {"prometheus": "prometheus", "alertmanager": "prometheus-alertmanager"}
PORTS = {
    "prometheus": "9090",
    "alertmanager": "9093",
    "vllm-log-exporter": "9400",
    "vllm-probe": "9401",
    "dcgm-exporter": "9400",
}


def healthcheck(service: str, port: int) -> list[str]:
    """The service's healthcheck command with its port mapped to the one the test uses."""
    test = SERVICES[service]["healthcheck"]["test"]
    assert test[0] == "CMD", test
    words = [
        w.replace(f"127.0.0.1:{PORTS[service]}", f"127.0.0.1:{port}").replace(
            f"/dev/tcp/127.0.0.1/{PORTS[service]}", f"/dev/tcp/127.0.0.1/{port}"
        )
        for w in test[1:]
    ]
    return [sys.executable if w in ("python", "python3") else w for w in words]


@pytest.mark.parametrize("service", ["prometheus", "alertmanager"])
def test_the_services_command_line_runs_and_its_healthcheck_passes(service, tmp_path):
    port = free_port()
    flags = map_paths(SERVICES[service]["command"], volume_sources(SERVICES[service], tmp_path))
    for data in ("prometheus-data", "alertmanager-data"):
        (tmp_path / data).mkdir()
    command = [binary(BINARIES[service]), *flags, f"--web.listen-address=127.0.0.1:{port}"]
    log = tmp_path / f"{service}.log"
    process = _start(command, log)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/-/ready", process, log)
        check = subprocess.run(healthcheck(service, port), capture_output=True, timeout=30)
        assert check.returncode == 0, check.stderr
        if service == "prometheus":
            flags_now = json.loads(http_get(f"http://127.0.0.1:{port}/api/v1/status/flags")[1])["data"]
            assert flags_now["storage.tsdb.retention.time"] == "15d"
            assert flags_now["storage.tsdb.retention.size"] == "10GiB"  # its units are powers of 2
            # Without --web.enable-lifecycle nobody can shut it down or reload it over HTTP.
            request = urllib.request.Request(f"http://127.0.0.1:{port}/-/quit", method="POST")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            refused.value.close()
            assert refused.value.code == 403
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert subprocess.run(healthcheck(service, port), capture_output=True, timeout=30).returncode != 0


def test_the_exporter_healthcheck(tmp_path):
    port = free_port()
    exporter = ExporterProcess(f"--log-file={tmp_path / 'vllm.log'}", port=port)
    try:
        exporter.metrics()
        assert subprocess.run(healthcheck("vllm-log-exporter", port), timeout=30).returncode == 0
    finally:
        exporter.close()
    failed = subprocess.run(healthcheck("vllm-log-exporter", port), capture_output=True, timeout=30)
    assert failed.returncode != 0


def test_the_probe_healthcheck(tmp_path):
    """The probe serves /metrics before its first probe, so a vLLM still loading its model
    leaves the probe container healthy (it reports the failures instead)."""
    port = free_port()
    probe = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm_probe",
            f"--target=http://127.0.0.1:{free_port()}",  # nothing there
            "--model=tiny-llama",
            f"--listen=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline_checks = 0
        while (
            subprocess.run(healthcheck("vllm-probe", port), capture_output=True, timeout=30).returncode != 0
        ):
            deadline_checks += 1
            assert probe.poll() is None and deadline_checks < 100, "the probe never served /metrics"
    finally:
        probe.terminate()
        probe.wait(timeout=30)
    assert subprocess.run(healthcheck("vllm-probe", port), capture_output=True, timeout=30).returncode != 0


def test_the_dcgm_exporter_healthcheck(tmp_path):
    """No GPU here, so a stand-in answers: Python's HTTP server with a file named `health`
    (200) and, for the failing case, without it (404). What runs is the service's own
    bash command, which must tell the two apart and fail when nothing listens."""
    port = free_port()
    root = tmp_path / "www"
    root.mkdir()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: http_get(f"http://127.0.0.1:{port}/")[0] == 200 if _listening(port) else None)
        assert subprocess.run(healthcheck("dcgm-exporter", port), timeout=30).returncode != 0  # 404
        (root / "health").write_text("KO")  # dcgm-exporter's /health answers 200 with this body
        assert subprocess.run(healthcheck("dcgm-exporter", port), timeout=30).returncode == 0
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert subprocess.run(healthcheck("dcgm-exporter", port), capture_output=True, timeout=30).returncode != 0


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
