"""Command line: `vllm-probe` (--target, --once and the other options: exporters/vllm_probe/README.md).
Exit status: 0 on success or SIGTERM/SIGINT (with --once: 0 if every probe succeeded, 1 otherwise),
1 when it cannot listen, 2 for a usage or configuration error (one sentence on stderr).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from prometheus_client import generate_latest

from . import __version__
from .canary import Canary, Settings
from .metrics import ProbeMetrics, build_registry
from .runner import Runner, TargetWorker
from .server import ProbeServer
from .targets import Target, TargetError, parse_targets

DEFAULT_LISTEN = "127.0.0.1:9401"
MODEL_ENV = "VLLM_PROBE_MODEL"
API_KEY_ENV = "VLLM_API_KEY"  # the variable vLLM itself reads its key from


class UsageError(Exception):
    """A bad command line or configuration: reported as one sentence, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="vllm-probe",
        description="Send each vLLM a one-token request on a schedule and export the outcome "
        "as Prometheus metrics, so a hung engine shows even while /health answers 200.",
    )
    what = parser.add_argument_group("what to probe")
    what.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="[INSTANCE=]URL",
        help="base URL of a vLLM API server, e.g. http://vllm:8000 (repeatable); the `target` "
        "label is INSTANCE if given, else the URL's host:port",
    )
    what.add_argument(
        "--model",
        default=os.environ.get(MODEL_ENV) or None,
        metavar="NAME",
        help=f"served model name to send (env {MODEL_ENV}); default: the first id of each "
        "target's /v1/models, asked again after a 404",
    )
    what.add_argument(
        "--mode",
        choices=("completion", "chat", "embed"),
        default="completion",
        help="POST /v1/completions (default) or /v1/chat/completions, max_tokens 1; or "
        "/v1/embeddings for an embedding (pooling) model, which serves no completions",
    )
    what.add_argument(
        "--api-key-file",
        type=Path,
        metavar="PATH",
        help=f"file holding the API key, sent as a bearer token (default: env {API_KEY_ENV})",
    )
    what.add_argument(
        "--health-path",
        default="/health",
        metavar="PATH",
        help="health endpoint checked every cycle (default /health)",
    )
    timing = parser.add_argument_group("timing")
    timing.add_argument(
        "--interval", type=_number, default=15.0, metavar="SECONDS", help="time between probes (default 15)"
    )
    timing.add_argument(
        "--timeout",
        type=_number,
        default=10.0,
        metavar="SECONDS",
        help="time a probe may take, less than --interval (default 10)",
    )
    timing.add_argument(
        "--jitter",
        type=_number,
        default=0.1,
        metavar="FRACTION",
        help="each wait is interval x (1 +/- FRACTION), from 0 to below 1 (default 0.1)",
    )
    serve = parser.add_argument_group("serving")
    serve.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"where to serve /metrics (default {DEFAULT_LISTEN}; 0.0.0.0:9401 in a container)",
    )
    serve.add_argument(
        "--not-ready-after",
        type=int,
        default=3,
        metavar="N",
        help="/ready answers 503 before the first success and once N probes in a row failed while the "
        "engine's token counters (its /metrics, read after each failure) stood still: a hang, not a queue; "
        "at most (N+1) x interval x (1+jitter) + timeout + 4 s after a hang begins, 80 s with the "
        "defaults; default 3",
    )
    serve.add_argument(
        "--once",
        action="store_true",
        help="probe every target once, print the metrics, exit 0 if all succeeded, else 1",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen expects HOST:PORT with a port from 1 to 65535, got {value!r}")
    host = host.strip("[]")
    if any(c.isspace() or c in "/@?#" for c in host):
        raise UsageError(f"--listen expects HOST:PORT, got {value!r}")
    return host or "0.0.0.0", int(port)


def check_args(args: argparse.Namespace) -> list[Target]:
    if not args.target:
        raise UsageError("no target: give at least one --target URL, e.g. --target http://vllm:8000")
    try:
        targets = parse_targets(args.target)
    except TargetError as exc:
        raise UsageError(str(exc)) from None
    if args.model is not None and not args.model.strip():
        raise UsageError("--model is empty; give the served model name or leave it out to discover it")
    if args.interval <= 0 or args.timeout <= 0:
        raise UsageError("--interval and --timeout must be positive numbers of seconds")
    if args.timeout >= args.interval:
        raise UsageError(
            f"--timeout ({args.timeout:g} s) must be less than --interval ({args.interval:g} s), "
            "so a probe ends before the next one is due"
        )
    if not 0 <= args.jitter < 1:
        raise UsageError(f"--jitter must be a fraction from 0 to below 1, got {args.jitter:g}")
    if args.not_ready_after < 1:
        raise UsageError(f"--not-ready-after must be 1 or more probes, got {args.not_ready_after}")
    if not args.health_path.startswith("/"):
        raise UsageError(f"--health-path must start with '/', got {args.health_path!r}")
    parse_listen(args.listen)
    return targets


def read_api_key(path: Path | None) -> str | None:
    if path is None:
        return os.environ.get(API_KEY_ENV, "").strip() or None
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise UsageError(f"cannot read --api-key-file {path}: {why}") from None
    if not key:
        raise UsageError(f"--api-key-file {path} is empty; put the vLLM API key in it")
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        raise UsageError(
            f"--api-key-file {path} holds more than one key (whitespace or control characters inside)"
        )
    return key


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        targets = check_args(args)
        api_key = read_api_key(args.api_key_file)
    except UsageError as exc:
        print(f"vllm-probe: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s vllm-probe: %(message)s", stream=sys.stderr
    )
    settings = Settings(
        mode=args.mode,
        timeout=args.timeout,
        health_path=args.health_path,
        model=args.model.strip() if args.model else None,
        api_key=api_key,
    )
    metrics = ProbeMetrics({t.instance: settings.model for t in targets}, time.time)
    stop = threading.Event()
    workers = [TargetWorker(Canary(t, settings), metrics, stop) for t in targets]
    if args.once:
        return run_once(workers, metrics)
    return serve(workers, metrics, args, stop)


def run_once(workers: Sequence[TargetWorker], metrics: ProbeMetrics) -> int:
    """Probe every target once, all at the same time; print the exposition."""
    results: dict[str, bool] = {}

    def probe(worker: TargetWorker) -> None:
        results[worker.instance] = worker.run_once().outcome.ok

    threads = [threading.Thread(target=probe, args=(w,), daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sys.stdout.buffer.write(generate_latest(build_registry(metrics)))
    sys.stdout.flush()
    return 0 if all(results.get(w.instance) for w in workers) else 1


def serve(
    workers: Sequence[TargetWorker], metrics: ProbeMetrics, args: argparse.Namespace, stop: threading.Event
) -> int:
    host, port = parse_listen(args.listen)
    try:
        ProbeServer((host, port), metrics, args.not_ready_after).start()
    except OSError as exc:
        why = exc.strerror or str(exc)
        print(f"vllm-probe: error: cannot listen on {args.listen}: {why}", file=sys.stderr)
        return 1

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logging.getLogger("vllm_probe").info(
        "serving /metrics and /ready on %s; probing %s every %g s (timeout %g s)",
        args.listen,
        ", ".join(w.instance for w in workers),
        args.interval,
        args.timeout,
    )
    runner = Runner(workers, args.interval, args.jitter, stop)
    runner.start()
    stop.wait()
    # Everything else runs in daemon threads: a probe in flight is abandoned rather than
    # waited for, and the /metrics server goes with the process (server.shutdown() would
    # wait up to half a second for its polling loop).
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
