#!/usr/bin/env python3
"""Benchmark: `vllm-log-exporter --once` against `mtail --one_shot`, side by side.
Builds 1M-line logs from captured vLLM lines (clustered, spread, shuffled) and a 256 MiB line, runs
both tools and reports wall time, CPU time and peak RSS (benchmarks/log_exporter/README.md).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CAPTURES = REPO / "tests" / "fixtures" / "logs"
WORK = HERE / "work"
MTAIL = Path("/usr/bin/mtail")
GNU_TIME = Path("/usr/bin/time")

ACCESS = re.compile(rb'^\S*INFO:\s+\S+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}')
STATS = re.compile(rb"Avg prompt throughput: ")
STARTUP_COMPLETE = b"Application startup complete."
STATS_EVERY = 5  # every 5th traffic line is a stats line: 20% of the log
TRAFFIC_LINES = (17_000, 33_000)  # per server session: other lines make about 1% of the log


def lines_of(data: bytes) -> list[bytes]:
    """Lines ending in b"\\n" (bytes.splitlines would also split at the \\r of progress bars)."""
    lines = [line + b"\n" for line in data.split(b"\n")]
    return lines[:-1] if data.endswith(b"\n") else lines


def split_capture(lines: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """(startup lines up to readiness, ending after the steady traffic)."""
    ready = next((i for i, line in enumerate(lines) if STARTUP_COMPLETE in line), None)
    if ready is None:
        return lines, []
    rest = lines[ready + 1 :]
    first_other = next(
        (i for i, line in enumerate(rest) if not (ACCESS.match(line) or STATS.search(line))),
        len(rest),
    )
    # The ending keeps the access lines that follow the incident (the 500s after a death).
    return lines[: ready + 1], rest[first_other:]


def build_input(path: Path, total_lines: int, seed: int = 20261129) -> dict[str, int]:
    captures = {p.stem: lines_of(p.read_bytes()) for p in sorted(CAPTURES.glob("vllm-*.log"))}
    access_ok, access_err, stats = [], [], []
    for lines in captures.values():
        for line in lines:
            if ACCESS.match(line):
                (access_err if b'" 5' in line else access_ok).append(line)
            elif STATS.search(line):
                stats.append(line)
    error_rate = len(access_err) / max(1, len(access_ok) + len(access_err))
    sessions = [
        "vllm-0.32.0-cpu-normal",
        "vllm-0.32.0-cpu-engine-killed",
        "vllm-0.32.0-cpu-normal",
        "vllm-0.32.0-cpu-runtime-oom",
        "vllm-0.32.0-cpu-normal",
        "vllm-0.32.0-cpu-startup-failed",
    ]
    rng = random.Random(seed)
    written = {"lines": 0, "sessions": 0, "access": 0, "stats": 0, "other": 0}
    with open(path, "wb") as out:

        def emit(line: bytes) -> bool:
            out.write(line)
            written["lines"] += 1
            kind = "access" if ACCESS.match(line) else "stats" if STATS.search(line) else "other"
            written[kind] += 1
            return written["lines"] >= total_lines

        index = 0
        while True:
            name = sessions[index % len(sessions)]
            index += 1
            written["sessions"] += 1
            startup, ending = split_capture(captures[name])
            for line in startup:
                if emit(line):
                    return written
            if not ending and STARTUP_COMPLETE not in b"".join(startup):
                continue  # the startup failure: no traffic
            for n in range(rng.randint(*TRAFFIC_LINES)):
                if n % STATS_EVERY == STATS_EVERY - 1:
                    line = rng.choice(stats)
                elif rng.random() < error_rate / 20:  # a few 5xx, rarer than in the OOM burst
                    line = rng.choice(access_err)
                else:
                    line = rng.choice(access_ok)
                if emit(line):
                    return written
            for line in ending:
                if emit(line):
                    return written


def is_common(line: bytes) -> bool:
    return bool(ACCESS.match(line) or STATS.search(line))


def build_spread(source: Path, path: Path, seed: int = 1129) -> int:
    """source's lines with every other line (neither access nor stats) moved to a random
    place, the order of each kind kept; returns the number of lines moved."""
    lines = lines_of(source.read_bytes())
    common = [line for line in lines if is_common(line)]
    other = [line for line in lines if not is_common(line)]
    del lines
    places = set(random.Random(seed).sample(range(len(common) + len(other)), len(other)))
    with open(path, "wb") as out:
        next_common, next_other = iter(common), iter(other)
        for index in range(len(common) + len(other)):
            out.write(next(next_other) if index in places else next(next_common))
    return len(other)


def build_no_newline(path: Path, size: int) -> None:
    chunk = b"x" * (1 << 20)
    with open(path, "wb") as out:
        for _ in range(size // len(chunk)):
            out.write(chunk)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Timing(NamedTuple):
    wall: float  # seconds
    cpu: float  # user + system seconds of the tool (all its threads)
    rss: int  # peak resident set size, bytes
    status: int


def run(command: list[str], stdout_path: Path) -> Timing:
    """Wall time, CPU time, peak RSS and exit status of one process. CPU time and peak RSS come from
    GNU time around the tool: wait4() on a direct child would also count this forked process's pages
    before the exec. CPU time moves less than wall time when other work shares the machine."""
    usage_path = stdout_path.with_suffix(".usage")
    timed = [str(GNU_TIME), "-f", "%M %U %S", "-o", str(usage_path), *command]
    with open(stdout_path, "wb") as out, open(stdout_path.with_suffix(".stderr"), "wb") as err:
        started = time.perf_counter()
        status = subprocess.run(timed, stdout=out, stderr=err).returncode
        elapsed = time.perf_counter() - started
    rss_kib, user, system = usage_path.read_text().split()[-3:]
    return Timing(elapsed, float(user) + float(system), int(rss_kib) * 1024, status)


def exporter_command(log: Path) -> list[str]:
    return [sys.executable, "-m", "vllm_log_exporter.cli", "--once", str(log)]


def mtail_command(log: Path, progs: Path) -> list[str]:
    return [
        str(MTAIL),
        "--one_shot",
        "--one_shot_format",
        "prometheus",
        "--progs",
        str(progs),
        "--logs",
        str(log),
        "--logtostderr",
        "--address",
        "127.0.0.1",
        "--port",
        str(free_port()),
    ]


class ToolFailed(RuntimeError):
    pass


def compare(label: str, log: Path, progs: Path, repeat: int, lines: int) -> dict[str, Timing]:
    """Both tools `repeat` times on log, alternating; prints each run and the medians, and
    returns the median wall and CPU times (and the largest peak RSS) of each tool."""
    size = log.stat().st_size
    results: dict[str, list[Timing]] = {"vllm-log-exporter": [], "mtail": []}
    for attempt in range(repeat):
        for tool, command in (
            ("vllm-log-exporter", exporter_command(log)),
            ("mtail", mtail_command(log, progs)),
        ):
            out = WORK / f"{tool}-{label}.out"
            timing = run(command, out)
            if timing.status != 0:
                raise ToolFailed(
                    f"{tool} failed with status {timing.status}; see {out.with_suffix('.stderr')}"
                )
            results[tool].append(timing)
            print(
                f"  run {attempt + 1}: {tool:18} {timing.wall:7.3f} s  cpu {timing.cpu:7.3f} s  "
                f"peak RSS {timing.rss / 2**20:6.1f} MiB"
            )
    medians = {}
    for tool, runs in results.items():
        median = Timing(
            statistics.median(r.wall for r in runs),
            statistics.median(r.cpu for r in runs),
            max(r.rss for r in runs),
            0,
        )
        medians[tool] = median
        print(
            f"{tool:18} median {median.wall:7.3f} s  cpu {median.cpu:7.3f} s  "
            f"{lines / median.wall:12,.0f} lines/s  {size / median.wall / 1e6:8.1f} MB/s  "
            f"peak RSS {median.rss / 2**20:6.1f} MiB"
        )
    exporter, mtail = medians["vllm-log-exporter"], medians["mtail"]
    print(
        f"ratio (mtail / exporter): wall time {mtail.wall / exporter.wall:.1f}x, "
        f"cpu time {mtail.cpu / exporter.cpu:.1f}x"
    )
    print("events (exporter: incidents; mtail: raw matching lines):")
    for tool in results:
        found = re.findall(
            rb'^vllm_log_events_total\{event="(\w+)"[^}]*\} (\S+)',
            (WORK / f"{tool}-{label}.out").read_bytes(),
            re.M,
        )
        print(f"  {tool:18} " + ", ".join(f"{k.decode()}={float(v):g}" for k, v in sorted(found)))
    return medians


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-newline-mib", type=int, default=256)
    args = parser.parse_args(argv)

    WORK.mkdir(exist_ok=True)
    progs = WORK / "progs"
    progs.mkdir(exist_ok=True)
    subprocess.run(
        [sys.executable, str(HERE / "make_mtail.py"), str(progs / "vllm.mtail")],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    if (progs / "vllm.mtail").read_bytes() != (HERE / "vllm.mtail").read_bytes():
        print("warning: vllm.mtail is stale; run make_mtail.py and commit it", file=sys.stderr)

    log = WORK / f"vllm-{args.lines}.log"
    composition = build_input(log, args.lines)
    spread = WORK / f"vllm-{args.lines}-spread.log"
    moved = build_spread(log, spread)
    shuffled = WORK / f"vllm-{args.lines}-shuffled.log"
    lines = log.read_bytes().split(b"\n")[:-1]
    random.Random(7).shuffle(lines)
    shuffled.write_bytes(b"\n".join(lines) + b"\n")
    del lines
    total = composition["lines"]
    print(f"load average before: {load_average()}")
    print(
        f"input: {log.relative_to(REPO)}: {total:,} lines, {log.stat().st_size / 1e6:.1f} MB, "
        f"{composition['sessions']} server sessions; access {composition['access']:,} "
        f"({100 * composition['access'] / total:.1f}%), stats {composition['stats']:,} "
        f"({100 * composition['stats'] / total:.1f}%), other {composition['other']:,} "
        f"({100 * composition['other'] / total:.2f}%)"
    )
    try:
        clustered = compare("clustered", log, progs, args.repeat, total)
        print(f"same lines, the {moved:,} other lines spread at random ({spread.relative_to(REPO)}):")
        spread_out = compare("spread", spread, progs, args.repeat, total)
        exporter_spread, exporter_clustered = spread_out["vllm-log-exporter"], clustered["vllm-log-exporter"]
        print(
            f"spread / clustered, exporter: {exporter_spread.wall / exporter_clustered.wall:.2f}x the wall "
            f"time, {exporter_spread.cpu / exporter_clustered.cpu:.2f}x the cpu time"
        )
        print("same lines, shuffled (every line at a random place):")
        compare("shuffled", shuffled, progs, 1, total)
    except ToolFailed as exc:
        print(exc, file=sys.stderr)
        return 1

    blob = WORK / "no-newline.bin"
    build_no_newline(blob, args.no_newline_mib << 20)
    timing = run(exporter_command(blob), WORK / "no-newline.out")
    print(
        f"no newline, {args.no_newline_mib} MiB: vllm-log-exporter {timing.wall:.3f} s, peak RSS "
        f"{timing.rss / 2**20:.1f} MiB, status {timing.status}"
    )
    oversized = re.search(
        rb"^vllm_log_oversized_lines_total (\S+)", (WORK / "no-newline.out").read_bytes(), re.M
    )
    print(f"  vllm_log_oversized_lines_total {oversized.group(1).decode() if oversized else '?'}")
    mtail_version = subprocess.run([str(MTAIL), "--version"], capture_output=True, text=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, mtail {mtail_version.stdout.split()[2]}")
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
