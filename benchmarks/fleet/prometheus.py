"""The real Prometheus (Debian's binary) on loopback, and what the benchmark asks of it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from tests.support.vllm_server import free_port


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not installed; `make system-deps` installs it")
    return path


def write_config(
    path: Path, bundle_config: Path, targets_file: Path, rule_files: list[Path], job: str = "vllm"
) -> Path:
    """The bundle's prometheus.yml with the vLLM job's targets read from `targets_file`
    (file_sd: one simulator, a metrics path and an instance label per engine) and the given
    rule files; no Alertmanager, no log-exporter job (nothing simulates them)."""
    config = yaml.safe_load(bundle_config.read_text())
    jobs = [j for j in config["scrape_configs"] if j["job_name"] == job]
    if not jobs:
        raise ValueError(f"{bundle_config} has no scrape job {job!r}")
    vllm = jobs[0]
    vllm.pop("static_configs", None)
    vllm["file_sd_configs"] = [{"files": [str(targets_file)], "refresh_interval": "1m"}]
    config["scrape_configs"] = [vllm]
    config["rule_files"] = [str(p) for p in rule_files]
    config.pop("alerting", None)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass
class QueryTiming:
    wall_s: float  # request sent to last byte received
    bytes: int
    series: int
    stats: dict  # Prometheus's own timings (stats=all)


class Prometheus:
    def __init__(
        self, config: Path, workdir: Path, port: int | None = None, extra_flags: tuple[str, ...] = ()
    ):
        self.config = config
        self.workdir = workdir
        self.port = port or free_port()
        self.extra_flags = extra_flags
        self.process: subprocess.Popen | None = None
        self.log = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> Prometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [
            binary("prometheus"),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",  # rule variants are swapped in with /-/reload
            "--query.timeout=10m",
            *self.extra_flags,
        ]
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            try:
                if self._get("/-/ready", timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"prometheus not ready in {timeout}s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # HTTP ---------------------------------------------------------------------------------

    def _get(self, path: str, timeout: float = 60) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def _api(self, path: str, params: dict | None = None, timeout: float = 600) -> dict:
        query = "?" + urllib.parse.urlencode(params) if params else ""
        status, body = self._get(path + query, timeout=timeout)
        data = json.loads(body)
        if status != 200 or data.get("status") != "success":
            raise RuntimeError(f"{path} failed ({status}): {params}\n{body[:800]!r}")
        return data["data"]

    def last_evaluations(self) -> list[float]:
        """Each rule group's last evaluation, in Unix seconds (0 before the first)."""
        out = []
        for group in self._api("/api/v1/rules")["groups"]:
            # RFC 3339 with nanoseconds; datetime reads microseconds.
            stamp = re.sub(r"(\.\d{6})\d*", r"\1", group["lastEvaluation"]).replace("Z", "+00:00")
            out.append(max(0.0, datetime.fromisoformat(stamp).timestamp()))
        return out

    def reload(self) -> None:
        request = urllib.request.Request(self.url + "/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=120) as response:
            if response.status != 200:
                raise RuntimeError(f"reload failed: {response.status}")

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._api("/api/v1/query", params)["result"]

    def scalar(self, expr: str, default: float = 0.0) -> float:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else default

    def timed_range(self, expr: str, start: float, end: float, step: float) -> QueryTiming:
        """One query_range, timed from request to the last byte of the answer."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return self._timed("query_range", params)

    def timed_instant(self, expr: str, at: float) -> QueryTiming:
        """One instant query (a table's), timed like `timed_range`."""
        return self._timed("query", {"query": expr, "time": f"{at:.3f}"})

    def _timed(self, api: str, params: dict[str, str]) -> QueryTiming:
        query = urllib.parse.urlencode({**params, "stats": "all"})
        began = time.perf_counter()
        status, body = self._get(f"/api/v1/{api}?{query}", timeout=900)
        wall = time.perf_counter() - began
        data = json.loads(body)
        if status != 200 or data.get("status") != "success":
            raise RuntimeError(f"{api} failed ({status}): {params['query']}\n{body[:800]!r}")
        return QueryTiming(wall, len(body), len(data["data"]["result"]), data["data"].get("stats", {}))

    def label_values(
        self, label: str, match: str = "", start: float | None = None, end: float | None = None
    ) -> list[str]:
        """A label's values, of the series `match` selects (all series when empty) in [start, end]."""
        params: list[tuple[str, str]] = [("match[]", match)] if match else []
        if start is not None and end is not None:
            params += [("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        query = "?" + urllib.parse.urlencode(params) if params else ""
        status, body = self._get(f"/api/v1/label/{urllib.parse.quote(label)}/values{query}", timeout=120)
        data = json.loads(body)
        if status != 200 or data.get("status") != "success":
            raise RuntimeError(f"label values of {label} failed ({status}): {match}\n{body[:800]!r}")
        return data["data"]

    def rules(self) -> list[dict]:
        return self._api("/api/v1/rules")["groups"]

    def alerts(self) -> list[dict]:
        return self._api("/api/v1/alerts")["alerts"]

    def targets_up(self) -> tuple[int, int]:
        targets = self._api("/api/v1/targets", {"state": "active"})["activeTargets"]
        return sum(t["health"] == "up" for t in targets), len(targets)

    def own_metrics(self) -> dict[str, float]:
        """Prometheus's own /metrics, flattened to {series: value} (no self-scrape job, so the
        benchmark adds no series of its own to the head)."""
        text = self._get("/metrics", timeout=60)[1].decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out

    def rss_bytes(self) -> int:
        """VmRSS of the Prometheus process, from /proc."""
        if not self.process:
            return 0
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu_seconds(self) -> float:
        """User + system CPU time of the Prometheus process so far."""
        if not self.process:
            return 0.0
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")
