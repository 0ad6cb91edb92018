"""Time a finished run's panel queries again, the bundle's and vLLM's interleaved, on its stored
TSDB over the last hour of its fleet: the comparison a run could not make live. This Prometheus
scrapes and evaluates nothing, so both sides read the same stored series on an otherwise idle server.
"""

from __future__ import annotations

import argparse
import calendar
import json
import sys
import time
from pathlib import Path

import yaml

from . import measure, report
from .machine import CpuMeter, loadavg
from .panels import recording_rules
from .prometheus import Prometheus
from .run import REPO, SCRAPE_INTERVAL_S, _in, bundle_queries, log, save, vllm_dashboards, vllm_queries
from .run import vllm_summary


def fleet_end(results: dict) -> float:
    """When the run's fleet stopped being scraped: its start plus its minutes (epoch seconds)."""
    started = calendar.timegm(time.strptime(results["started"], "%Y-%m-%d %H:%M:%S UTC"))
    return started + results["minutes"] * 60


def retime(run: Path, args) -> dict:
    results = json.loads((run / "results.json").read_text())
    bundle = run / "bundle"
    rules = recording_rules(sorted((bundle / "alerts").glob("*.rules.yml")))
    range_s, step_s, end = results["range_s"], results["step_s"], fleet_end(results)
    ours = bundle_queries(bundle, rules, range_s, step_s, run / "targets.json")
    workdir = run / "prometheus"
    config = workdir / "retime.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s"}}))
    args.range_, args.step = range_s, step_s
    with Prometheus(config, workdir) as prom:
        theirs, skipped = vllm_queries(prom, args, ours, end=end)
        order = measure.interleave(ours, [q for q in theirs if not _in(q, skipped)])
        log(f"retiming the bundle's {len(ours)} and vLLM's {len(theirs)} panel queries, {args.repeats} repeats")
        meter, phase = CpuMeter((prom.process.pid,)), CpuMeter((prom.process.pid,))
        load_before, started = loadavg(), time.monotonic()
        quiet = (args.quiet_cores, args.max_quiet_wait, args.quiet_wait_budget)
        rows = measure.time_panels(
            prom, order, range_s, step_s, args.repeats, meter, *quiet, log, raw=False, until=end
        )
        busy, ours_cores = phase.reading()
    return {
        **{k: results[k] for k in ("engines", "minutes", "range_s", "step_s", "rate_interval")},
        "generator_commit": results["generator_commit"],
        "retimed_from": str(run),
        "retimed": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "repeats": args.repeats,
        "dashboards_load": {
            "before": load_before,
            "after": loadavg(),
            "seconds": time.monotonic() - started,
            "busy_cores": busy,
            "ours_cores": ours_cores,
        },
        "vllm": {**vllm_summary(args, theirs, skipped), "panels": [r for r in rows if r["source"] == "vllm"]},
        "panels": [r for r in rows if r["source"] == "bundle"],
        "comparison": measure.comparison(rows, skipped),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "run", type=Path, help="a finished run's --out folder (its results.json, bundle and prometheus/)"
    )
    parser.add_argument(
        "--vllm-dashboards",
        type=Path,
        default=REPO.parent / "shared" / "reference" / "vllm-dashboards",
        help="vLLM's own Grafana dashboards (*.json; default ../shared/reference/vllm-dashboards)",
    )
    parser.add_argument("--vllm-all", choices=("values", "wildcard"), default="values")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--quiet-cores", type=float, default=0.3, help="figures are kept from moments when other work used fewer cores"
    )
    parser.add_argument(
        "--max-quiet-wait", type=float, default=10, help="seconds to wait for such a moment before each query"
    )
    parser.add_argument("--quiet-wait-budget", type=float, default=300, help="seconds of such waiting in all")
    args = parser.parse_args(argv)
    if not (args.run / "results.json").is_file() or not (args.run / "prometheus" / "data").is_dir():
        print(
            f"retime: {args.run} holds no finished run (results.json and prometheus/data); "
            "name a run's --out folder."
        )
        return 2
    args.vllm_dashboards = vllm_dashboards(args.vllm_dashboards)
    if args.vllm_dashboards is None:
        return 2
    out = args.run / "retime"
    out.mkdir(exist_ok=True)
    result = retime(args.run, args)
    save(out, result)
    heading = "### Against vLLM's own dashboards (retimed)\n\n"
    (out / "summary.md").write_text(heading + report.comparison_section(result))
    log(f"wrote {out / 'results.json'} and {out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
