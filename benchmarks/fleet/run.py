"""The fleet benchmark: N simulated vLLM engines and a real Prometheus with the bundle's rules,
measuring rule groups, panel queries (recorded and raw), head series, memory and alerts, with
optional rule variants and a baseline without rules (benchmarks/fleet/README.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from . import measure, report, variants
from .machine import CpuMeter, loadavg
from .panels import load_dashboards, panel_queries, recording_rules
from .prometheus import Prometheus, free_port, write_config

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRAPE_INTERVAL_S = 15


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S ") + message, flush=True)


def duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    if not text or text[-1] not in units:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 5m or 1h")
    return float(text[:-1]) * units[text[-1]]


def export_generator(out: Path, commit: str) -> Path:
    """The generator as committed at `commit`, so that uncommitted edits in this checkout
    do not end up in the measured bundle."""
    target = out / "generator-src"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", commit, "generator"], cwd=REPO, check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target / "generator"


def generate_bundle(out: Path, address: str, commit: str) -> Path:
    config = out / "vllm-obs.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "prometheus": {
                    "vllm_job": "vllm",
                    "vllm_targets": [address],
                    "log_exporters": [],
                    "alertmanagers": [],
                    "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                    "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
                }
            }
        )
    )
    bundle = out / "bundle"
    shutil.rmtree(bundle, ignore_errors=True)
    source = export_generator(out, commit)
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from vllm_obs.cli import main; sys.exit(main())",
            "generate",
            "--vllm-version",
            "0.32.0",
            "--config",
            str(config),
            "--out",
            str(bundle),
        ],
        check=True,
        env={**os.environ, "PYTHONPATH": str(source)},
    )
    return bundle


def start_simulator(out: Path, engines: int, unhealthy: int, seed: int, port: int) -> subprocess.Popen:
    (out / "fleet.json").unlink(missing_ok=True)
    with (out / "simulator.log").open("wb") as log_file:
        process = _popen_simulator(out, engines, unhealthy, seed, port, log_file)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"the simulator exited with {process.returncode}: {(out / 'simulator.log').read_text()[-2000:]}"
            )
        if (out / "fleet.json").exists() and "serving" in (out / "simulator.log").read_text():
            return process
        time.sleep(0.2)
    raise RuntimeError("the simulator did not start in 60 s")


def _popen_simulator(
    out: Path, engines: int, unhealthy: int, seed: int, port: int, log_file
) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.fleet.simulator",
            "--engines",
            str(engines),
            "--port",
            str(port),
            "--unhealthy",
            str(unhealthy),
            "--seed",
            str(seed),
            "--targets",
            str(out / "targets.json"),
            "--manifest",
            str(out / "fleet.json"),
        ],
        cwd=REPO,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )


def wait_for_load(limit: float) -> None:
    while loadavg()[0] >= limit:
        log(f"load {loadavg()[0]:.2f} >= {limit}: waiting for a quieter machine")
        time.sleep(60)


def wait_for_targets(prom: Prometheus, engines: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        up, total = prom.targets_up()
        if total == engines and up == engines:
            return
        time.sleep(2)
    raise RuntimeError(f"only {prom.targets_up()} of {engines} targets up after {timeout}s")


def first_instance(targets: Path) -> str:
    """The replica a dashboard without an All instance opens on: Grafana's first value of the
    variable (sorted alphabetically)."""
    return min(group["labels"]["instance"] for group in json.loads(targets.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--engines", type=int, required=True)
    parser.add_argument(
        "--minutes", type=float, required=True, help="how long the main run scrapes and evaluates"
    )
    parser.add_argument(
        "--range", dest="range_", type=duration, default=duration("1h"), help="dashboard range (default 1h)"
    )
    parser.add_argument(
        "--step", type=duration, default=duration("15s"), help="query_range step (default 15s)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="times each panel query is timed (median)")
    parser.add_argument(
        "--warmup-minutes",
        type=float,
        default=6,
        help="evaluations ignored at the start (rate windows filling)",
    )
    parser.add_argument(
        "--baseline-minutes", type=float, default=0, help="then scrape without rules this long (0: skip)"
    )
    parser.add_argument(
        "--variants",
        default="",
        help=f"comma-separated rule variants, or 'all': {', '.join(variants.VARIANTS)}",
    )
    parser.add_argument("--variant-minutes", type=float, default=8)
    parser.add_argument(
        "--quiet-cores",
        type=float,
        default=0.3,
        help="figures are kept from moments when other work used fewer cores than this (default 0.3)",
    )
    parser.add_argument(
        "--max-quiet-wait",
        type=float,
        default=60,
        help="seconds to wait for such a moment before each query",
    )
    parser.add_argument(
        "--quiet-wait-budget",
        type=float,
        default=2700,
        help="seconds of such waiting in all (default 45 min)",
    )
    parser.add_argument(
        "--skip-raw",
        action="store_true",
        help="time the panel queries only as written, not their raw-series versions (the raw SLO windows take minutes)",
    )
    parser.add_argument("--unhealthy", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--port", type=int, default=0, help="simulator port (default: a free one)")
    parser.add_argument(
        "--wait-for-load", type=float, default=0, help="wait until the 1-min load is below this first"
    )
    parser.add_argument(
        "--generator-commit", default="HEAD", help="generate the bundle from this commit (default HEAD)"
    )
    parser.add_argument(
        "--vllm-dashboards",
        type=Path,
        default=REPO.parent / "shared" / "reference" / "vllm-dashboards",
        help="vLLM's own Grafana dashboards (*.json) to time beside the bundle's (default ../shared/reference/vllm-dashboards)",
    )
    parser.add_argument(
        "--vllm-all",
        choices=("values", "wildcard"),
        default="values",
        help="their variables at All: every value in one regex, as Grafana sends it without a custom all value (default), or .*",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    chosen = list(variants.VARIANTS) if args.variants == "all" else [v for v in args.variants.split(",") if v]
    unknown = [v for v in chosen if v not in variants.VARIANTS]
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}; choose from {', '.join(variants.VARIANTS)}")
    args.vllm_dashboards = vllm_dashboards(args.vllm_dashboards)
    if args.range_ > args.minutes * 60:
        log(f"note: --range {args.range_:.0f}s is longer than the run; the start of the range has no data")

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    port = args.port or free_port()
    address = f"127.0.0.1:{port}"
    commit = subprocess.run(
        ["git", "rev-parse", args.generator_commit], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()
    bundle = generate_bundle(out, address, commit)
    rule_files = sorted((bundle / "alerts").glob("*.rules.yml"))
    if args.wait_for_load:
        wait_for_load(args.wait_for_load)
    results: dict = {
        "engines": args.engines,
        "minutes": args.minutes,
        "range_s": args.range_,
        "step_s": args.step,
        "repeats": args.repeats,
        "rate_interval": f"{4 * SCRAPE_INTERVAL_S}s",
        "quiet_cores": args.quiet_cores,
        "generator_commit": commit,
        "load_at_start": loadavg(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "prometheus_version": subprocess.run(
            ["prometheus", "--version"], capture_output=True, text=True
        ).stdout.split("\n")[0],
    }
    simulator = start_simulator(out, args.engines, args.unhealthy, args.seed, port)
    manifest = json.loads((out / "fleet.json").read_text())
    try:
        run_main(out, bundle, rule_files, args, simulator, manifest, chosen, results)
        if args.baseline_minutes:
            # Last: memory is what it is for, and memory cares less than timing about a
            # machine that got busy meanwhile.
            results["baseline"] = run_baseline(out, bundle, args, simulator)
    finally:
        simulator.terminate()
        simulator.wait(timeout=30)
    results["load_at_end"] = loadavg()
    save(out, results)
    (out / "summary.md").write_text(report.summary(results))
    log(f"wrote {out / 'results.json'} and {out / 'summary.md'}")
    ok = results["alerts"]["ok"] and all(e["matching"] == e["series"] for e in results["equivalence"])
    return 0 if ok else 1


def vllm_dashboards(directory: Path) -> Path | None:
    """The directory of vLLM's dashboards when it holds any, else None (said in one line); a file
    there that is no dashboard stops the run before anything starts."""
    directory = directory.resolve()
    if not directory.is_dir() or not any(directory.glob("*.json")):
        log(f"no vLLM dashboards in {directory}: the comparison with vLLM's own dashboards is skipped")
        return None
    try:
        load_dashboards(directory)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    return directory


def save(out: Path, results: dict) -> None:
    staged = out / "results.json.tmp"
    staged.write_text(json.dumps(results, indent=1, default=_json_default))
    staged.replace(out / "results.json")


def _json_default(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(type(value))


def run_baseline(out: Path, bundle: Path, args, simulator: subprocess.Popen) -> dict:
    log(f"baseline: Prometheus without rule files for {args.baseline_minutes} min")
    workdir = out / "prometheus-baseline"
    workdir.mkdir(parents=True, exist_ok=True)
    config = write_config(
        workdir / "prometheus.yml", bundle / "prometheus" / "prometheus.yml", out / "targets.json", []
    )
    timeline: list[measure.Sample] = []
    with Prometheus(config, workdir) as prom:
        started = time.time()
        wait_for_targets(prom, args.engines)
        meter = CpuMeter((prom.process.pid, simulator.pid))
        measure.watch(
            prom, meter, args.baseline_minutes * 60 - (time.time() - started), timeline, None, 0, started, log
        )
        head = measure.head_breakdown(prom)
    return {"timeline": measure.as_dicts(timeline), "head": head}


def run_main(
    out: Path,
    bundle: Path,
    rule_files: list[Path],
    args,
    simulator,
    manifest,
    chosen: list[str],
    result: dict,
) -> None:
    """Fills `result` as it goes, saving it after each phase (a long run that fails late
    keeps what it measured)."""
    workdir = out / "prometheus"
    workdir.mkdir(parents=True, exist_ok=True)
    config = write_config(
        workdir / "prometheus.yml", bundle / "prometheus" / "prometheus.yml", out / "targets.json", rule_files
    )
    rules = recording_rules(rule_files)
    queries = bundle_queries(bundle, rules, args.range_, args.step, out / "targets.json")
    timeline: list[measure.Sample] = []
    evaluations = measure.Evaluations()
    with Prometheus(config, workdir) as prom:
        started = time.time()
        log(f"main run: Prometheus with the bundle's rules for {args.minutes} min, {args.engines} engines")
        wait_for_targets(prom, args.engines)
        meter = CpuMeter((prom.process.pid, simulator.pid))
        measure.watch(
            prom,
            meter,
            args.minutes * 60 - (time.time() - started),
            timeline,
            evaluations,
            started + args.warmup_minutes * 60,
            started,
            log,
        )
        result["rule_evaluation"] = evaluations.summary(measure.quiet_at(timeline, args.quiet_cores))
        result["alerts"] = measure.check_alerts(prom, manifest["expected_alerts"], settled=args.minutes >= 25)
        log(
            f"alerts: ok={result['alerts']['ok']} missing={result['alerts']['missing']} unexpected={result['alerts']['unexpected']}"
        )
        result["head"] = measure.head_breakdown(prom)
        log(
            f"head: {result['head']['recorded_series']:.0f} recorded of {result['head']['live_series']:.0f} live series"
        )
        result["equivalence"] = measure.check_equivalence(prom, queries, rules)
        bad = [e for e in result["equivalence"] if e["matching"] != e["series"]]
        log(
            f"equivalence: {len(result['equivalence']) - len(bad)} of {len(result['equivalence'])} panel queries answer alike"
        )
        log(
            f"dashboards: {len(queries)} panel queries over {args.range_:.0f}s, step {args.step:.0f}s, {args.repeats} repeats"
        )
        save(out, result)
        order = queries
        skipped: list[dict] = []
        if args.vllm_dashboards is not None:
            theirs, skipped = vllm_queries(prom, args, queries)
            order = measure.interleave(queries, [q for q in theirs if not _in(q, skipped)])
            log(
                f"vLLM's dashboards: {len(theirs)} panel queries, {sum(s['source'] == 'vllm' for s in skipped)} of them read "
                f"metrics this fleet does not expose (not timed); timed interleaved with the bundle's"
            )
            result["vllm"] = vllm_summary(args, theirs, skipped)
        load_before = loadavg()
        phase = CpuMeter((prom.process.pid, simulator.pid))
        phase_started = time.monotonic()
        rows = measure.time_panels(
            prom,
            order,
            args.range_,
            args.step,
            args.repeats,
            meter,
            args.quiet_cores,
            args.max_quiet_wait,
            args.quiet_wait_budget,
            log,
            raw=not args.skip_raw,
        )
        result["panels"] = [r for r in rows if r["source"] == "bundle"]
        if args.vllm_dashboards is not None:
            result["vllm"]["panels"] = [r for r in rows if r["source"] == "vllm"]
            result["comparison"] = measure.comparison(rows, skipped)
        result["dashboards"] = measure.dashboard_totals(result["panels"])
        busy, ours = phase.reading()
        result["dashboards_load"] = {
            "before": load_before,
            "after": loadavg(),
            "seconds": time.monotonic() - phase_started,
            "busy_cores": busy,
            "ours_cores": ours,
        }
        result["timeline"] = measure.as_dicts(timeline)
        save(out, result)
        result["variants"] = {}
        for name in chosen:
            result["variants"][name] = run_variant(
                out, name, bundle, rule_files, prom, config, meter, args, queries
            )
            save(out, result)


def bundle_queries(bundle: Path, rules: dict, range_s: float, step_s: float, targets: Path) -> list:
    """The bundle's panel queries as its dashboards open over `range_s` (one replica's on the first)."""
    return panel_queries(
        bundle / "dashboards",
        rules,
        f"{4 * SCRAPE_INTERVAL_S}s",
        f"{int(range_s)}s",
        f"{int(step_s)}s",
        first={"$instance": first_instance(targets)},
    )


def vllm_summary(args, theirs: list, skipped: list[dict]) -> dict:
    """What results.json says of vLLM's dashboards: where from, their All, the queries set apart."""
    return {
        "dir": str(args.vllm_dashboards),
        "all": args.vllm_all,
        "queries": len(theirs),
        "skipped": [s for s in skipped if s["source"] == "vllm"],
        "bundle_skipped": [s for s in skipped if s["source"] == "bundle"],
    }


def vllm_queries(prom: Prometheus, args, ours: list, end: float | None = None) -> tuple[list, list[dict]]:
    """vLLM's panel queries as they open on this fleet (their All is every value Prometheus holds
    over the range before `end`, now, unless --vllm-all wildcard), and which queries of either side
    read a metric the fleet does not expose."""
    end = end or time.time()

    def values(match: str, label: str) -> list[str]:
        return prom.label_values(label, match, end - args.range_, end)

    theirs = panel_queries(
        args.vllm_dashboards,
        {},
        f"{4 * SCRAPE_INTERVAL_S}s",
        f"{int(args.range_)}s",
        f"{int(args.step)}s",
        label_values=values if args.vllm_all == "values" else None,
        source="vllm",
    )
    names = set(prom.label_values("__name__"))
    return theirs, measure.unexposed(ours + theirs, names)


def _in(q, skipped: list[dict]) -> bool:
    return any(
        (s["source"], s["dashboard"], s["panel"], s["ref"], s["expr"]) == (q.source, q.dashboard, q.panel, q.ref, q.expr)
        for s in skipped
    )


def run_variant(out, name, bundle, rule_files, prom, config, meter, args, queries) -> dict:
    log(f"variant {name}: {variants.VARIANTS[name]}")
    files = variants.write(name, rule_files, out / "variants" / name)
    write_config(config, bundle / "prometheus" / "prometheus.yml", out / "targets.json", files)
    prom.reload()
    reloaded = time.time()
    evaluations = measure.Evaluations()
    timeline: list[measure.Sample] = []
    # The first evaluations after a reload are of a cold group; skip a minute.
    measure.watch(prom, meter, args.variant_minutes * 60, timeline, evaluations, reloaded + 60, reloaded, log)
    rules = recording_rules(rule_files)
    recorded = variants.recorded_names(files)
    counts = {n: int(prom.scalar(f"count({{__name__={json.dumps(n)}}})")) for n in recorded}
    return {
        "description": variants.VARIANTS[name],
        "rule_files": [str(f) for f in files],
        "rule_evaluation": evaluations.summary(measure.quiet_at(timeline, args.quiet_cores)),
        "recorded_series": sum(counts.values()),
        "recorded_by_name": counts,
        "equivalence": measure.check_equivalence(prom, [q for q in queries if q.uses_recording_rules], rules),
        "timeline": measure.as_dicts(timeline),
    }


if __name__ == "__main__":
    sys.exit(main())
