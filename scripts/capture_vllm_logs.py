#!/usr/bin/env python3
"""Capture real vLLM (0.32.0 CPU) server logs for the log exporter's golden tests.

`.venv/bin/python scripts/capture_vllm_logs.py [SCENARIO ...]`; docs/scripts.md says how to refresh the goldens.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.vllm_server import (  # noqa: E402
    MODEL_NAME,
    VllmServer,
    http_get,
    http_post_json,
    send_traffic,
)

FIXTURES = REPO / "tests" / "fixtures" / "logs"
STATS_LINE = re.compile(rb"Avg prompt throughput: .* Running: [1-9]")


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise TimeoutError(f"gave up after {timeout}s waiting for {what}")


def log_has(path: Path, pattern: bytes) -> bool:
    return re.search(pattern, path.read_bytes()) is not None


def long_generation(server: VllmServer, max_tokens: int = 600) -> int:
    body = {
        "model": MODEL_NAME,
        "prompt": "The KV cache fills up",
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    return http_post_json(server.url + "/v1/completions", body, timeout=300)[0]


def capture_normal(log: Path) -> None:
    """Startup, traffic with request errors, a stats line under load, health probes, SIGTERM."""
    with VllmServer(log) as server:
        print("traffic:", send_traffic(server))
        # Keep requests running across a 10 s stats interval so the stats line shows
        # non-zero Running / KV-cache usage: four workers loop until it appears.
        stop = threading.Event()

        def worker() -> list[int]:
            statuses = []
            while not stop.is_set():
                statuses.append(long_generation(server, 900))
            return statuses

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(worker) for _ in range(4)]
            try:
                wait_for(lambda: log_has(log, STATS_LINE.pattern), 180, "a stats line under load")
            finally:
                stop.set()
            print("long requests:", sorted(s for f in futures for s in f.result()))
        for _ in range(3):
            http_get(server.url + "/health")
        http_get(server.url + "/metrics")
        # One more idle interval so the "idle" stats line (Running: 0) is logged too.
        time.sleep(12)
    # stop() sent SIGTERM: the log ends with the normal shutdown sequence.


def capture_engine_killed(log: Path, extra_args: tuple[str, ...] = ()) -> None:
    """kill -9 of the EngineCore process while the server is healthy."""
    server = VllmServer(log, extra_args=extra_args)
    server.start()
    try:
        print("traffic:", send_traffic(server, requests=3, errors=False))
        pid = server.kill_engine_core()
        print("killed EngineCore pid", pid)
        # Requests after the death: what a client (and the access log) sees.
        for _ in range(3):
            try:
                print("health:", http_get(server.url + "/health", timeout=5)[0])
            except OSError as exc:
                print("health:", exc)
            time.sleep(0.3)
        print("exit status:", server.wait_exit(timeout=120))
    finally:
        server.stop()


def capture_startup_failed(log: Path) -> None:
    """--max-model-len far beyond what a 1 GiB CPU KV cache holds: the engine never starts."""
    # The tiny model keeps 2 layers x 2 (K,V) x 4 heads x 64 dims per token, a few KiB;
    # 1 GiB of KV cache holds a few hundred thousand tokens, so ask for 16M. The
    # model config caps the length at max_position_embeddings, hence the override.
    length = 16 * 1024 * 1024
    server = VllmServer(
        log,
        extra_args=[
            "--max-model-len",
            str(length),
            "--hf-overrides",
            f'{{"max_position_embeddings": {length}}}',
        ],
        extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    server.launch()
    try:
        print("exit status:", server.wait_exit(timeout=240))
    finally:
        server.stop()


def vm_size_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmSize for pid {pid}")


def model_worker_pid(server: VllmServer) -> int:
    """The process that runs the model: the executor's worker under the engine core."""
    for pid, cmd in server.descendants():
        if "Worker" in cmd:
            return pid
    return server.engine_core_pid()  # uniprocess executor: the engine core runs the model


ALLOCATION_FAILURE = rb"can't allocate memory"


def capture_runtime_oom(log: Path, margins_mib: list[int]) -> None:
    """A real allocation failure inside the running engine: the worker's address space capped a
    little above what it maps, then a burst of long distinct prompts (margins: docs/scripts.md)."""
    for margin in margins_mib:
        outcome = _runtime_oom_attempt(log, margin)
        if outcome and log_has(log, ALLOCATION_FAILURE):
            return
        print(f"   margin {margin} MiB gave no DefaultCPUAllocator failure; trying the next")
    raise RuntimeError(f"no margin in {margins_mib} produced a runtime allocation failure")


def _runtime_oom_attempt(log: Path, margin_mib: int) -> bool:
    server = VllmServer(log, extra_args=["--max-num-seqs", "64", "--no-enable-prefix-caching"])
    server.start()
    try:
        print("traffic:", send_traffic(server, requests=2, errors=False))
        pid = model_worker_pid(server)
        limit = vm_size_bytes(pid) + margin_mib * 1024 * 1024
        subprocess.run(["prlimit", "--pid", str(pid), f"--as={limit}"], check=True)
        print(f"worker pid {pid}: RLIMIT_AS set to {limit} bytes (VmSize + {margin_mib} MiB)")
        words = "the quick brown fox jumps over the lazy dog one two three four five".split()

        def long_prompt(i: int) -> int:
            prompt = " ".join(words[(i + k) % len(words)] for k in range(700))
            body = {"model": MODEL_NAME, "prompt": f"{i} {prompt}", "max_tokens": 16}
            try:
                return http_post_json(server.url + "/v1/completions", body, timeout=120)[0]
            except OSError:  # the server may be gone before every answer is sent
                return -1

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            statuses = list(pool.map(long_prompt, range(64)))
        print("burst statuses:", {s: statuses.count(s) for s in sorted(set(statuses))})
        try:
            print("exit status:", server.wait_exit(timeout=60))
            return True
        except subprocess.TimeoutExpired:
            print("server still running after the burst: no fatal allocation failure")
            return False
    finally:
        server.stop()


def capture_json_engine_killed(log: Path) -> None:
    """The engine kill again, with vLLM 0.32's built-in JSON log format (tracebacks in exc_info)."""
    capture_engine_killed(log, ("--logging-config.formatter", "json"))


def stop_api_server(server: VllmServer, timeout: float = 120) -> int:
    """A planned stop as an orchestrator does it (docker stop, a Kubernetes pod deletion):
    SIGTERM to the API server process only, which then stops its engine and workers.
    Waits until the whole process group is gone, so the log is complete."""
    assert server.process is not None
    group = server.process.pid  # start_new_session: the server leads its own group
    server.process.send_signal(signal.SIGTERM)
    status = server.wait_exit(timeout=timeout)
    try:
        wait_for(lambda: not group_alive(group), 30, "the engine and workers to exit")
    except TimeoutError:
        print("   processes left in the group after the API server exited; killing them")
        os.killpg(group, signal.SIGKILL)
    return status


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def capture_start_stop(log: Path) -> None:
    """A normal start, a few requests, and a planned SIGTERM shutdown of the API server."""
    server = VllmServer(log)
    server.start()
    try:
        print(f"ready in {server.started_in:.1f} s; traffic:", send_traffic(server, requests=2, errors=False))
        print("exit status after SIGTERM:", stop_api_server(server))
    finally:
        server.stop()


# 24 blocks of 32 tokens hold 768 tokens: less than one request of --max-model-len 2048.
TOO_SMALL_FOR_MAX_MODEL_LEN = (
    "--num-gpu-blocks-override",
    "24",
    "--block-size",
    "32",
    "--max-model-len",
    "2048",
)
STARTUP_FAILURE = rb"EngineCore failed to start"


def capture_restart_loop(log: Path, failures: int = 3) -> None:
    """A real restart loop: a server that cannot fit its --max-model-len started `failures` times
    into one log, then a good one that serves a request and is stopped (docs/scripts.md)."""
    log.write_bytes(b"")
    attempt_log = log.with_name(log.name + ".attempt")
    try:
        for attempt in range(1, failures + 1):
            server = VllmServer(attempt_log, extra_args=TOO_SMALL_FOR_MAX_MODEL_LEN)
            server.launch()
            try:
                status = server.wait_exit(timeout=300)
            finally:
                server.stop()
            output = attempt_log.read_bytes()
            if status == 0 or re.search(STARTUP_FAILURE, output) is None:
                raise RuntimeError(
                    f"attempt {attempt} did not fail to start (status {status}); see {attempt_log}"
                )
            print(f"attempt {attempt}: failed to start, exit status {status}")
            with open(log, "ab") as out:
                out.write(output)
        server = VllmServer(attempt_log)
        server.start()
        try:
            print(
                f"good start: ready in {server.started_in:.1f} s;",
                send_traffic(server, requests=1, errors=False),
            )
            print("exit status after SIGTERM:", stop_api_server(server))
        finally:
            server.stop()
        with open(log, "ab") as out:
            out.write(attempt_log.read_bytes())
    finally:
        attempt_log.unlink(missing_ok=True)


SCENARIOS = {
    "normal": capture_normal,
    "engine_killed": capture_engine_killed,
    "json_engine_killed": capture_json_engine_killed,
    "startup_failed": capture_startup_failed,
    "runtime_oom": capture_runtime_oom,
    "start_stop": capture_start_stop,
    "restart_loop": capture_restart_loop,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help=f"any of {', '.join(SCENARIOS)} (default: all)",
    )
    parser.add_argument("--out", type=Path, default=FIXTURES, help="directory for <scenario>.log")
    parser.add_argument(
        "--oom-margins-mib",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[32, 24, 48, 16, 64],
        help="address space (MiB, comma-separated, tried in order) the model "
        "worker may still map after startup",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.scenarios or list(SCENARIOS):
        log = args.out / f"vllm-0.32.0-cpu-{name.replace('_', '-')}.log"
        print(f"== {name} -> {log}", flush=True)
        if name == "runtime_oom":
            capture_runtime_oom(log, args.oom_margins_mib)
        else:
            SCENARIOS[name](log)
        print(f"   {sum(1 for _ in log.open('rb'))} lines", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
