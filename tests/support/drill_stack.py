"""The live drill stack: real vLLM servers each with the real log exporter and canary probe, a real
Prometheus with a bundle generated from a live server, a real Alertmanager and a recording webhook.
As servers come and go, the bundle is regenerated for the current targets and Prometheus reloads it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import requests
import yaml
from prometheus_api_client import PrometheusConnect
from vllm_obs.cli import main as vllm_obs

from .monitoring import Alertmanager, Prometheus, binary
from .notifications import NotificationRecorder, webhook_receivers
from .vllm_server import VllmServer, free_port, http_get

# Receivers of the generated routing, by the path of the recorder they post to.
PAGER, CHAT = "critical", "warning"


def wait_until(check: Callable[[], object], what: str, timeout: float, every: float = 0.5) -> object:
    """Poll check() until it returns something truthy; fail naming what did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


# -- the servers ---------------------------------------------------------------------------


@dataclass
class DrillServer(VllmServer):
    """A vLLM server whose restarts append to one log, as a restart policy writing to one
    file does (the log exporter follows that file across them)."""

    log_mode: str = "ab"

    def worker_pid(self) -> int:
        """The process that runs the model: the executor's worker under the engine core."""
        for pid, cmd in self.descendants():
            if "VLLM::Worker" in cmd:
                return pid
        return self.engine_core_pid()

    def stop_planned(self, timeout: float = 120) -> int:
        """A planned stop as an orchestrator does it (docker stop, a pod deletion): SIGTERM to
        the API server only, which stops its engine; returns once the whole group is gone."""
        assert self.process is not None
        group = self.process.pid
        self.process.send_signal(signal.SIGTERM)
        status = self.wait_exit(timeout=timeout)
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: not _group_alive(group), "the engine and workers to exit", 30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        return status

    def kill_group(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _sidecar(command: list[str], url: str, log: Path) -> subprocess.Popen:
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _answers(url, process, log), f"{url} to answer", 30, every=0.2)
    except BaseException:
        process.kill()
        raise
    return process


def _answers(url: str, process: subprocess.Popen, log: Path) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"{url}: exited with {process.returncode}:\n{log.read_text()[-2000:]}")
    with contextlib.suppress(OSError):
        return http_get(url, timeout=2)[0] == 200
    return False


@dataclass
class Slot:
    """One monitored vLLM: the server, the log exporter reading its log and the canary probe
    asking it for a token. The sidecars run for as long as the slot is in the stack, across
    the server's stops, deaths and restarts."""

    name: str
    server: DrillServer
    workdir: Path
    probe_interval: float = 2.0
    probe_timeout: float = 1.5
    exporter_port: int = field(default_factory=free_port)
    probe_port: int = field(default_factory=free_port)
    _processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    @property
    def exporter(self) -> str:
        return f"127.0.0.1:{self.exporter_port}"

    @property
    def probe(self) -> str:
        return f"127.0.0.1:{self.probe_port}"

    def start_sidecars(self) -> None:
        exporter = [
            sys.executable,
            "-m",
            "vllm_log_exporter.cli",
            "--log-file",
            str(self.server.log_path),
            "--listen",
            self.exporter,
        ]
        probe = [
            sys.executable,
            "-m",
            "vllm_probe",
            "--target",
            self.server.url,
            "--model",
            self.server.model_name,
            "--listen",
            self.probe,
            "--interval",
            str(self.probe_interval),
            "--timeout",
            str(self.probe_timeout),
        ]
        self._processes.append(
            _sidecar(exporter, f"http://{self.exporter}/metrics", self.workdir / f"exporter-{self.name}.out")
        )
        self._processes.append(
            _sidecar(probe, f"http://{self.probe}/metrics", self.workdir / f"probe-{self.name}.out")
        )

    def close(self) -> None:
        self.server.kill_group()
        for process in self._processes:
            if process.poll() is None:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=15)
            if process.poll() is None:
                process.kill()
                process.wait(timeout=15)
        self._processes.clear()


# -- Prometheus, Alertmanager ---------------------------------------------------------------


class DrillPrometheus(Prometheus):
    """Prometheus that reloads its configuration on SIGHUP. It keeps the default resend delay (1m):
    Alertmanager holds an alert without news for 4 x that delay, and a shorter hold would resolve and
    re-notify an alert whose evaluation is late on a loaded machine."""

    def reload(self, timeout: float = 30) -> None:
        assert self.process is not None
        sent = time.time()
        self.process.send_signal(signal.SIGHUP)

        def reloaded() -> bool:
            page = http_get(self.url + "/metrics", timeout=5)[1]
            values = {}
            for line in page.splitlines():
                if line.startswith("prometheus_config_last_reload_"):
                    name, _, value = line.partition(" ")
                    values[name] = float(value)
            ok = values.get("prometheus_config_last_reload_successful") == 1
            return ok and values.get("prometheus_config_last_reload_success_timestamp_seconds", 0) >= int(
                sent
            )

        wait_until(reloaded, "Prometheus to reload its configuration", timeout)


@dataclass
class AlertState:
    """What Alertmanager held for one alert at one moment."""

    at: float
    labels: dict
    state: str  # active, suppressed, unprocessed
    inhibited_by: tuple[str, ...]


class DrillStack:
    """Prometheus, Alertmanager and the notification recorder around the drill's servers."""

    def __init__(self, workdir: Path, config: dict) -> None:
        self.workdir = workdir
        self.base_config = config
        self.bundle = workdir / "bundle"
        self.config_path = workdir / "bundle-config.yml"
        self.exposition: Path = workdir / "live-metrics.prom"
        self.recorder = NotificationRecorder()
        self.am_port = free_port()
        self.prom_port = free_port()
        self.prom: DrillPrometheus | None = None
        self.am: Alertmanager | None = None
        self.slots: list[Slot] = []  # those Prometheus watches now
        self._all_slots: list[Slot] = []  # every slot made, closed with the stack
        self.am_samples: list[AlertState] = []
        self.fingerprints: dict[str, dict] = {}  # Alertmanager's alert fingerprints -> labels
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None
        self._stack = contextlib.ExitStack()

    # the configuration of the moment
    def resolved_config(self, slots: Iterable[Slot], overlay: dict | None = None) -> dict:
        config = _merge(self.base_config, overlay or {})
        slots = list(slots)
        prometheus = config.setdefault("prometheus", {})
        prometheus["vllm_targets"] = [s.instance for s in slots]
        prometheus["log_exporters"] = [{"target": s.exporter, "vllm_instance": s.instance} for s in slots]
        prometheus["probes"] = [s.probe for s in slots]
        prometheus["alertmanagers"] = [f"127.0.0.1:{self.am_port}"]
        prometheus["prometheus_targets"] = [f"127.0.0.1:{self.prom_port}"]
        config["alertmanager"] = {
            **config.get("alertmanager", {}),
            **webhook_receivers(self.recorder.url),
        }
        return config

    def generate(self, slots: Iterable[Slot], source: list[str], overlay: dict | None = None) -> None:
        self.config_path.write_text(yaml.safe_dump(self.resolved_config(slots, overlay), sort_keys=False))
        said = io.StringIO()
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            code = vllm_obs(
                ["generate", "--out", str(self.bundle), "--config", str(self.config_path), *source]
            )
        if code != 0:
            raise RuntimeError(
                f"vllm-obs generate exited {code} for the drill configuration: {said.getvalue()}"
            )

    def start(self, slots: list[Slot], metrics_url: str) -> None:
        """Generate the bundle from a live server's /metrics, then start the monitoring."""
        self.exposition.write_text(requests.get(metrics_url, timeout=10).text)
        self.generate(slots, ["--metrics-url", metrics_url])
        self.slots = list(slots)
        self._stack.enter_context(self.recorder)
        binary("prometheus-alertmanager")
        self.am = self._stack.enter_context(
            Alertmanager(self.bundle / "alerts" / "alertmanager.yml", self.workdir, port=self.am_port)
        )
        self.prom = self._stack.enter_context(
            DrillPrometheus(self.bundle / "prometheus" / "prometheus.yml", self.workdir, port=self.prom_port)
        )
        self._sampler = threading.Thread(target=self._sample_alertmanager, daemon=True)
        self._sampler.start()

    def configure(self, slots: list[Slot], overlay: dict | None = None) -> None:
        """Point the monitoring at these servers (regenerated bundle, Prometheus reloaded)."""
        assert self.prom is not None
        self.generate(slots, ["--metrics-file", str(self.exposition)], overlay)
        self.slots = list(slots)
        self.prom.reload()
        wanted = {s.instance for s in slots} | {s.exporter for s in slots} | {s.probe for s in slots}
        # The monitoring scrapes itself too (its Prometheus and Alertmanager jobs).
        wanted |= {f"127.0.0.1:{self.prom_port}", f"127.0.0.1:{self.am_port}"}

        wait_until(lambda: self._active_targets() == wanted, "Prometheus to take the new target set", 30)

    def alertmanager_found(self) -> bool:
        """Prometheus knows its Alertmanager: an alert it sends from now on is delivered."""
        assert self.prom is not None
        data = json.loads(http_get(self.prom.url + "/api/v1/alertmanagers", timeout=10)[1])
        return bool(data["data"]["activeAlertmanagers"])

    def _active_targets(self) -> set[str]:
        assert self.prom is not None
        data = json.loads(http_get(self.prom.url + "/api/v1/targets?state=active", timeout=10)[1])
        return {t["scrapeUrl"].split("//", 1)[1].split("/", 1)[0] for t in data["data"]["activeTargets"]}

    @property
    def client(self) -> PrometheusConnect:
        assert self.prom is not None
        return PrometheusConnect(url=self.prom.url, disable_ssl=True)

    def query(self, expr: str) -> list[dict]:
        return self.client.custom_query(expr)

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    # Alertmanager, sampled every second: inhibition is a live state, not a history
    def _sample_alertmanager(self) -> None:
        assert self.am is not None
        while not self._sampling.is_set():
            with contextlib.suppress(requests.RequestException, ValueError):
                now = time.time()
                for alert in requests.get(f"{self.am.url}/api/v2/alerts", timeout=5).json():
                    status = alert.get("status", {})
                    self.fingerprints[alert.get("fingerprint", "")] = alert.get("labels", {})
                    self.am_samples.append(
                        AlertState(
                            now,
                            alert.get("labels", {}),
                            status.get("state", ""),
                            tuple(status.get("inhibitedBy") or ()),
                        )
                    )
            self._sampling.wait(1.0)

    def am_states(self, alertname: str, since: float, until: float, **labels: str) -> list[AlertState]:
        return [
            s
            for s in list(self.am_samples)
            if since <= s.at <= until
            and s.labels.get("alertname") == alertname
            and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def new_slot(self, name: str, *server_args: str) -> Slot:
        """A server (not launched yet) with its exporter and probe running from now on."""
        # Each server serves its own model, as a one-replica deployment does: its death takes
        # the whole model's capacity, which is what pages.
        server = DrillServer(
            self.workdir / f"vllm-{name}.log",
            extra_args=server_args,
            startup_timeout=300,
            model_name=f"tiny-{name.lower()}",
        )
        made = Slot(name, server, self.workdir)
        self._all_slots.append(made)
        made.start_sidecars()
        return made

    def model_of(self, instance: str) -> str:
        """The model a slot's server at `instance` serves ("" for no slot there)."""
        return next((s.server.model_name for s in self._all_slots if s.instance == instance), "")

    def close(self) -> None:
        self._sampling.set()
        for made in self._all_slots:
            made.close()
        self._stack.close()

    def __enter__(self) -> DrillStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _merge(base: dict, overlay: dict) -> dict:
    out = yaml.safe_load(yaml.safe_dump(base))
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
