#!/usr/bin/env python3
"""Benchmark: the probe's own cost, CPU time per probe and peak memory, against (a) one real vLLM
probed once a second and (b) fast_server.py as --targets targets at --rate probes per second each.
Method and figures: benchmarks/probe/README.md; timings mean something only on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tests.support.vllm_server import VllmServer, free_port  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Snapshot:
    at: float
    cpu: float  # seconds, utime + stime
    requests: float
    failures: float
    skipped: float


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15)


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def snapshot(pid: int, url: str) -> Snapshot:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    cpu, at = cpu_seconds(pid), time.monotonic()
    totals = {"requests": 0.0, "failures": 0.0, "skipped": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for key in totals:
                if sample.name == f"vllm_probe_{key}_total":
                    totals[key] += sample.value
    return Snapshot(at, cpu, **totals)


def wait_for_requests(pid: int, url: str, count: float, timeout: float = 120) -> Snapshot:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            current = snapshot(pid, url)
            if current.requests >= count:
                return current
        time.sleep(0.2)
    raise RuntimeError(f"the probe did not finish {count} probes in {timeout} s")


def measure(name: str, targets: list[str], interval: float, timeout: float, seconds: float) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    command = [
        sys.executable, "-m", "vllm_probe", "--listen", f"127.0.0.1:{port}",
        "--interval", str(interval), "--timeout", str(timeout), "--jitter", "0.1",
        *(arg for target in targets for arg in ("--target", target)),
    ]  # fmt: skip
    probe = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    try:
        start = wait_for_requests(probe.pid, url, 3 * len(targets))  # warm: imports, connections
        time.sleep(seconds)
        end = snapshot(probe.pid, url)
        peak, rss = status_kib(probe.pid, "VmHWM"), status_kib(probe.pid, "VmRSS")
    finally:
        probe.terminate()
        probe.wait(timeout=10)
    probes = end.requests - start.requests
    cpu = end.cpu - start.cpu
    elapsed = end.at - start.at
    result = {
        "name": name,
        "targets": len(targets),
        "interval": interval,
        "elapsed": elapsed,
        "probes": probes,
        "rate": probes / elapsed,
        "failures": end.failures - start.failures,
        "skipped": end.skipped - start.skipped,
        "cpu": cpu,
        "cpu_per_probe_ms": 1000 * cpu / probes,
        "cpu_share": cpu / elapsed,
        "peak_mib": peak / 1024,
        "rss_mib": rss / 1024,
    }
    print(
        f"{name}: {len(targets)} target(s) every {interval:g} s for {elapsed:.1f} s: "
        f"{probes:.0f} probes ({result['rate']:.1f}/s), {result['failures']:.0f} failed, "
        f"{result['skipped']:.0f} skipped; CPU {cpu:.2f} s = {result['cpu_per_probe_ms']:.3f} ms/probe "
        f"({100 * result['cpu_share']:.1f}% of a core); VmHWM {result['peak_mib']:.1f} MiB, "
        f"VmRSS {result['rss_mib']:.1f} MiB",
        flush=True,
    )
    return result


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-seconds", type=float, default=60)
    parser.add_argument("--fast-seconds", type=float, default=30)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--rate", type=float, default=10, help="probes per second per target (fast server)")
    parser.add_argument("--skip-vllm", action="store_true")
    args = parser.parse_args()
    print(f"load average at start: {load()} (figures are meaningful below 0.5)", flush=True)

    if not args.skip_vllm:
        work = HERE / "work"
        work.mkdir(exist_ok=True)
        with VllmServer(work / "vllm.log") as server:
            print(f"vLLM {server.url} ready in {server.started_in:.0f} s", flush=True)
            measure("real vLLM", [server.url], 1.0, 0.9, args.vllm_seconds)

    ports = [free_port() for _ in range(args.targets)]
    server = subprocess.Popen(
        [sys.executable, str(HERE / "fast_server.py"), *map(str, ports)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        interval = 1 / args.rate
        measure(
            "fast stand-in",
            [f"http://127.0.0.1:{port}" for port in ports],
            interval,
            0.9 * interval,
            args.fast_seconds,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"load average at end: {load()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
