"""A scenario file: the fleet to simulate and the incidents to inject, in YAML, so a scenario is
added without code (format: README, "Writing a scenario"). The kinds of incident are data (KINDS);
a file naming anything else is refused in one sentence that says what to write instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from vllm_obs.errors import BundleError
from vllm_obs.promql import seconds

from .background import DEFAULT_START_HOUR, USERS_AVAILABILITY, Background
from .traces import TRACES

EXPECT = ("page", "ticket", "none")


@dataclass(frozen=True)
class Kind:
    does: str  # what the simulation does to the targeted replicas
    params: dict[str, type] = field(default_factory=dict)  # further keys an incident of this kind takes
    lasts: bool = True  # takes a `duration`


# Every incident the benchmark knows; each parameter is required.
KINDS: dict[str, Kind] = {
    "engine_death": Kind("the engine dies with EngineDeadError in its log; the server exits and restarts"),
    "silent_death": Kind("the process is killed (kernel OOM killer): no log line, the port stops answering"),
    "hung_engine": Kind("no engine step runs; /metrics and /health still answer 200"),
    "crash_restart": Kind("the server dies and restarts `restarts` times in a row", {"restarts": int}),
    "failed_start": Kind("a restart fails to start (startup_failed in the log) until the incident ends"),
    "slow_replica": Kind("every engine step takes `factor` times as long", {"factor": float}),
    "kv_exhaustion": Kind(
        "the KV cache shrinks to `fraction` of its blocks: preemptions", {"fraction": float}
    ),
    "error_burst": Kind("a share of the requests fail with a 5xx", {"share": float}),
    "admission_rejections": Kind(
        "a share of the requests are refused at admission (400/429)", {"share": float}
    ),
    "traffic_spike": Kind("the model's arrival rate is multiplied by `factor`", {"factor": float}),
    "rolling_restart": Kind(
        "a planned restart, one replica after the other, each stopped gracefully", {"per_replica": str}
    ),
    "backlog": Kind(
        "replicas die (logged) and are back at the end; their clients re-send what was in flight to "
        "the survivors, whose queue outlasts the outage"
    ),
    "model_upgrade": Kind(
        "a planned restart, one replica after the other, each serving the model `to` once started again "
        "(the same hosts and Service)",
        {"per_replica": str, "to": str},
    ),
    "quiet": Kind("nothing is injected: a labelled healthy window (a night, a lull)"),
}
TASKS = ("generate", "embed")


@dataclass(frozen=True)
class Model:
    model: str
    namespace: str
    replicas: int
    trace: str
    per_replica_rate: float  # mean requests per second per replica
    task: str = "generate"  # or "embed": a pooling model, no output tokens


@dataclass(frozen=True)
class Target:
    model: str
    replicas: int | None = None  # how many of its replicas (the first ones)
    fraction: float | None = None  # or what share of them


@dataclass(frozen=True)
class Incident:
    id: str
    kind: str
    at: float  # seconds after the start
    duration: float  # seconds (0 for a kind that does not last)
    target: Target
    expect: str
    params: dict[str, Any]

    @property
    def end(self) -> float:
        return self.at + self.duration


@dataclass(frozen=True)
class Scenario:
    name: str
    seed: int
    duration: float
    fleet: tuple[Model, ...]
    incidents: tuple[Incident, ...]
    source: str  # the file it was read from, for the report
    background: Background = field(default_factory=Background)
    start_hour: float = DEFAULT_START_HOUR  # the hour of the day at simulated time 0
    availability_objective: float = USERS_AVAILABILITY  # what the error budgets are of (budgets.py)

    def aliases(self) -> dict[str, str]:
        """Model names the fleet's models take during the run (a model upgrade's `to`) -> the
        fleet model whose replicas serve them."""
        return Scenario.aliases_of(self.incidents)

    @staticmethod
    def aliases_of(incidents) -> dict[str, str]:
        return {i.params["to"]: i.target.model for i in incidents if i.kind == "model_upgrade"}


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text("utf-8"))
    except OSError as exc:
        raise BundleError(f"cannot read the scenario file {path}: {exc.strerror}; check the path.") from None
    except yaml.YAMLError:
        raise BundleError(f"the scenario file {path} is not valid YAML; fix its syntax.") from None
    return parse_scenario(data, str(path))


def parse_scenario(data: Any, source: str) -> Scenario:
    where = f"the scenario {source}"
    top = _mapping(
        data,
        where,
        required={"name", "duration", "fleet", "incidents"},
        optional={"seed", "background", "start_hour", "availability_objective"},
    )
    fleet = tuple(
        _model(m, f"{where}, fleet entry {i + 1}") for i, m in enumerate(_list(top["fleet"], where))
    )
    if not fleet:
        raise BundleError(f"{where} has no fleet; list at least one model with its replicas.")
    names = [m.model for m in fleet]
    if len(set(names)) != len(names):
        raise BundleError(f"{where} lists a model twice in its fleet; give each model one entry.")
    models = {m.model: m for m in fleet}
    duration = _duration(top["duration"], f"{where}'s duration")
    incidents = tuple(
        _incident(item, f"{where}, incident {i + 1}", models, duration)
        for i, item in enumerate(_list(top["incidents"], where))
    )
    ids = [i.id for i in incidents]
    if len(set(ids)) != len(ids):
        raise BundleError(f"{where} uses an incident id twice; give each incident its own id.")
    clash = sorted(set(Scenario.aliases_of(incidents)) & set(models))
    if clash:
        raise BundleError(f"{where} upgrades a model to {clash[0]!r}, a name the fleet already serves.")
    seed = top.get("seed", 1)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise BundleError(f"{where}'s seed must be a whole number.")
    start = top.get("start_hour", DEFAULT_START_HOUR)
    if not isinstance(start, (int, float)) or isinstance(start, bool) or not 0 <= start < 24:
        raise BundleError(f"{where}'s start_hour must be an hour of the day from 0 to 24.")
    objective = top.get("availability_objective", USERS_AVAILABILITY)
    if not isinstance(objective, float) or not 0 < objective < 1:
        raise BundleError(f"{where}'s availability_objective must be a share between 0 and 1, like 0.999.")
    background = Background.parse(top.get("background", {}), f"{where}'s background")
    return Scenario(
        str(top["name"]), seed, duration, fleet, incidents, source, background, float(start), objective
    )


def _model(data: Any, where: str) -> Model:
    m = _mapping(
        data,
        where,
        required={"model", "namespace", "replicas", "trace", "per_replica_rate"},
        optional={"task"},
    )
    task = m.get("task", "generate")
    if task not in TASKS:
        raise BundleError(f"{where} has the task {task!r}; use generate or embed.")
    if m["trace"] not in TRACES:
        raise BundleError(f"{where} replays the trace {m['trace']!r}; use one of {', '.join(TRACES)}.")
    replicas, rate = m["replicas"], m["per_replica_rate"]
    if not isinstance(replicas, int) or replicas < 1:
        raise BundleError(f"{where} needs replicas: a whole number of at least 1.")
    if not isinstance(rate, (int, float)) or rate <= 0:
        raise BundleError(f"{where} needs per_replica_rate: requests per second per replica, above 0.")
    return Model(str(m["model"]), str(m["namespace"]), replicas, m["trace"], float(rate), task)


def _incident(data: Any, where: str, models: dict[str, Model], span: float) -> Incident:
    if not isinstance(data, dict):
        raise BundleError(f"{where} must be a mapping of keys to values.")
    kind_name = data.get("kind")
    kind = KINDS.get(kind_name) if isinstance(kind_name, str) else None
    if kind is None:
        raise BundleError(f"{where} has the kind {kind_name!r}; use one of {', '.join(KINDS)}.")
    required = {"id", "kind", "at", "target", "expect", *kind.params} | (
        {"duration"} if kind.lasts else set()
    )
    d = _mapping(data, f"{where} ({kind_name})", required=required)
    if d["expect"] not in EXPECT:
        raise BundleError(f"{where} expects {d['expect']!r}; write page, ticket or none.")
    at = _duration(d["at"], f"{where}'s at")
    duration = _duration(d["duration"], f"{where}'s duration") if kind.lasts else 0.0
    if at + duration > span:
        raise BundleError(f"{where} ends after the scenario does; start it earlier or lengthen the scenario.")
    params = {}
    for name, typ in kind.params.items():
        value = d[name]
        ok = isinstance(value, typ) or (
            typ is float and isinstance(value, int) and not isinstance(value, bool)
        )
        if not ok:
            raise BundleError(f"{where}'s {name} must be a {typ.__name__}, not {value!r}.")
        params[name] = value
    return Incident(
        str(d["id"]), kind_name, at, duration, _target(d["target"], where, models), d["expect"], params
    )


def _target(data: Any, where: str, models: dict[str, Model]) -> Target:
    t = _mapping(data, f"{where}'s target", required={"model"}, optional={"replicas", "fraction"})
    model = models.get(t["model"])
    if model is None:
        raise BundleError(f"{where} targets the model {t['model']!r}, which is not in the fleet.")
    replicas, fraction = t.get("replicas"), t.get("fraction")
    if replicas is not None and fraction is not None:
        raise BundleError(f"{where}'s target names both replicas and fraction; keep one.")
    if replicas is not None and not (isinstance(replicas, int) and 1 <= replicas <= model.replicas):
        raise BundleError(
            f"{where} targets {replicas!r} replicas of {model.model}, which has {model.replicas}."
        )
    if fraction is not None and not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
        raise BundleError(f"{where}'s target fraction must be above 0 and at most 1.")
    return Target(model.model, replicas, None if fraction is None else float(fraction))


def _mapping(
    data: Any, where: str, required: set[str], optional: frozenset[str] | set[str] = frozenset()
) -> dict:
    if not isinstance(data, dict):
        raise BundleError(f"{where} must be a mapping of keys to values.")
    missing, unknown = sorted(required - set(data)), sorted(set(data) - required - set(optional))
    if missing:
        raise BundleError(f"{where} lacks {', '.join(missing)}; add {'it' if len(missing) == 1 else 'them'}.")
    if unknown:
        raise BundleError(f"{where} has the unknown key(s) {', '.join(unknown)}; remove or correct them.")
    return data


def _list(data: Any, where: str) -> list:
    if not isinstance(data, list):
        raise BundleError(f"{where}: fleet and incidents must be lists.")
    return data


def _duration(value: Any, where: str) -> float:
    try:
        return seconds(str(value))
    except BundleError:
        raise BundleError(f"{where} {value!r} is not a duration like 90s, 10m or 2h.") from None
