"""The SLO rules' steady-state cost: days of history for the series they read, backfilled with
promtool, then the SLO groups timed alone on a Prometheus that scrapes nothing (an hour-long run
holds an hour, so its 2h to 3d windows cost far less than after days).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from . import measure, variants
from .fleet import plan
from .load_model import load_profiles, resolve_profile
from .machine import CpuMeter, loadavg
from .prometheus import Prometheus, binary

STEP_S = 15
AVAILABILITY = "vllm_request_availability"
SIGNALS = {
    # signal: (histogram, SLO threshold from the default vllm-obs.yml)
    "vllm_time_to_first_token_seconds": ("vllm:time_to_first_token_seconds", "2.5"),
    "vllm_inter_token_latency_seconds": ("vllm:inter_token_latency_seconds", "0.2"),
}


def write_openmetrics(path: Path, engines: int, days: float, end: float, seed: int = 1) -> dict:
    """Counters of every engine from `end - days` to `end`; returns the per-model 5m rates."""
    profiles = load_profiles()
    members = plan(engines, profiles, seed=seed)
    steps = int(days * 86400 / STEP_S)
    stamps = end - STEP_S * np.arange(steps)[::-1]
    rng = np.random.default_rng(seed)
    per_model: dict[tuple[str, str, str], np.ndarray] = {}
    with path.open("w") as out:
        for signal, (histogram, threshold) in SIGNALS.items():
            for m in members:
                p = resolve_profile(profiles, m.model, m.condition)
                if signal.startswith("vllm_time_to_first_token"):
                    per_step = rng.poisson(p.rate * STEP_S, size=steps)
                    good_share = p.dists["vllm:time_to_first_token_seconds"].cdf(float(threshold))
                else:
                    per_step = rng.poisson(p.rate * STEP_S * p.generation.mean, size=steps)
                    good_share = p.itl.cdf(float(threshold))
                if m.condition == "stalled":
                    per_step[:] = 0
                good = rng.binomial(per_step, good_share)
                labels = f'engine="0",instance="{m.instance}",job="vllm",model_name="{m.model}"'
                for name, increments in (
                    (f"{histogram}_count{{{labels}}}", per_step),
                    (f'{histogram}_bucket{{{labels},le="{threshold}"}}', good),
                ):
                    values = np.cumsum(increments)
                    out.write(
                        "".join(
                            f"{name} {v} {t:.0f}\n"
                            for v, t in zip(values.tolist(), stamps.tolist(), strict=True)
                        )
                    )
                for kind, increments in (("total", per_step), ("good", good)):
                    key = (signal, m.model, kind)
                    per_model[key] = per_model.get(key, 0) + increments
        # What the SLO groups record: sum by (job, model_name) (rate(...[5m])), every 15 s.
        window = 300 // STEP_S

        def rate5m(increments: np.ndarray) -> np.ndarray:
            return np.convolve(increments, np.ones(window), mode="full")[: len(increments)] / 300.0

        recorded: dict[tuple[str, str, str], np.ndarray] = {}
        for (signal, model, kind), increments in per_model.items():
            if kind == "total":
                recorded[(signal, model, "total")] = rate5m(increments)
                recorded[(signal, model, "bad")] = rate5m(increments - per_model[(signal, model, "good")])
                if signal == "vllm_time_to_first_token_seconds":  # one first token per request
                    recorded[(AVAILABILITY, model, "total")] = recorded[(signal, model, "total")]
                    recorded[(AVAILABILITY, model, "bad")] = np.zeros(len(increments))
        for (signal, model, kind), rates in sorted(recorded.items()):
            name = f'job_model:{signal}:slo_{kind}_rate5m{{job="vllm",model_name="{model}"}}'
            out.write(
                "".join(
                    f"{name} {v!r} {t:.0f}\n" for v, t in zip(rates.tolist(), stamps.tolist(), strict=True)
                )
            )
        out.write("# EOF\n")
    return {"series": len(members) * 4 + len(recorded), "samples_per_series": steps}


def slo_rule_files(bundle_rules: list[Path], outdir: Path) -> list[Path]:
    """A file holding only the bundle's SLO groups."""
    groups = [
        g
        for f in bundle_rules
        for g in yaml.safe_load(f.read_text())["groups"]
        if g["name"].startswith(variants.SLO_GROUP_PREFIX) and variants.is_recording(g)
    ]
    target = outdir / "slo.rules.yml"
    target.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=200))
    return [target]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet.backfill", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--engines", type=int, required=True)
    parser.add_argument("--days", type=float, default=3)
    parser.add_argument("--minutes", type=float, default=5, help="how long each SLO group is timed")
    parser.add_argument(
        "--bundle", type=Path, required=True, help="a bundle from `benchmarks.fleet.run` (OUT/bundle)"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = out / "prometheus" / "data"
    end = time.time() - 60
    text = out / "history.om"
    began = time.time()
    shape = write_openmetrics(text, args.engines, args.days, end)
    written = time.time() - began
    subprocess.run(["rm", "-rf", str(data)], check=True)
    data.mkdir(parents=True)
    began = time.time()
    subprocess.run(
        [
            binary("promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=24h",
            str(text),
            str(data),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    backfilled = time.time() - began
    text.unlink()
    results = {
        "engines": args.engines,
        "days": args.days,
        **shape,
        "write_s": written,
        "backfill_s": backfilled,
        "load_at_start": loadavg(),
    }
    files = slo_rule_files(sorted((args.bundle / "alerts").glob("*.rules.yml")), out)
    config = out / "prometheus" / "prometheus.yml"
    config.write_text(
        yaml.safe_dump({"global": {"evaluation_interval": "15s"}, "rule_files": [str(f) for f in files]})
    )
    with Prometheus(config, out / "prometheus") as prom:
        started = time.time()
        evaluations = measure.Evaluations()
        meter = CpuMeter((prom.process.pid,))
        timeline: list[measure.Sample] = []
        measure.watch(prom, meter, args.minutes * 60, timeline, evaluations, started + 60, started)
        results["current"] = {
            "rule_evaluation": evaluations.summary(),
            "values": {
                r["metric"]["__name__"] + "/" + r["metric"]["model_name"]: float(r["value"][1])
                for r in prom.query('{__name__=~"job_model:.*:slo_miss_ratio_(5m|1h|3d)"}')
            },
            "timeline": measure.as_dicts(timeline),
        }
    results["load_at_end"] = loadavg()
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    groups = results["current"]["rule_evaluation"]["all"]["groups"]
    print({g: f"{v['median_s'] * 1000:.0f} ms" for g, v in groups.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
