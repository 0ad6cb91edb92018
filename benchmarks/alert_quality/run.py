"""Run a scenario through the generated bundle on a real Prometheus and Alertmanager, and score
every notification.

    python -m benchmarks.alert_quality.run --scenarios benchmarks/alert_quality/scenarios/smoke.yaml \
        --time-scale 20 --out benchmarks/alert_quality/work/smoke

The scenario's fleet (traffic from the traces, incidents on their schedule) is served over HTTP
(serve.py) on a clock `--time-scale` times as fast as the wall clock; the bundle is generated
with the production defaults (the knobs of `--config`, if given, over them) and rewritten for
that clock (timescale.py); Prometheus scrapes the fleet through the bundle's own scrape jobs and
evaluates its rules, Alertmanager routes the alerts to a webhook that records every
notification. At the end the notifications are scored against the schedule (scoring.py, with
budgets.py's time to page) and written to the output folder: results.json (the figures, the run's
own health), notifications.json (every post, times in simulated seconds) and report.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import sys
import threading
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

import yaml
from vllm_obs.cli import main as vllm_obs
from vllm_obs.config import BundleConfig, build
from vllm_obs.errors import BundleError

from tests.support.monitoring import Alertmanager, Prometheus, binary
from tests.support.notifications import NotificationRecorder
from tests.support.vllm_server import free_port

from ..fleet.exposition import CAPTURE, load_template
from . import timescale
from .budgets import budget
from .canary import Canary
from .fleet import Fleet
from .incidents import schedule, spiked
from .replica import EngineParams
from .report import markdown
from .scenario import Scenario, load_scenario
from .scoring import Notification, Routing, Score, model_finder, score
from .serve import Simulation, serve
from .traces import TraceMissing, arrivals, load

HERE = Path(__file__).resolve().parent
ENGINES = HERE / "engines.yaml"
RECEIVERS = ("critical", "warning", "info", "watchdog")
ROUTING = Routing(page=frozenset({"critical"}), ignore=frozenset({"watchdog"}))
SET_UP = 10.0  # wall seconds from generating the bundle to the simulated clock's start


class FastPrometheus(Prometheus):
    """Prometheus with its own clock-bound flags on the run's clock."""

    factor: float = 1.0

    def command(self) -> list[str]:
        return [*super().command(), *timescale.prometheus_flags(self.factor)]


def engine(name: str) -> EngineParams:
    profiles = yaml.safe_load(ENGINES.read_text())
    if name not in profiles:
        raise BundleError(
            f"no engine profile {name!r} in {ENGINES.name}; the profiles are {', '.join(profiles)}."
        )
    return EngineParams(**profiles[name])


def traffic(scenario: Scenario, params: EngineParams):
    """Each model's arrivals from its trace (lengths capped to the engine's context), its spikes
    laid over them."""
    out = []
    for n, model in enumerate(scenario.fleet):
        trace = load(model.trace).scaled_lengths(1, params.max_model_len)
        seed = scenario.seed * 1000 + n
        flow = arrivals(trace, model.per_replica_rate * model.replicas, scenario.duration, seed)
        for k, incident in enumerate(scenario.incidents):
            if incident.kind == "traffic_spike" and incident.target.model == model.model:
                extra_rate = model.per_replica_rate * model.replicas * (incident.params["factor"] - 1)
                extra = arrivals(trace, extra_rate, incident.end - incident.at, seed + 100 + k)
                flow = spiked(flow, extra, incident.at)
        out.append((model, params, flow))
    return out


def bundle_config(sim: Simulation, address: str, am: int, prom: int, recorder: str, user: dict) -> dict:
    """The bundle's configuration for this run: the user's knobs, the fleet's targets, every
    receiver pointed at the recorder."""
    config = json.loads(json.dumps(user))
    p = config.setdefault("prometheus", {})
    p["vllm_targets"] = list(sim.members)
    p["log_exporters"] = [{"target": address, "vllm_instance": i} for i in sim.members]
    p["probes"] = [address]
    p["alertmanagers"] = [f"127.0.0.1:{am}"]
    p["prometheus_targets"] = [f"127.0.0.1:{prom}"]
    config["alertmanager"] = {
        **config.get("alertmanager", {}),
        **{r: {"type": "webhook", "url": f"{recorder}/{r}"} for r in RECEIVERS},
    }
    return config


def generate(folder: Path, config: dict) -> None:
    path = folder / "bundle-config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        code = vllm_obs(
            [
                "generate",
                "--out",
                str(folder / "bundle"),
                "--config",
                str(path),
                "--metrics-file",
                str(CAPTURE),
            ]
        )
    if code != 0:
        raise BundleError(f"vllm-obs generate refused the run's configuration: {said.getvalue().strip()}")


def scrape_from_files(prometheus_yml: Path, files: dict[str, Path]) -> None:
    """The fleet's three jobs read their targets from the simulation's file_sd files (each
    replica is a path on one server), everything else of the bundle's scrape configs kept."""
    data = yaml.safe_load(prometheus_yml.read_text())
    for job in data["scrape_configs"]:
        if job["job_name"] in files:
            job.pop("static_configs", None)
            job["file_sd_configs"] = [{"files": [str(files[job["job_name"]])]}]
    prometheus_yml.write_text(yaml.safe_dump(data, sort_keys=False))


def notifications(recorder: NotificationRecorder, start: float, factor: float) -> list[Notification]:
    """Every post, its times in simulated seconds from the run's start."""
    out = []
    for note in recorder.records():
        stamps = [_unix(a["startsAt"]) for a in note.alerts if a.get("status") == "firing"]
        started = min(stamps) if stamps else note.received
        out.append(
            Notification(
                at=(note.received - start) * factor,
                started=(started - start) * factor,
                receiver=note.receiver,
                status=note.status,
                alerts=tuple(a.get("labels", {}) for a in note.alerts),
            )
        )
    return out


def _unix(stamp: str) -> float:
    # Alertmanager writes nanoseconds; datetime reads microseconds.
    head, _, tail = stamp.partition(".")
    if tail:
        digits = "".join(ch for ch in tail if ch.isdigit())
        zone = tail[len(digits) :]
        stamp = f"{head}.{digits[:6]}{zone}"
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run(args: argparse.Namespace) -> dict:
    scenario = load_scenario(args.scenarios)
    params = engine(args.engine)
    user = yaml.safe_load(Path(args.config).read_text()) if args.config else {}
    config = build(BundleConfig, user or {}, "", str(args.config or "the defaults"))
    factor = float(args.time_scale)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)

    # The simulated clock starts a moment from now, once Prometheus and Alertmanager are up; the
    # fleet's timestamps are those of the virtual clock (timescale.py) anchored now.
    anchor = time.time()
    start = anchor + SET_UP
    epoch = timescale.virtual_epoch(anchor, start, factor)
    fleet = Fleet(traffic(scenario, params), started=epoch, seed=scenario.seed, template=load_template())
    schedule(fleet, scenario)
    sim = Simulation(fleet, Canary(fleet, epoch, seed=scenario.seed), start, scale=factor)
    port, am_port, prom_port = free_port(), free_port(), free_port()
    address = f"127.0.0.1:{port}"
    recorder = NotificationRecorder()
    generate(work, bundle_config(sim, address, am_port, prom_port, recorder.url, user or {}))
    folder = work / "bundle"
    timescale.bundle(folder, factor, anchor)
    scrape_from_files(folder / "prometheus" / "prometheus.yml", sim.targets(work / "targets", address))
    binary("prometheus-alertmanager")
    binary("prometheus")

    loop = asyncio.new_event_loop()
    started, stop = asyncio.Event(), asyncio.Event()
    server = threading.Thread(
        target=loop.run_until_complete,
        args=(serve(sim, "127.0.0.1", port, started, stop, step=min(1.0, 7.5 / factor)),),
        daemon=True,
    )
    FastPrometheus.factor = factor
    with contextlib.ExitStack() as stack:
        stack.enter_context(recorder)
        stack.enter_context(Alertmanager(folder / "alerts" / "alertmanager.yml", work, port=am_port))
        server.start()
        prom = stack.enter_context(
            FastPrometheus(folder / "prometheus" / "prometheus.yml", work, port=prom_port)
        )
        late = time.time() - start
        end = start + scenario.duration / factor
        said = time.time()
        while time.time() < end:
            time.sleep(min(5.0, max(0.0, end - time.time())))
            if not server.is_alive():
                raise RuntimeError("the fleet's HTTP server stopped during the run")
            if time.time() - said >= 60:
                said = time.time()
                behind = (said - start) * factor - sim.fleet.now
                print(
                    f"{scenario.name}: simulated {sim.fleet.now / 60:.0f} of {scenario.duration / 60:.0f} min, "
                    f"{len(recorder.records())} notifications, simulation {behind:.0f} s behind",
                    file=sys.stderr,
                    flush=True,
                )
        health = {**_health(prom, sim, start, factor), "set_up_overran_s": round(max(0.0, late), 1)}
        loop.call_soon_threadsafe(stop.set)
        server.join(timeout=30)
    # Prometheus is gone: close the connections it kept alive before the loop.
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()

    notes = notifications(recorder, start, factor)
    instances = {m.instance: m.model for m in fleet.members}
    result = score(
        scenario,
        notes,
        ROUTING,
        model_finder(scenario, instances),
        budgets={i.kind: b for i in scenario.incidents if (b := budget(i, config)) is not None},
    )
    summary = _summary(args, scenario, factor, result, health)
    (out / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "notifications.json").write_text(json.dumps([asdict(n) for n in notes], indent=1) + "\n")
    (out / "report.md").write_text(markdown(summary))
    return summary


def _health(prom: Prometheus, sim: Simulation, start: float, factor: float) -> dict:
    """Whether the run itself held its clock: Prometheus' missed evaluations and failed rules,
    how far the simulation fell behind the wall clock."""

    def total(expr: str) -> float:
        rows = prom.query(expr)
        return sum(float(r["value"][1]) for r in rows)

    return {
        "rule_evaluation_failures": total("sum(prometheus_rule_evaluation_failures_total)"),
        "rule_group_iterations_missed": total("sum(prometheus_rule_group_iterations_missed_total)"),
        "rule_group_iterations": total("sum(prometheus_rule_group_iterations_total)"),
        "simulation_behind_s": round((time.time() - start) * factor - sim.fleet.now, 1),
        "slowest_tick_wall_s": round(sim.slowest_tick, 3),
    }


def _summary(args, scenario: Scenario, factor: float, result: Score, health: dict) -> dict:
    return {
        "scenario": {"name": scenario.name, "file": str(args.scenarios), "duration_s": scenario.duration},
        "time_scale": factor,
        "engine": args.engine,
        "config": str(args.config) if args.config else None,
        "incidents": [
            {
                "id": i.id,
                "kind": i.kind,
                "expect": i.expect,
                "verdict": i.verdict,
                "ok": i.ok,
                "pages": i.pages,
                "tickets": i.tickets,
                "time_to_page_s": None if i.time_to_page is None else round(i.time_to_page, 1),
                "budget_s": None if i.budget is None else round(i.budget, 1),
                "alerts": sorted(i.alertnames),
            }
            for i in result.incidents
        ],
        "healthy": {
            "replica_seconds": result.healthy_replica_seconds,
            "pages": result.healthy_pages,
            "undeserved_pages": result.undeserved_pages,
            "pages_per_day_per_100_replicas": result.pages_per_day_per_100,
            "stray_pages": [sorted({a.get("alertname", "") for a in n.alerts}) for n in result.stray_pages],
            "stray_tickets": [
                sorted({a.get("alertname", "") for a in n.alerts}) for n in result.stray_tickets
            ],
        },
        "run": health,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.alert_quality.run", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--scenarios", default=str(HERE / "scenarios" / "day.yaml"), help="the scenario file (YAML)"
    )
    p.add_argument("--time-scale", type=float, default=10.0, help="simulated seconds per wall second")
    p.add_argument("--engine", default="gpu", help=f"the replicas' engine profile in {ENGINES.name}")
    p.add_argument(
        "--config", help="a vllm-obs config file whose knobs the bundle uses (default: production defaults)"
    )
    p.add_argument("--out", default=str(HERE / "work" / "run"), help="the output folder")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.time_scale <= 0:
        print("--time-scale must be a positive number of simulated seconds per wall second.", file=sys.stderr)
        return 2
    try:
        summary = run(args)
    except (BundleError, TraceMissing, timescale.TimeScaleError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0 if all(i["ok"] for i in summary["incidents"]) and not summary["healthy"]["pages"] else 1


if __name__ == "__main__":
    sys.exit(main())
