"""The start-up budget the kubelet gives a container, read from a workload manifest: a startupProbe
allows initialDelaySeconds + failureThreshold x periodSeconds; without one, the liveness probe
restarts a container that has not answered for that long, loading or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from ..findings import DoctorCannotRun

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod")


@dataclass(frozen=True)
class Budget:
    initial_delay: int
    period: int
    failure_threshold: int

    @property
    def seconds(self) -> int:
        return self.initial_delay + self.failure_threshold * self.period

    def describe(self) -> str:
        delay = f"{self.initial_delay} s + " if self.initial_delay else ""
        return f"{delay}{self.failure_threshold} x {self.period} s = {self.seconds} s"


@dataclass(frozen=True)
class ContainerProbes:
    workload: str  # "Deployment/vllm"
    container: str
    startup: Budget | None
    liveness: Budget | None


def read(path: str) -> list[ContainerProbes]:
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise DoctorCannotRun(
            f"cannot read --kubernetes-manifest {path} ({reason}); check the path."
        ) from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError:
        raise DoctorCannotRun(
            f"--kubernetes-manifest {path} is not valid YAML; fix it or pass another file."
        ) from None
    out = []
    for doc in docs:
        kind = doc.get("kind")
        if kind not in WORKLOADS:
            continue
        spec = doc.get("spec") or {}
        pod = spec if kind == "Pod" else ((spec.get("template") or {}).get("spec") or {})
        name = f"{kind}/{(doc.get('metadata') or {}).get('name', '?')}"
        for container in pod.get("containers") or []:
            startup, liveness = (
                _budget(container.get("startupProbe")),
                _budget(container.get("livenessProbe")),
            )
            if startup or liveness:
                out.append(ContainerProbes(name, str(container.get("name", "?")), startup, liveness))
    if not out:
        raise DoctorCannotRun(
            f"--kubernetes-manifest {path} has no workload container with a startupProbe or livenessProbe; "
            "pass the Deployment (or StatefulSet) that runs vLLM."
        )
    return out


def _budget(probe: object) -> Budget | None:
    if not isinstance(probe, dict):
        return None
    return Budget(
        initial_delay=int(probe.get("initialDelaySeconds", 0)),
        period=int(probe.get("periodSeconds", 10)),
        failure_threshold=int(probe.get("failureThreshold", 3)),
    )
