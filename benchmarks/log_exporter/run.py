#!/usr/bin/env python3
"""Benchmark: `vllm-log-exporter --once` against `mtail --one_shot`, side by side.

    .venv/bin/python benchmarks/log_exporter/run.py [--lines 1000000] [--repeat 3]

1. Builds work/vllm-1m.log (gitignored) from the real vLLM 0.32.0 lines captured in
   tests/fixtures/logs/: server sessions, each a captured startup, then steady traffic
   (captured access lines and stats lines, a stats line every ~40 access lines, 5xx at the
   captured rate), then a captured ending (normal shutdown, engine kill -9, runtime
   allocation failure with its tracebacks); the startup-failure capture appears whole.
2. Runs both tools `--repeat` times each on it, alternating, and reports the median wall
   time (lines/s, MB/s) and peak RSS (GNU time's maximum resident set size of the tool).
3. Runs both once more on the same lines shuffled (the fast path's worst case: failure
   lines spread over every block instead of clustered as real incidents are).
4. Runs the exporter on work/no-newline.bin: 256 MiB without a newline (bounded memory).

mtail runs benchmarks/log_exporter/vllm.mtail, generated from the same patterns.yaml by
make_mtail.py (regenerated into work/ and compared with the committed copy first).
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CAPTURES = REPO / "tests" / "fixtures" / "logs"
WORK = HERE / "work"
MTAIL = Path("/usr/bin/mtail")
GNU_TIME = Path("/usr/bin/time")

ACCESS = re.compile(rb'^\S*INFO:\s+\S+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}')
STATS = re.compile(rb"Avg prompt throughput: ")
STARTUP_COMPLETE = b"Application startup complete."


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
    written = {"lines": 0, "sessions": 0, "common": 0, "other": 0}
    with open(path, "wb") as out:

        def emit(line: bytes, common: bool) -> bool:
            out.write(line)
            written["lines"] += 1
            written["common" if common else "other"] += 1
            return written["lines"] >= total_lines

        index = 0
        while True:
            name = sessions[index % len(sessions)]
            index += 1
            written["sessions"] += 1
            startup, ending = split_capture(captures[name])
            for line in startup:
                if emit(line, False):
                    return written
            if not ending and STARTUP_COMPLETE not in b"".join(startup):
                continue  # the startup failure: no traffic
            for n in range(rng.randint(20_000, 40_000)):
                if n % 40 == 39:
                    line = rng.choice(stats)
                elif rng.random() < error_rate / 20:  # a few 5xx, rarer than in the OOM burst
                    line = rng.choice(access_err)
                else:
                    line = rng.choice(access_ok)
                if emit(line, True):
                    return written
            for line in ending:
                if emit(line, bool(ACCESS.match(line) or STATS.search(line))):
                    return written


def build_no_newline(path: Path, size: int) -> None:
    chunk = b"x" * (1 << 20)
    with open(path, "wb") as out:
        for _ in range(size // len(chunk)):
            out.write(chunk)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(command: list[str], stdout_path: Path) -> tuple[float, int, int]:
    """(wall seconds, peak RSS bytes, exit status) of one process.

    Peak RSS comes from GNU time around the tool: wait4() on a direct child would also
    count the pages of this (forked) benchmark process before the exec.
    """
    rss_path = stdout_path.with_suffix(".rss")
    timed = [str(GNU_TIME), "-f", "%M", "-o", str(rss_path), *command]
    with open(stdout_path, "wb") as out, open(stdout_path.with_suffix(".stderr"), "wb") as err:
        started = time.perf_counter()
        status = subprocess.run(timed, stdout=out, stderr=err).returncode
        elapsed = time.perf_counter() - started
    rss_kib = int(rss_path.read_text().split()[-1])
    return elapsed, rss_kib * 1024, status


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
    size = log.stat().st_size
    print(
        f"input: {log.relative_to(REPO)}: {composition['lines']:,} lines, {size / 1e6:.1f} MB, "
        f"{composition['sessions']} server sessions, {composition['other']:,} lines other than "
        f"access/stats ({100 * composition['other'] / composition['lines']:.2f}%)"
    )

    results: dict[str, list[tuple[float, int]]] = {"vllm-log-exporter": [], "mtail": []}
    for attempt in range(args.repeat):
        for tool, command in (
            ("vllm-log-exporter", exporter_command(log)),
            ("mtail", mtail_command(log, progs)),
        ):
            elapsed, rss, status = run(command, WORK / f"{tool}.out")
            if status != 0:
                print(
                    f"{tool} failed with status {status}; see {WORK / (tool + '.stderr')}",
                    file=sys.stderr,
                )
                return 1
            results[tool].append((elapsed, rss))
            print(f"  run {attempt + 1}: {tool:18} {elapsed:7.3f} s  peak RSS {rss / 2**20:6.1f} MiB")

    summary = {}
    for tool, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        rss = max(r[1] for r in runs)
        summary[tool] = wall
        print(
            f"{tool:18} median {wall:7.3f} s  {composition['lines'] / wall:12,.0f} lines/s  "
            f"{size / wall / 1e6:8.1f} MB/s  peak RSS {rss / 2**20:6.1f} MiB"
        )
    print(f"ratio (mtail time / exporter time): {summary['mtail'] / summary['vllm-log-exporter']:.1f}x")
    print("events (exporter: incidents; mtail: raw matching lines):")
    for tool in results:
        found = re.findall(
            rb'^vllm_log_events_total\{event="(\w+)"[^}]*\} (\S+)',
            (WORK / f"{tool}.out").read_bytes(),
            re.M,
        )
        print(f"  {tool:18} " + ", ".join(f"{k.decode()}={float(v):g}" for k, v in sorted(found)))

    # Worst case for the fast path: the same lines in random order, so failure lines are
    # spread over every sub-block instead of clustering around incidents as in real logs.
    shuffled = WORK / f"vllm-{args.lines}-shuffled.log"
    lines = log.read_bytes().split(b"\n")[:-1]
    random.Random(7).shuffle(lines)
    shuffled.write_bytes(b"\n".join(lines) + b"\n")
    del lines
    print("same lines, shuffled (failure lines in every 64 KiB sub-block):")
    timings = {}
    for tool, command in (
        ("vllm-log-exporter", exporter_command(shuffled)),
        ("mtail", mtail_command(shuffled, progs)),
    ):
        elapsed, rss, status = run(command, WORK / f"{tool}-shuffled.out")
        timings[tool] = elapsed
        print(
            f"  {tool:18} {elapsed:7.3f} s  {composition['lines'] / elapsed:12,.0f} lines/s  "
            f"peak RSS {rss / 2**20:6.1f} MiB  status {status}"
        )
    print(f"  ratio: {timings['mtail'] / timings['vllm-log-exporter']:.1f}x")

    blob = WORK / "no-newline.bin"
    build_no_newline(blob, args.no_newline_mib << 20)
    elapsed, rss, status = run(exporter_command(blob), WORK / "no-newline.out")
    print(
        f"no newline, {args.no_newline_mib} MiB: vllm-log-exporter {elapsed:.3f} s, peak RSS "
        f"{rss / 2**20:.1f} MiB, status {status}"
    )
    oversized = re.search(
        rb"^vllm_log_oversized_lines_total (\S+)", (WORK / "no-newline.out").read_bytes(), re.M
    )
    print(f"  vllm_log_oversized_lines_total {oversized.group(1).decode() if oversized else '?'}")
    mtail_version = subprocess.run([str(MTAIL), "--version"], capture_output=True, text=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, mtail {mtail_version.stdout.split()[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
