"""Fit the replica model's step time to the real vLLM CPU server and check the fit; with --locust,
replay trace traffic through both. Writes every run, the fitted coefficients and the server's
settings (`make calibrate`; the method is in benchmarks/alert_quality/README.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.vllm_server import MODEL_NAME, VLLM_VERSION, VllmServer, http_get, http_post_json

from .exposition import cumulative
from .replica import EngineParams, Replica, Request
from .traces import TraceMissing, arrivals, load

MAX_NUM_SEQS = 8
MAX_NUM_BATCHED_TOKENS = 512
MAX_MODEL_LEN = 1024
SERVER_ARGS = [
    "--max-num-seqs",
    str(MAX_NUM_SEQS),
    "--max-num-batched-tokens",
    str(MAX_NUM_BATCHED_TOKENS),
    # Random prompts would rarely share a prefix, but a repeated run must not hit the cache.
    "--no-enable-prefix-caching",
]
PREFILL_PROMPTS = (16, 64, 128, 256, 384, 512)
DECODE_RUNS = [(d, p) for d in (1, 2, 4, 8) for p in (16, 384)]
DECODE_OUTPUT = 64
VOCAB = (10, 470)  # token ids the tiny model has (vocab_size 478), clear of the special ones


def histograms(url: str) -> dict[str, dict]:
    """vLLM's `*_seconds` histograms on one scrape: per family its sum, count and cumulative
    buckets by bound (label sets of one family added up)."""
    status, text = http_get(url, timeout=10)
    if status != 200:
        raise RuntimeError(f"{url} answered {status}")
    out: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        if family.type != "histogram" or not family.name.endswith("_seconds"):
            continue
        h = out.setdefault(family.name, {"sum": 0.0, "count": 0.0, "buckets": {}})
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                le = float(sample.labels["le"])
                h["buckets"][le] = h["buckets"].get(le, 0.0) + sample.value
            elif sample.name.endswith(("_sum", "_count")):
                h[sample.name.rsplit("_", 1)[1]] += sample.value
    return out


def mean_between(before: dict, after: dict, family: str) -> tuple[float, int]:
    count = after[family]["count"] - before[family]["count"]
    total = after[family]["sum"] - before[family]["sum"]
    return (total / count if count else float("nan")), int(count)


def complete(server: VllmServer, prompt: int, output: int, rng: random.Random) -> None:
    body = {
        "model": MODEL_NAME,
        "prompt": [rng.randint(*VOCAB) for _ in range(prompt)],
        "max_tokens": output,
        "min_tokens": output,
        "ignore_eos": True,
        "temperature": 0,
    }
    status, text = http_post_json(f"{server.url}/v1/completions", body, timeout=300)
    if status != 200:
        raise RuntimeError(f"vLLM answered {status}: {text[:300]}")


def prefill_run(server: VllmServer, prompt: int, repeats: int, rng: random.Random) -> dict:
    before = histograms(server.metrics_url)
    for _ in range(repeats):
        complete(server, prompt, 1, rng)
    after = histograms(server.metrics_url)
    ttft, n = mean_between(before, after, "vllm:time_to_first_token_seconds")
    return {
        "kind": "prefill",
        "prompt": prompt,
        "prefill_tokens": prompt,
        "decoding": 0,
        "context": 0,
        "step_seconds": ttft,
        "observations": n,
    }


def decode_run(server: VllmServer, concurrent: int, prompt: int, rng: random.Random) -> dict:
    before = histograms(server.metrics_url)
    seeds = [rng.random() for _ in range(concurrent)]
    threads = [
        threading.Thread(target=complete, args=(server, prompt, DECODE_OUTPUT, random.Random(s)))
        for s in seeds
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = histograms(server.metrics_url)
    itl, n = mean_between(before, after, "vllm:inter_token_latency_seconds")
    # Each sequence's context grows from its prompt to prompt + output over the run.
    context = concurrent * (prompt + DECODE_OUTPUT / 2)
    return {
        "kind": "decode",
        "prompt": prompt,
        "prefill_tokens": 0,
        "decoding": concurrent,
        "context": context,
        "step_seconds": itl,
        "observations": n,
    }


def fit(runs: list[dict]) -> tuple[dict[str, float], float]:
    """Least squares, no coefficient below zero: a cost the noise would make negative (the tiny
    model's per-sequence decode cost is within it) is left out and the rest refitted."""
    x = np.array([[1.0, r["prefill_tokens"], r["decoding"], r["context"]] for r in runs])
    y = np.array([r["step_seconds"] for r in runs])
    kept = list(range(x.shape[1]))
    while True:
        solved, *_ = np.linalg.lstsq(x[:, kept], y, rcond=None)
        if (solved >= 0).all():
            break
        kept.pop(int(np.argmin(solved)))
    coef = np.zeros(x.shape[1])
    coef[kept] = solved
    predicted = x @ coef
    r2 = 1 - float(np.sum((y - predicted) ** 2) / np.sum((y - y.mean()) ** 2))
    for run, p in zip(runs, predicted, strict=True):
        run["fitted_seconds"] = float(p)
    names = ("step_base", "per_prefill_token", "per_decode_seq", "per_context_token")
    return {n: float(c) for n, c in zip(names, coef, strict=True)}, r2


def kv_cache(server: VllmServer) -> dict[str, int]:
    """The cache the server allocated, from its cache_config_info."""
    _, text = http_get(server.metrics_url, timeout=10)
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:cache_config_info{"))
    labels = dict(re.findall(r'([a-zA-Z_]+)="([^"]*)"', line))
    block = int(labels["block_size"])
    return {"block_size": block, "kv_blocks": int(labels["kv_cache_size_tokens"]) // block}


# -- the replay: the same trace slice through the real server (locust) and the model ---------

REPLAY_SECONDS = 60
LENGTH_DIVISOR = 8  # the traces' prompts and outputs, to fit the tiny model's 1,024 tokens
LOADS = (0.5, 0.9, 1.2)  # of the model's capacity on that traffic
LOCUSTFILE = Path(__file__).with_name("locust_replay.py")
QUANTILES = (0.5, 0.95)


def bucket_quantile(q: float, cumulative: dict[float, float]) -> float:
    """histogram_quantile's answer: linear within the bucket the rank falls in."""
    bounds = sorted(cumulative)
    total = cumulative[bounds[-1]]
    if total <= 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower


def observed_buckets(values: list[float], bounds: list[float]) -> dict[float, float]:
    """The model's observations in the server's buckets, as its exposition would count them."""
    finite = sorted(b for b in bounds if b != float("inf"))
    return dict(zip([*finite, float("inf")], map(float, cumulative(finite, values)), strict=True))


def schedule_of(rate: float, seed: int) -> list[tuple[float, int, int]]:
    trace = load("conv").scaled_lengths(LENGTH_DIVISOR, MAX_MODEL_LEN)
    made = arrivals(trace, rate=rate, duration=REPLAY_SECONDS, seed=seed)
    return [(float(t), int(p), int(o)) for t, p, o in zip(made.time, made.prompt, made.output, strict=True)]


def simulate(engine: EngineParams, schedule: list[tuple[float, int, int]]) -> Replica:
    replica = Replica(engine)
    for t, prompt, output in schedule:
        replica.run_until(t)
        replica.submit(Request(t, prompt, output))
    replica.run_until(REPLAY_SECONDS * 100)  # drain
    return replica


def capacity(engine: EngineParams, seed: int) -> float:
    """Requests per second the model finishes on this traffic when it never runs dry."""
    replica = simulate(engine, schedule_of(50.0, seed))
    return replica.seen.finished / max(r.finished_at for r in replica.done)


def locust_stats(path: Path) -> dict[str, dict[str, float]]:
    out = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row["Name"] in ("e2e", "ttft"):
                out[row["Name"]] = {
                    "requests": int(row["Request Count"]),
                    "failures": int(row["Failure Count"]),
                    "p50": float(row["50%"]) / 1000,
                    "p95": float(row["95%"]) / 1000,
                    "p99": float(row["99%"]) / 1000,
                }
    return out


def replay(
    server: VllmServer, engine: EngineParams, load: float, rate: float, locust: str, seed: int
) -> dict:
    schedule = schedule_of(rate, seed)
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "schedule.json"
        path.write_text(json.dumps(schedule))
        before = histograms(server.metrics_url)
        env = {**os.environ, "VLLM_OBS_REPLAY_SCHEDULE": str(path), "VLLM_OBS_REPLAY_MODEL": MODEL_NAME}
        command = [locust, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "1", "-r", "1"]
        command += ["-H", server.url, "--csv", f"{work}/replay", "--only-summary"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=REPLAY_SECONDS * 20)
        if done.returncode not in (0, 1):  # 1: some requests failed, which the stats count
            raise RuntimeError(f"locust exited {done.returncode}: {done.stderr[-2000:]}")
        # locust warns when its own process runs out of CPU: its timings are then its own queue.
        warnings = sorted({ln.split("/WARNING/")[-1] for ln in done.stderr.splitlines() if "CPU usage" in ln})
        after = histograms(server.metrics_url)
        driven = locust_stats(Path(f"{work}/replay_stats.csv"))
    model = simulate(engine, schedule)
    out: dict = {"load": load, "rate": round(rate, 3), "requests": len(schedule), "locust": driven}
    out["locust_warnings"] = warnings
    for family, attr in (
        ("vllm:time_to_first_token_seconds", "time_to_first_token"),
        ("vllm:request_queue_time_seconds", "request_queue_time"),
        ("vllm:e2e_request_latency_seconds", "e2e_request_latency"),
    ):
        real = {le: n - before[family]["buckets"].get(le, 0.0) for le, n in after[family]["buckets"].items()}
        simulated = observed_buckets(getattr(model.seen, attr), list(real))
        key = family.removeprefix("vllm:").removesuffix("_seconds")
        out[key] = {
            f"p{int(q * 100)}": {
                "server": round(bucket_quantile(q, real), 4),
                "model": round(bucket_quantile(q, simulated), 4),
            }
            for q in QUANTILES
        }
    return out


def calibrate(repeats: int, seed: int, locust: str | None) -> dict:
    rng = random.Random(seed)
    replays = []
    if locust is not None:
        load("conv")  # the trace is there before a server starts (TraceMissing otherwise)
    with tempfile.TemporaryDirectory() as work:
        with VllmServer(Path(work) / "vllm.log", extra_args=SERVER_ARGS) as server:
            complete(server, 64, 8, rng)  # warm-up: the first requests compile and allocate
            complete(server, 512, 8, rng)
            runs = [prefill_run(server, p, repeats, rng) for p in PREFILL_PROMPTS]
            for _ in range(repeats // 2 or 1):
                runs += [decode_run(server, d, p, rng) for d, p in DECODE_RUNS]
            cache = kv_cache(server)
            theta, r2 = fit(runs)
            engine = {
                **theta,
                "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
                "max_num_seqs": MAX_NUM_SEQS,
                **cache,
                "max_model_len": MAX_MODEL_LEN,
            }
            if locust is not None:
                params = EngineParams(**engine)
                full = capacity(params, seed)
                replays = [replay(server, params, load, load * full, locust, seed) for load in LOADS]
    return {
        "engine": engine,
        "r_squared": round(r2, 4),
        "replays": replays,
        "runs": runs,
        "server": f"vLLM {VLLM_VERSION} CPU build, the tiny test model, engine pinned to one CPU, "
        + " ".join(SERVER_ARGS),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "measured": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seed": seed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=6, help="requests per prefill run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--locust", help="python of locust's virtualenv (make locust-venv): replay a trace slice under it too"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        result = calibrate(args.repeats, args.seed, args.locust)
    except TraceMissing as missing:
        print(f"calibrate: {missing}", file=sys.stderr)
        return 2
    result["took_seconds"] = round(time.monotonic() - started)
    header = "# Written by `python -m benchmarks.alert_quality.calibrate`; do not edit.\n"
    args.out.write_text(header + yaml.safe_dump(result, sort_keys=False, width=100))
    print(json.dumps({k: result[k] for k in ("engine", "r_squared", "replays")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
