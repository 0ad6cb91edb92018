"""Drive a real vLLM past its capacity: benchmarks/alert_quality/locust_replay.py replays a schedule
of [offset s, prompt tokens, output tokens] rows under locust (`make locust-venv`), made of the
conversation trace in ../shared/traces when present, else drawn to the same shape."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks.alert_quality.traces import TraceMissing, arrivals, load
from tests.support.vllm_server import CACHE_DIR

LOCUST_VERSION = "2.47.0"  # the Makefile's
LOCUSTFILE = Path(__file__).resolve().parents[2] / "benchmarks" / "alert_quality" / "locust_replay.py"
# The trace's lengths halved (medians: 510 prompt and 65 output tokens), to fit 1,024 tokens.
LENGTH_DIVISOR = 2
MAX_MODEL_LEN = 1024


class LocustUnavailable(RuntimeError):
    """locust's virtualenv is missing: `make locust-venv` builds it (`make test` does)."""


def locust_python() -> Path:
    path = CACHE_DIR / f"locust-{LOCUST_VERSION}" / "bin" / "python"
    if not path.exists():
        raise LocustUnavailable(f"no locust virtualenv at {path}; run `make locust-venv`")
    return path


def schedule(rate: float, duration: float, seed: int = 1) -> tuple[list[tuple[float, int, int]], str]:
    """`duration` seconds of requests at `rate` a second, and where their lengths come from."""
    try:
        trace = load("conv").scaled_lengths(LENGTH_DIVISOR, MAX_MODEL_LEN)
    except TraceMissing:
        # Log-normal lengths around the scaled trace's medians and spread; Poisson arrivals.
        rng = np.random.default_rng(seed)
        times = np.cumsum(rng.exponential(1 / rate, int(rate * duration * 1.5) + 10))
        times = times[times < duration]
        output = np.clip(np.round(rng.lognormal(np.log(65), 0.8, len(times))), 1, MAX_MODEL_LEN - 1)
        prompt = np.clip(np.round(rng.lognormal(np.log(510), 1.1, len(times))), 1, MAX_MODEL_LEN - output)
        source = "generated"
    else:
        made = arrivals(trace, rate=rate, duration=duration, seed=seed)
        times, prompt, output = made.time, made.prompt, made.output
        source = "the conv trace"
    rows = [(float(t), int(p), int(o)) for t, p, o in zip(times, prompt, output, strict=True)]
    return rows, source


@contextlib.contextmanager
def replaying(
    url: str, model: str, rows: list[tuple[float, int, int]], work: Path
) -> Iterator[subprocess.Popen]:
    """locust replaying `rows` against `url` until the block ends (then stopped: its open requests
    are cut, and vLLM aborts them)."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "schedule.json"
    path.write_text(json.dumps(rows))
    env = {**os.environ, "VLLM_OBS_REPLAY_SCHEDULE": str(path), "VLLM_OBS_REPLAY_MODEL": model}
    command = [str(locust_python()), "-m", "locust", "-f", str(LOCUSTFILE), "--headless"]
    command += ["-u", "1", "-r", "1", "-H", url, "--only-summary"]
    with open(work / "locust.log", "wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
