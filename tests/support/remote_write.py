"""Remote write on loopback (docs/multi-cluster.md): an agent-mode Prometheus per cluster writing to
a central Prometheus that evaluates the rules and notifies Alertmanager. The agent and receiver
flags follow the Prometheus release (agent_flag, receiver_flag)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from .monitoring import Prometheus, binary


@cache
def prometheus_version() -> tuple[int, int]:
    """(major, minor) of the installed prometheus, from `prometheus --version`."""
    said = subprocess.run(
        [binary("prometheus"), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    found = re.search(r"version (\d+)\.(\d+)", said.stdout + said.stderr)
    if found is None:
        raise RuntimeError(f"cannot read the version of prometheus: {said.stdout}{said.stderr}")
    return int(found[1]), int(found[2])


def agent_flag() -> str:
    version = prometheus_version()
    if version >= (3, 0):
        return "--agent"
    if version >= (2, 32):
        return "--enable-feature=agent"
    raise RuntimeError(f"prometheus {version} has no agent mode (2.32 or later has)")


def receiver_flag() -> str:
    version = prometheus_version()
    if version >= (2, 33):
        return "--web.enable-remote-write-receiver"
    if version >= (2, 25):
        return "--enable-feature=remote-write-receiver"
    raise RuntimeError(f"prometheus {version} cannot receive remote write (2.25 or later can)")


@dataclass
class AgentPrometheus(Prometheus):
    """Prometheus in agent mode: scrapes and remote-writes, no local queries, rules or alerts.
    Agent mode refuses the server's storage flags, so its command is its own."""

    def command(self) -> list[str]:
        return [
            binary("prometheus"),
            agent_flag(),
            f"--config.file={self.config}",
            f"--storage.agent.path={self.workdir / 'agent-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]


@dataclass
class ReceivingPrometheus(Prometheus):
    """A Prometheus server that also accepts remote write on /api/v1/write."""

    def command(self) -> list[str]:
        return [*super().command(), receiver_flag()]

    @property
    def write_url(self) -> str:
        return f"{self.url}/api/v1/write"


def agent_config(
    cluster: str,
    targets: list[str],
    write_url: str,
    *,
    job: str = "vllm",
    instance: str | None = None,
    interval: str = "1s",
) -> dict:
    """One cluster's agent: scrapes `targets` as `job`, labels all it sends with `cluster` (an external
    label) and remote-writes to `write_url` in one shard, at least every second. instance: one name for
    every target, so two clusters have replicas of the same name, as one manifest gives them."""
    job_config: dict = {
        "job_name": job,
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "static_configs": [{"targets": targets}],
    }
    if instance is not None:
        job_config["relabel_configs"] = [{"target_label": "instance", "replacement": instance}]
    return {
        "global": {"scrape_interval": interval, "external_labels": {"cluster": cluster}},
        "scrape_configs": [job_config],
        "remote_write": [
            {
                "url": write_url,
                "queue_config": {
                    "max_shards": 1,
                    "max_samples_per_send": 2000,
                    "capacity": 10000,
                    "batch_send_deadline": "1s",
                },
            }
        ],
    }


def central_config(rule_files: list[Path], alertmanager: str, evaluation_interval: str = "1s") -> dict:
    """The central Prometheus: scrapes nothing, evaluates `rule_files` over what it receives and
    sends alerts to `alertmanager` (host:port)."""
    return {
        "global": {"evaluation_interval": evaluation_interval},
        "rule_files": [str(path) for path in rule_files],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
    }


def write_yaml(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
