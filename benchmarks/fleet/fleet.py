"""Who is in the fleet: engines, their instance names, models and conditions; the file_sd
targets that point Prometheus at them."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

CONDITIONS = ("high_ttft", "throttled", "kv_saturated", "stalled")
INSTANCE_PORT = 8000


@dataclass(frozen=True)
class Member:
    index: int
    instance: str  # the `instance` label Prometheus gives the engine's series
    path: str  # where the simulator serves its /metrics
    model: str
    condition: str | None  # None: healthy


def plan(engines: int, profiles: dict, unhealthy: int = 1, seed: int = 1) -> list[Member]:
    """`engines` members, models by their share, `unhealthy` engines of each condition, spread evenly
    over the fleet and rotating through the models, so no model is served by unhealthy engines only."""
    models = list(profiles["models"])
    shares = [profiles["models"][m]["share"] for m in models]
    rng = random.Random(seed)
    assigned = [models[_pick(shares, i, engines)] for i in range(engines)]
    rng.shuffle(assigned)
    sick = len(CONDITIONS) * unhealthy
    if sick > engines // 2:
        raise ValueError(
            f"{engines} engines are too few for {sick} unhealthy ones; use --engines {2 * sick} or more."
        )
    conditions: dict[int, str] = {}
    for k in range(sick):
        position = (2 * k + 1) * engines // (2 * sick)
        conditions[position] = CONDITIONS[k % len(CONDITIONS)]
        assigned[position] = models[k % len(models)]
    width = max(4, len(str(engines)))
    return [
        Member(
            index=i,
            instance=f"vllm-{i:0{width}d}:{INSTANCE_PORT}",
            path=f"/engines/{i}/metrics",
            model=assigned[i],
            condition=conditions.get(i),
        )
        for i in range(engines)
    ]


def _pick(shares: list[float], i: int, n: int) -> int:
    """Deterministic split of n slots by shares: slot i goes to the first share not yet full."""
    bound = 0.0
    for k, share in enumerate(shares):
        bound += share / sum(shares)
        if (i + 0.5) / n < bound:
            return k
    return len(shares) - 1


def file_sd_targets(members: list[Member], address: str) -> list[dict]:
    """file_sd target groups: one per engine, all on the simulator's `address`, each with its
    own metrics path and `instance` label."""
    return [
        {
            "targets": [address],
            "labels": {"__metrics_path__": m.path, "instance": m.instance},
        }
        for m in members
    ]


def write_file_sd(path: Path, members: list[Member], address: str) -> Path:
    """Write the file_sd targets file Prometheus reads (`file_sd_configs: [{files: [path]}]`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_suffix(path.suffix + ".tmp")
    staged.write_text(json.dumps(file_sd_targets(members, address), indent=1))
    staged.replace(path)  # Prometheus watches the file: never let it read half of it
    return path


def write_manifest(path: Path, members: list[Member], profiles: dict) -> Path:
    """The fleet as data: every engine, and the alerts each unhealthy one must raise."""
    manifest = {
        "engines": [asdict(m) for m in members],
        "expected_alerts": expected_alerts(members, profiles),
    }
    path.write_text(json.dumps(manifest, indent=1))
    return path


def expected_alerts(members: list[Member], profiles: dict) -> list[dict]:
    out = []
    for m in members:
        if m.condition is None:
            continue
        for alert in profiles["conditions"][m.condition]["alerts"]:
            name, severity = alert.split("/")
            out.append(
                {"alertname": name, "severity": severity, "instance": m.instance, "model_name": m.model}
            )
    return out
