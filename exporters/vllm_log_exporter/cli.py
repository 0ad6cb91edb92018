"""Command line: `vllm-log-exporter` (--log-file, --stdin, --once; usage in exporters/README.md).
Exit status: 0 on success or SIGTERM/SIGINT, 1 when it cannot serve (e.g. port in use),
2 for a usage or configuration error (one sentence on stderr).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from prometheus_client import generate_latest, start_http_server

from . import __version__, state
from .events import Settings
from .lines import DEFAULT_MAX_LINE_BYTES
from .metrics import build_registry
from .patterns import PatternError, load_patterns
from .pipeline import Pipeline
from .tailer import READ_SIZE, FileSource, StreamSource, Tailer

DEFAULT_LISTEN = "127.0.0.1:9400"


class UsageError(Exception):
    """A bad command line or configuration: reported as one sentence, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="vllm-log-exporter",
        description="Export vLLM failure and lifecycle events found in its logs as Prometheus metrics.",
    )
    source = parser.add_argument_group("input")
    source.add_argument(
        "--log-file",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="log file to follow (repeatable); may not exist yet",
    )
    source.add_argument("--stdin", action="store_true", help="read the log from standard input")
    source.add_argument(
        "--passthrough", action="store_true", help="with --stdin: copy the input to standard output"
    )
    source.add_argument(
        "--once",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="read FILE(s) to the end, print the metrics and exit",
    )
    serve = parser.add_argument_group("serving")
    serve.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"where to serve /metrics (default {DEFAULT_LISTEN}; 0.0.0.0:9400 in a container)",
    )
    serve.add_argument(
        "--state-file",
        type=Path,
        metavar="PATH",
        help="remember file positions and counts here, to resume after a restart",
    )
    serve.add_argument(
        "--from-end",
        action="store_true",
        help="skip what a file already holds when first seen (default: read it all)",
    )
    serve.add_argument(
        "--poll-interval",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="how often to look for new data when idle (default 0.5)",
    )
    serve.add_argument(
        "--linger",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --stdin only: keep serving this long after the input ends "
        "(default 60), so the last events get scraped",
    )
    tuning = parser.add_argument_group("tuning")
    tuning.add_argument(
        "--patterns",
        type=Path,
        metavar="FILE",
        help="use this patterns file instead of the built-in one",
    )
    tuning.add_argument(
        "--max-line-bytes",
        type=int,
        default=DEFAULT_MAX_LINE_BYTES,
        metavar="N",
        help=f"longer lines are counted and skipped (default {DEFAULT_MAX_LINE_BYTES})",
    )
    tuning.add_argument(
        "--dedup-window",
        type=float,
        default=Settings.window,
        metavar="SECONDS",
        help="log-time window in which repeated failure lines are one incident "
        f"(default {Settings.window:g})",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen expects HOST:PORT with a port from 1 to 65535, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def check_args(args: argparse.Namespace) -> None:
    if args.once is not None:
        for name in ("log_file", "stdin", "state_file"):
            if getattr(args, name):
                option = "--" + name.replace("_", "-")
                raise UsageError(f"--once reads files and exits, so it cannot be combined with {option}")
        missing = [str(p) for p in args.once if not p.is_file()]
        if missing:
            raise UsageError(f"--once: no such file: {', '.join(missing)}")
    elif not args.log_file and not args.stdin:
        raise UsageError("nothing to read: give --log-file PATH, --stdin, or --once FILE")
    if args.passthrough and not args.stdin:
        raise UsageError("--passthrough copies standard input, so it needs --stdin")
    if args.max_line_bytes < 1024:
        raise UsageError("--max-line-bytes must be at least 1024")
    if args.poll_interval <= 0 or args.dedup_window <= 0 or args.linger < 0:
        raise UsageError("--poll-interval and --dedup-window must be positive, --linger not negative")
    parse_listen(args.listen)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        check_args(args)
        patterns = load_patterns(args.patterns)
    except (UsageError, PatternError) as exc:
        print(f"vllm-log-exporter: error: {exc}", file=sys.stderr)
        return 2
    pipeline = Pipeline(
        patterns,
        time.time,
        settings=Settings(window=args.dedup_window, live=args.once is None),
        max_line_bytes=args.max_line_bytes,
    )
    if args.once is not None:
        return run_once(pipeline, args.once)
    try:
        return serve(pipeline, args)
    except (UsageError, state.StateError) as exc:
        print(f"vllm-log-exporter: error: {exc}", file=sys.stderr)
        return 2


def run_once(pipeline: Pipeline, files: Sequence[Path], out: Callable[[bytes], object] | None = None) -> int:
    """Read files to their end (in order, as one log), print the exposition."""
    for path in files:
        source = pipeline.new_source()
        try:
            with open(path, "rb") as stream:
                while data := stream.read(READ_SIZE):
                    pipeline.feed(source, data)
        except OSError as exc:
            print(f"vllm-log-exporter: error: cannot read {path}: {exc.strerror}", file=sys.stderr)
            return 2
        pipeline.flush(source)
    pipeline.finish()
    text = generate_latest(build_registry(pipeline.counts, pipeline.lock))
    (out or sys.stdout.buffer.write)(text)
    return 0


def serve(pipeline: Pipeline, args: argparse.Namespace) -> int:
    resume: dict[str, state.Resume] = {}
    if args.state_file is not None:
        saved = state.load(args.state_file)
        if saved is not None:
            resume = state.restore(saved, pipeline)
        state.check_writable(args.state_file)
    files = [
        FileSource(
            path,
            pipeline,
            resume=resume.get(str(path.absolute())),
            start_at_end=args.from_end,
        )
        for path in dict.fromkeys(p.absolute() for p in args.log_file)  # each path once
    ]
    stream = None
    if args.stdin:
        stream = StreamSource(
            sys.stdin.fileno(),
            pipeline,
            passthrough_fd=sys.stdout.fileno() if args.passthrough else None,
        )
    tailer = Tailer(pipeline, files, stream)
    keeper = state.StateKeeper(args.state_file, pipeline, tailer) if args.state_file else None

    host, port = parse_listen(args.listen)
    try:
        server, _thread = start_http_server(port, host, build_registry(pipeline.counts, pipeline.lock))
    except OSError as exc:
        print(
            f"vllm-log-exporter: error: cannot listen on {args.listen}: {exc.strerror}",
            file=sys.stderr,
        )
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"vllm-log-exporter: serving /metrics on {args.listen}", file=sys.stderr, flush=True)

    ended_at: float | None = None
    try:
        while not stop.is_set():
            read = tailer.poll()
            if keeper is not None:
                keeper.after_poll(read)
            if stream is not None and stream.closed and not files:
                ended_at = ended_at or time.monotonic()
                if time.monotonic() - ended_at >= args.linger:
                    break
            if read == 0:
                stop.wait(args.poll_interval)
    finally:
        if keeper is not None:
            keeper.save()
        tailer.close()
        server.shutdown()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
