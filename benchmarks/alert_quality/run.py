"""Run a scenario through one or more rule sets on real Prometheus and Alertmanager servers, and
score every notification. The fleet is simulated once, on a clock --time-scale times as fast; each
rule set gets its own Prometheus, Alertmanager and webhook (benchmarks/alert_quality/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import math
import resource
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path

import numpy as np
import yaml
from vllm_obs.cli import main as vllm_obs
from vllm_obs.config import BundleConfig, build, load_config
from vllm_obs.errors import BundleError

from tests.support.monitoring import Alertmanager, Prometheus
from tests.support.notifications import NotificationRecorder, webhook_receivers
from tests.support.vllm_server import free_port

from ..fleet.exposition import CAPTURE, load_template
from . import spread, timescale, workbook
from .budgets import budgets as harm_budgets
from .canary import Canary
from .fleet import Fleet, instance_name, instance_names
from .incidents import schedule, spiked
from .replica import EngineParams
from .report import markdown, side_by_side
from .rule_sets import BEFORE, RULE_SETS, generate_before, peer_rules, use_rules
from .scenario import Scenario, load_scenario
from .scoring import Notification, Routing, Score, model_finder, score
from .serve import Simulation, serve, write_targets
from .timeline import draw
from .traces import Arrivals, TraceMissing, arrivals, load

HERE = Path(__file__).resolve().parent
ENGINES = HERE / "engines.yaml"
# The critical receiver pages. The watchdog's and those the default config discards (type none:
# `alertmanager.info`) reach nobody there, so the benchmark records them but counts none as chat.
_DISCARDED = frozenset({"info"}) if load_config(None).alertmanager.info.type == "none" else frozenset()
ROUTING = Routing(page=frozenset({"critical"}), ignore=frozenset({"watchdog"}) | _DISCARDED)
SET_UP = 3.0  # wall seconds from the Alertmanagers' start to the simulated clock's (Prometheus starts in it)


@dataclass
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
    """Each model's arrivals from its trace (lengths capped to the engine's context; an embedding
    model's requests without output), on the day's rhythm, its spikes laid over them."""
    out = []
    quiet = scenario.background
    peak = 1.0 + quiet.rhythm
    for n, model in enumerate(scenario.fleet):
        trace = load(model.trace).scaled_lengths(1, params.max_model_len)
        seed = scenario.seed * 1000 + n

        def day(t, offset=0.0):
            return quiet.load(t + offset, scenario.start_hour)

        rate = model.per_replica_rate * model.replicas
        flow = arrivals(trace, rate, scenario.duration, seed, load=day if quiet.rhythm else None, peak=peak)
        for k, incident in enumerate(scenario.incidents):
            if incident.kind == "traffic_spike" and incident.target.model == model.model:
                extra_rate = rate * (incident.params["factor"] - 1)
                shifted = (lambda t, at=incident.at: day(t, at)) if quiet.rhythm else None
                extra = arrivals(trace, extra_rate, incident.end - incident.at, seed + 100 + k, shifted, peak)
                flow = spiked(flow, extra, incident.at)
        if model.task == "embed":
            flow = Arrivals(flow.time, flow.prompt, np.zeros_like(flow.output))
        out.append((model, params, flow))
    return out


def bundle_config(instances: list[str], address: str, am: int, prom: int, recorder: str, user: dict) -> dict:
    """The bundle's configuration for this run: the user's knobs, the fleet's targets, every
    receiver pointed at the recorder."""
    config = json.loads(json.dumps(user))
    p = config.setdefault("prometheus", {})
    p["vllm_targets"] = list(instances)
    p["log_exporters"] = [{"target": address, "vllm_instance": i} for i in instances]
    p["probes"] = [address]
    p["alertmanagers"] = [f"127.0.0.1:{am}"]
    p["prometheus_targets"] = [f"127.0.0.1:{prom}"]
    config["alertmanager"] = {
        **config.get("alertmanager", {}),
        **webhook_receivers(recorder),
    }
    return config


def generate(folder: Path, config: dict, rules: str, before: str) -> None:
    """The bundle the run judges into folder/bundle: this checkout's (its rules replaced by the
    peer's for `peer`, its burn pages by the workbook's for `workbook`), or the generator's of
    commit `before`."""
    path = folder / "bundle-config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    if rules == "before":
        generate_before(before, folder / "bundle", path, CAPTURE, folder)
        return
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
        last = [line for line in said.getvalue().splitlines() if line.strip()][-1:] or [f"exit {code}"]
        raise BundleError(f"vllm-obs generate refused the run's configuration: {last[0].strip()}")
    if rules == "peer":
        use_rules(folder / "bundle", peer_rules())
    if rules == "workbook":
        workbook.apply(folder / "bundle", build(BundleConfig, config, "", "the run's configuration"))


def scrape_from_files(prometheus_yml: Path, files: dict[str, Path]) -> None:
    """The fleet's three jobs read their targets from the simulation's file_sd files (each
    replica is a path on one server), everything else of the bundle's scrape configs kept."""
    data = yaml.safe_load(prometheus_yml.read_text())
    for job in data["scrape_configs"]:
        if job["job_name"] in files:
            job.pop("static_configs", None)
            # Absolute: Prometheus reads a relative path from its configuration file's folder.
            job["file_sd_configs"] = [{"files": [str(files[job["job_name"]].resolve())]}]
    prometheus_yml.write_text(yaml.safe_dump(data, sort_keys=False))


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Prometheus is gone: cancel what the serving loop still holds (connections it kept alive),
    then close the loop. With nothing left, gather() would make its future on another loop."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


def notifications(recorder: NotificationRecorder, sim: Simulation) -> list[Notification]:
    """Every post, its times on the fleet's clock (simulated seconds from the run's start)."""
    out = []
    for note in recorder.records():
        starts = tuple(
            sim.simulated(_unix(a["startsAt"])) if a.get("status") == "firing" else None for a in note.alerts
        )
        out.append(
            Notification(
                at=sim.simulated(note.received),
                started=min((t for t in starts if t is not None), default=sim.simulated(note.received)),
                receiver=note.receiver,
                status=note.status,
                alerts=tuple(a.get("labels", {}) for a in note.alerts),
                group=note.group_key,
                resolved=tuple(a.get("labels", {}) for a in note.alerts if a.get("status") == "resolved"),
                starts=starts,
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


@dataclass
class Judge:
    """One rule set's monitoring of the shared fleet: its bundle, Alertmanager, Prometheus and
    webhook, in out/<rules>/."""

    rules: str
    folder: Path
    recorder: NotificationRecorder = field(default_factory=NotificationRecorder)
    am_port: int = field(default_factory=free_port)
    prom_port: int = field(default_factory=free_port)

    @property
    def bundle(self) -> Path:
        return self.folder / "work" / "bundle"


def rule_sets(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in RULE_SETS]
    if unknown or not names or len(set(names)) != len(names):
        raise BundleError(
            f"--rules takes a comma-separated list of distinct rule sets among {', '.join(RULE_SETS)}, "
            f"got '{text}'."
        )
    return names


def seeds_of(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds):
        raise BundleError(
            f"--seeds takes distinct whole numbers separated by commas, like 1,2,3; got '{text}'."
        )
    return seeds


def run(args: argparse.Namespace) -> list[dict[str, dict]]:
    """Every seed's figures (one run without --seeds), each a dict of rule set -> summary."""
    scenario = load_scenario(args.scenarios)
    seeds = seeds_of(args.seeds)
    params = engine(args.engine)
    names = rule_sets(args.rules)
    if "peer" in names:
        peer_rules()  # refused now, before anything is written, when ../shared lacks it
    user = _user_config(args.config)
    config = build(BundleConfig, user, "", str(args.config or "the defaults"))
    for name in ("prometheus", "prometheus-alertmanager"):
        if shutil.which(name) is None:
            raise BundleError(f"{name} is not installed; `make system-deps` installs it.")
    out = Path(args.out).resolve()
    if out.exists() and not out.is_dir():
        raise BundleError(f"--out {out} is a file; name a folder for the run's results.")
    fresh = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    factor = float(args.time_scale)
    try:
        if seeds is None:
            return [_run(args, scenario, params, names, user, config, factor, out)]
        runs = {}
        for seed in seeds:
            folder = out / f"seed-{seed}"
            folder.mkdir(exist_ok=True)
            runs[seed] = _run(args, replace(scenario, seed=seed), params, names, user, config, factor, folder)
        spread.write(out, runs)
        return list(runs.values())
    except BaseException:
        if fresh:
            shutil.rmtree(out, ignore_errors=True)  # nothing half-written is left behind
        raise


def _user_config(path: str | None) -> dict:
    """The knobs of --config (a vllm-obs config file), or none."""
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text("utf-8"))
    except OSError as exc:
        raise BundleError(f"cannot read the config file {path}: {exc.strerror}; check the path.") from None
    except yaml.YAMLError:
        raise BundleError(f"the config file {path} is not valid YAML; fix its syntax.") from None
    if data is not None and not isinstance(data, dict):
        raise BundleError(
            f"the config file {path} must be a mapping of sections, like `vllm-obs default-config` prints."
        )
    return data or {}


def _run(args, scenario, params, names, user, config, factor, out) -> dict[str, dict]:
    """One seed: every rule set on one simulation, or each on its own (--separately: the same
    seed's fleet and incidents, one Prometheus at a time), then judged together."""
    posts, health = {}, {}
    for group in [[n] for n in names] if args.separately else [names]:
        p, h = _simulate(args, scenario, params, group, user, factor, out)
        posts.update(p)
        health.update(h)
    meta = {
        "file": str(args.scenarios),
        "time_scale": factor,
        "engine": args.engine,
        "config": str(args.config) if args.config else None,
        "before": args.before,
        "seed": scenario.seed,
        "separately": bool(args.separately),
    }
    return _judge(out, scenario, config, posts, health, meta)


def _simulate(args, scenario, params, names, user, factor, out) -> tuple[dict, dict]:
    """The fleet simulated once, watched by the rule sets `names`: each one's notifications
    (written to out/<rules>/notifications.json) and the run's health."""
    flows = traffic(scenario, params)
    instances = instance_names(scenario.fleet)
    # The rules are rewritten around a fixed point of the virtual clock (timescale.py); the
    # simulated clock starts once every server is up.
    anchor = time.time()
    port = free_port()
    address = f"127.0.0.1:{port}"
    targets = write_targets(instances, out / "targets", address)
    judges = [Judge(name, out / name) for name in names]
    for j in judges:
        # A fresh start: an earlier run's Prometheus would restore its alerts' state, its
        # Alertmanager would remember what it had sent.
        shutil.rmtree(j.folder, ignore_errors=True)
        (j.folder / "work").mkdir(parents=True)
        settings = bundle_config(instances, address, j.am_port, j.prom_port, j.recorder.url, user)
        if j.rules == "before":
            settings["prometheus"].pop("prometheus_targets")  # self-monitoring came after 0b48dea
        generate(j.folder / "work", settings, j.rules, args.before)
        timescale.bundle(j.bundle, factor, anchor)
        scrape_from_files(j.bundle / "prometheus" / "prometheus.yml", targets)
    loop = asyncio.new_event_loop()
    started, stop = asyncio.Event(), asyncio.Event()
    health: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        for j in judges:
            stack.enter_context(j.recorder)
            stack.enter_context(
                Alertmanager(j.bundle / "alerts" / "alertmanager.yml", j.folder / "work", port=j.am_port)
            )
        start = time.time() + SET_UP
        cpu_start = _cpu()
        epoch = timescale.virtual_epoch(anchor, start, factor)
        fleet = Fleet(
            flows,
            started=epoch,
            seed=scenario.seed,
            template=load_template(),
            drain=True,
            background=scenario.background,
        )
        schedule(fleet, scenario)
        # A tenth of a wall second's worth of simulated time per tick at most: scrapes are
        # answered between the chunks of a fleet catching up, never after a timeout.
        sim = Simulation(
            fleet, Canary(fleet, epoch, seed=scenario.seed), start, scale=factor, chunk=factor / 10
        )
        assert list(sim.members) == instances
        server = threading.Thread(
            target=loop.run_until_complete,
            args=(serve(sim, "127.0.0.1", port, started, stop, step=min(0.5, 2.0 / factor)),),
            daemon=True,
        )
        server.start()
        proms = [
            stack.enter_context(
                FastPrometheus(
                    j.bundle / "prometheus" / "prometheus.yml",
                    j.folder / "work",
                    port=j.prom_port,
                    factor=factor,
                )
            )
            for j in judges
        ]
        late = time.time() - start
        try:
            _wait(scenario, sim, server, start, factor, judges)
        finally:
            loop.call_soon_threadsafe(stop.set)
            server.join(timeout=30)
        # The simulation has stopped: its record is read alone; Prometheus still answers.
        for j, prom in zip(judges, proms, strict=True):
            health[j.rules] = {
                **_health(prom, sim, start, factor, cpu_start),
                "set_up_overran_s": round(max(0.0, late), 1),
            }
    _close_loop(loop)

    posts = {j.rules: notifications(j.recorder, sim) for j in judges}
    for j in judges:
        notes = [asdict(n) for n in posts[j.rules]]
        (j.folder / "notifications.json").write_text(json.dumps(notes, indent=1) + "\n")
    return posts, health


def _judge(
    out: Path, scenario: Scenario, config: BundleConfig, posts: dict, health: dict, meta: dict
) -> dict:
    """Score each rule set's notifications and write the figures, the reports and the picture."""
    models = {instance_name(m.model, i): m.model for m in scenario.fleet for i in range(m.replicas)}
    budgets = harm_budgets(scenario)
    summaries = {}
    for rules, notes in posts.items():
        result = score(scenario, notes, ROUTING, model_finder(scenario, models), budgets=budgets)
        summary = _summary(meta, rules, scenario, result, health[rules])
        (out / rules / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
        (out / rules / "report.md").write_text(markdown(summary))
        summaries[rules] = summary
    (out / "report.md").write_text(side_by_side(list(summaries.values())))
    draw(scenario, posts, ROUTING, out / "timeline.png")
    return summaries


def rescore(out: Path) -> list[dict[str, dict]]:
    """Score a finished run's recorded notifications again (after a change to the scoring or the
    budgets), its scenario file, seed and configuration as the run recorded them; a run of
    several seeds seed by seed, then their spread."""
    folders = sorted(out.glob("seed-*"), key=lambda p: p.name)
    if folders:
        runs = {}
        for folder in folders:
            summaries = _rescore_one(folder)
            runs[next(iter(summaries.values()))["seed"]] = summaries
        spread.write(out, runs)
        return list(runs.values())
    return [_rescore_one(out)]


def _rescore_one(out: Path) -> dict[str, dict]:
    posts, health, meta = {}, {}, None
    for results in sorted(out.glob("*/results.json")):
        try:
            summary = json.loads(results.read_text())
            notes = json.loads((results.parent / "notifications.json").read_text())
            posts[results.parent.name] = [
                Notification(
                    **{
                        **n,
                        "alerts": tuple(n["alerts"]),
                        "resolved": tuple(n.get("resolved", ())),
                        "starts": tuple(n.get("starts", ())),
                    }
                )
                for n in notes
            ]
            health[results.parent.name] = summary["run"]
            meta = meta or {
                "file": summary["scenario"]["file"],
                "time_scale": summary["time_scale"],
                "engine": summary["engine"],
                "config": summary["config"],
                "before": summary.get("before", BEFORE),
                "seed": summary.get("seed"),
                "separately": summary.get("separately", False),
            }
        except (OSError, ValueError, KeyError, TypeError):
            raise BundleError(
                f"{results.parent} holds no complete run of benchmarks.alert_quality.run."
            ) from None
    if meta is None:
        raise BundleError(f"{out} holds no run of benchmarks.alert_quality.run (no <rules>/results.json).")
    config = build(BundleConfig, _user_config(meta["config"]), "", str(meta["config"] or "the defaults"))
    scenario = load_scenario(meta["file"])
    if meta["seed"] is not None:
        scenario = replace(scenario, seed=meta["seed"])
    meta["seed"] = scenario.seed
    return _judge(out, scenario, config, posts, health, meta)


def _wait(
    scenario: Scenario, sim: Simulation, server: threading.Thread, start: float, factor: float, judges
) -> None:
    """Until the simulation reaches the scenario's end (later than the fast clock's end when it
    fell behind: every simulated moment is judged), saying how far it is every wall minute."""
    end = start + scenario.duration / factor
    said = time.time()
    while time.time() < end or sim.fleet.now < scenario.duration:
        time.sleep(max(0.5, min(5.0, end - time.time())))
        if not server.is_alive():
            raise RuntimeError("the fleet's HTTP server stopped during the run")
        if time.time() - said >= 60:
            said = time.time()
            behind = (said - start) * factor - sim.fleet.now
            posts = ", ".join(f"{j.rules} {len(j.recorder.records())}" for j in judges)
            print(
                f"{scenario.name}: simulated {sim.fleet.now / 60:.0f} of {scenario.duration / 60:.0f} min, "
                f"notifications {posts}, simulation {behind:.0f} s behind",
                file=sys.stderr,
                flush=True,
            )


def _cpu() -> float:
    """CPU seconds this process (the simulation, its HTTP server) has used."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _health(prom: Prometheus, sim: Simulation, start: float, factor: float, cpu_start: float) -> dict:
    """Whether the run itself held its clock: Prometheus' missed evaluations and failed rules,
    how far the simulation fell behind the wall clock."""

    def total(expr: str) -> float:
        rows = prom.query(expr)
        return sum(float(r["value"][1]) for r in rows)

    wall = max(time.time() - start, 1e-9)
    return {
        # Cores each part used over the run: what a machine needs to hold this time scale.
        "simulation_cores": round((_cpu() - cpu_start) / wall, 2),
        "prometheus_cores": round(total('max(process_cpu_seconds_total{job="prometheus"})') / wall, 2),
        "rule_evaluation_failures": total("sum(prometheus_rule_evaluation_failures_total)"),
        "rule_group_iterations_missed": total("sum(prometheus_rule_group_iterations_missed_total)"),
        "rule_group_iterations": total("sum(prometheus_rule_group_iterations_total)"),
        "simulation_behind_s": round((time.time() - start) * factor - sim.fleet.now, 1),
        "simulation_most_behind_s": round(sim.behind(), 1),
        "slowest_tick_wall_s": round(sim.slowest_tick, 3),
    }


def _summary(meta: dict, rules: str, scenario: Scenario, result: Score, health: dict) -> dict:
    return {
        "scenario": {"name": scenario.name, "file": meta["file"], "duration_s": scenario.duration},
        "time_scale": meta["time_scale"],
        "rules": rules if rules != "before" else f"before ({meta['before']})",
        "before": meta["before"],
        "engine": meta["engine"],
        "config": meta["config"],
        "seed": meta["seed"],
        "separately": meta["separately"],
        "background": asdict(scenario.background),
        "incidents": [
            {
                "id": i.id,
                "kind": i.kind,
                "expect": i.expect,
                "verdict": i.verdict,
                "ok": i.ok,
                "pages": i.pages,
                "page_updates": i.page_updates,
                "tickets": i.tickets,
                "time_to_page_s": None if i.time_to_page is None else round(i.time_to_page, 1),
                "budget_s": None if i.budget is None else round(i.budget, 1),
                "shared": i.shared,
                "own_pages": i.own_pages,
                "own_tickets": i.own_tickets,
                "paged_by": sorted(i.paged_by),
                "alerts": sorted(i.alertnames),
            }
            for i in result.incidents
        ],
        "healthy": {
            "replica_seconds": result.healthy_replica_seconds,
            "pages": result.healthy_pages,
            "chat": result.healthy_chat,
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
    p.add_argument(
        "--rules",
        default="bundle",
        help="the rule sets judged on the same simulation, comma-separated: bundle (this checkout's), "
        "workbook (its burn pages as the SRE workbook writes them), before (the bundle of --before's "
        "generator), peer (vLLM PR #34638's rules)",
    )
    p.add_argument(
        "--seeds",
        help="run the scenario once per seed (comma-separated, like 1,2,3; each in out/seed-N) and write "
        "each figure's median and range to out/report.md and out/spread.json",
    )
    p.add_argument(
        "--separately",
        action="store_true",
        help="give each rule set a simulation of its own (the same seed: the same traffic and incidents), "
        "one Prometheus at a time, where several do not fit the machine",
    )
    p.add_argument("--before", default=BEFORE, help="the commit whose generator makes the `before` bundle")
    p.add_argument("--engine", default="gpu", help=f"the replicas' engine profile in {ENGINES.name}")
    p.add_argument(
        "--config", help="a vllm-obs config file whose knobs the bundle uses (default: production defaults)"
    )
    p.add_argument(
        "--rescore",
        metavar="DIR",
        help="score the notifications a finished run recorded in DIR again, and rewrite its reports",
    )
    p.add_argument("--out", default=str(HERE / "work" / "run"), help="the output folder")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not math.isfinite(args.time_scale) or args.time_scale <= 0:
        print("--time-scale must be a positive number of simulated seconds per wall second.", file=sys.stderr)
        return 2
    try:
        runs = rescore(Path(args.rescore)) if args.rescore else run(args)
    except (BundleError, TraceMissing, timescale.TimeScaleError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print((Path(args.rescore or args.out) / "report.md").read_text())
    # The exit status judges this checkout's bundle, on every seed; the other rule sets are its comparison.
    mine = [summaries["bundle"] for summaries in runs if "bundle" in summaries]
    good = all(all(i["ok"] for i in s["incidents"]) and not s["healthy"]["pages"] for s in mine)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
