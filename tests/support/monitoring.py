"""Run the real Prometheus and Alertmanager binaries (Debian packages) on loopback."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .vllm_server import free_port, http_get


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not installed; `make system-deps` installs it")
    return path


def _start(command: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)


def _wait_ready(url: str, process: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if http_get(url, timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready in {timeout}s:\n{log.read_text()[-3000:]}")


@dataclass
class _Server:
    config: Path
    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    @property
    def log(self) -> Path:
        return self.workdir / f"{type(self).__name__.lower()}.log"

    def __enter__(self):
        self.process = _start(self.command(), self.log)
        _wait_ready(self.url + "/-/ready", self.process, self.log)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


class Prometheus(_Server):
    def command(self) -> list[str]:
        return [
            binary("prometheus"),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]

    def query(self, expr: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        status, body = http_get(url, timeout=30)
        data = json.loads(body)
        if status != 200 or data.get("status") != "success":
            raise AssertionError(f"query failed ({status}): {expr}\n{body[:500]}")
        return data["data"]["result"]

    def targets(self) -> list[dict]:
        return json.loads(http_get(f"{self.url}/api/v1/targets", timeout=10)[1])["data"]["activeTargets"]

    def wait_for(self, expr: str, timeout: float = 120, interval: float = 1.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                return result
            time.sleep(interval)
        raise AssertionError(f"{expr} returned nothing within {timeout}s")


class Alertmanager(_Server):
    def command(self) -> list[str]:
        return [
            binary("prometheus-alertmanager"),
            f"--config.file={self.config}",
            f"--storage.path={self.workdir / 'alertmanager-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",  # a single instance, no gossip
        ]

    def post_alerts(self, alerts: list[dict]) -> None:
        request = urllib.request.Request(
            f"{self.url}/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200, response.status

    def alerts(self) -> list[dict]:
        status, body = http_get(f"{self.url}/api/v2/alerts", timeout=10)
        assert status == 200, body
        return json.loads(body)

    def inhibitions(self, posted: list[dict], expected: set[str], timeout: float = 20) -> tuple[dict, set]:
        """Post alerts labelled `case`; poll until all are in and the inhibited cases are `expected`
        (or the timeout). Returns (alerts by case, the inhibited cases) for the test to judge."""
        self.post_alerts(posted)
        deadline = time.monotonic() + timeout
        while True:
            state = {a["labels"]["case"]: a for a in self.alerts()}
            inhibited = {case for case, a in state.items() if a["status"]["inhibitedBy"]}
            if (len(state) == len(posted) and inhibited == expected) or time.monotonic() > deadline:
                return state, inhibited
            time.sleep(0.5)
