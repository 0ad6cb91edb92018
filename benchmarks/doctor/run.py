"""How long `vllm-obs doctor` takes on a Prometheus holding a fleet of vLLM targets: the bundle, the
fleet simulator, a real Alertmanager and Prometheus, then the doctor timed --repeats times once every
target is up. OUT/results.json holds every run (benchmarks/doctor/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from benchmarks.fleet.machine import loadavg
from benchmarks.fleet.prometheus import Prometheus, binary, free_port, write_config

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRAPE_INTERVAL = "15s"


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S ") + message, flush=True)


def vllm_obs(*args: str, **kwargs) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("vllm-obs")
    return subprocess.run([str(script), *args], cwd=REPO, capture_output=True, text=True, **kwargs)


def generate_bundle(out: Path, simulator: str, alertmanager: str) -> Path:
    config = out / "vllm-obs.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "prometheus": {
                    "vllm_targets": [simulator],
                    "log_exporters": [],
                    "probes": [],
                    "alertmanagers": [alertmanager],
                    "scrape_interval": SCRAPE_INTERVAL,
                    "evaluation_interval": SCRAPE_INTERVAL,
                }
            }
        )
    )
    bundle = out / "bundle"
    result = vllm_obs("generate", "--vllm-version", "0.32.0", "--config", str(config), "--out", str(bundle))
    if result.returncode != 0:
        raise RuntimeError(f"vllm-obs generate failed: {result.stderr}")
    return bundle


def prometheus_config(out: Path, bundle: Path) -> Path:
    """The bundle's prometheus.yml with the vLLM targets from the simulator's file_sd file."""
    path = write_config(
        out / "prometheus.yml",
        bundle / "prometheus" / "prometheus.yml",
        out / "targets.json",
        sorted((bundle / "alerts").glob("*.rules.yml")),
    )
    config = yaml.safe_load(path.read_text())
    config["alerting"] = yaml.safe_load((bundle / "prometheus" / "prometheus.yml").read_text())["alerting"]
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start(command: list[str], log_path: Path) -> subprocess.Popen:
    with log_path.open("wb") as sink:
        return subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)


def wait_http(url: str, process: subprocess.Popen, what: str, timeout: float = 120) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{what} not ready in {timeout}s")


def wait_for_targets(prom: Prometheus, engines: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        up, total = prom.targets_up()
        if total == engines and up == engines:
            return
        time.sleep(2)
    raise RuntimeError(f"only {prom.targets_up()} of {engines} targets up after {timeout}s")


def run_doctor(prom: Prometheus, am_url: str, bundle: Path) -> dict:
    load = loadavg()
    started = time.monotonic()
    result = vllm_obs(
        "doctor",
        "--prometheus",
        prom.url,
        "--alertmanager",
        am_url,
        "--bundle",
        str(bundle),
        "--json",
        timeout=600,
    )
    wall = time.monotonic() - started
    if result.returncode not in (0, 1):
        raise RuntimeError(f"the doctor could not run: {result.stderr}")
    report = json.loads(result.stdout)
    return {
        "wall_s": round(wall, 3),
        "exit_code": result.returncode,
        "failures": report["verdict"]["failures"],
        "warnings": report["verdict"]["warnings"],
        "timings_s": report["timings_seconds"],
        "requests": report["requests"],
        "load_before": load,
        "failing": [f"{c['subject']}: {c['message']}" for c in report["checks"] if c["status"] == "fail"],
        "warning": [f"{c['subject']}: {c['message']}" for c in report["checks"] if c["status"] == "warn"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.doctor.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--engines", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--warmup", type=float, default=120, help="seconds after all targets are up (default 120)"
    )
    parser.add_argument("--unhealthy", type=int, default=1, help="unhealthy engines of each kind (default 1)")
    parser.add_argument(
        "--wait-for-load",
        type=float,
        default=0,
        help="before each doctor run, wait until the 1-minute load is below",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    sim_port, am_port = free_port(), free_port()
    bundle = generate_bundle(out, f"127.0.0.1:{sim_port}", f"127.0.0.1:{am_port}")
    processes: list[subprocess.Popen] = []
    prom = None
    try:
        log(f"simulator: {args.engines} engines on port {sim_port}")
        simulator = start(
            [
                sys.executable, "-m", "benchmarks.fleet.simulator", "--engines", str(args.engines),
                "--port", str(sim_port), "--unhealthy", str(args.unhealthy), "--targets", str(out / "targets.json"),
            ],
            out / "simulator.log",
        )  # fmt: skip
        processes.append(simulator)
        wait_http(f"http://127.0.0.1:{sim_port}/health", simulator, "the simulator")
        am = start(
            [
                binary("prometheus-alertmanager"), f"--config.file={bundle / 'alerts' / 'alertmanager.yml'}",
                f"--storage.path={out / 'alertmanager-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ],
            out / "alertmanager.log",
        )  # fmt: skip
        processes.append(am)
        am_url = f"http://127.0.0.1:{am_port}"
        wait_http(am_url + "/-/ready", am, "Alertmanager")
        prom = Prometheus(prometheus_config(out, bundle), out / "prometheus").start()
        log("waiting for every target to be up")
        wait_for_targets(prom, args.engines)
        log(f"all {args.engines} targets up; warming up {args.warmup:g} s")
        time.sleep(args.warmup)
        runs = []
        for i in range(args.repeats):
            while args.wait_for_load and loadavg()[0] >= args.wait_for_load:
                log(f"load {loadavg()[0]:.2f} >= {args.wait_for_load}: waiting")
                time.sleep(30)
            run = run_doctor(prom, am_url, bundle)
            runs.append(run)
            log(
                f"run {i + 1}: {run['wall_s']:.1f} s (exit {run['exit_code']}, {run['failures']} failures, "
                f"{run['warnings']} warnings, load {run['load_before'][0]:.2f}, "
                f"{run['requests']['prometheus']} requests to Prometheus); "
                + ", ".join(f"{k} {v:.1f}" for k, v in run["timings_s"].items())
            )
        walls = [r["wall_s"] for r in runs]
        results = {
            "engines": args.engines,
            "scrape_interval": SCRAPE_INTERVAL,
            "head_series": prom.own_metrics().get("prometheus_tsdb_head_series", 0.0),
            "cpus": os.cpu_count(),
            "runs": runs,
            "wall_s": {"median": statistics.median(walls), "min": min(walls), "max": max(walls)},
        }
        (out / "results.json").write_text(json.dumps(results, indent=1))
        log(
            f"doctor on {args.engines} targets ({results['head_series']:.0f} head series): median "
            f"{results['wall_s']['median']:.1f} s, min {results['wall_s']['min']:.1f} s, max {results['wall_s']['max']:.1f} s"
        )
    finally:
        if prom:
            prom.stop()
        for process in processes:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
