"""Serve N simulated vLLM 0.32 engines' /metrics from one process: engine i on /engines/i/metrics,
--targets writes file_sd targets (one `instance` each), --manifest the fleet (also GET /fleet.json).
One asyncio loop, keep-alive, gzip when asked, as vLLM does (benchmarks/fleet/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .exposition import load_template
from .fleet import plan, write_file_sd, write_manifest
from .load_model import Engine, Layout, load_profiles, resolve_profile

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


class Fleet:
    def __init__(self, engines: int, unhealthy: int = 1, seed: int = 1, start: float | None = None) -> None:
        self.profiles = load_profiles()
        self.members = plan(engines, self.profiles, unhealthy=unhealthy, seed=seed)
        template = load_template()
        layout = Layout.of(template, self.profiles)
        start = time.time() if start is None else start
        rng = np.random.default_rng(seed)
        self.engines = [
            Engine(
                layout,
                self.profiles,
                resolve_profile(self.profiles, m.model, m.condition),
                m.model,
                np.random.default_rng(rng.integers(2**63)),
                start,
                phase=rng.uniform(0, 2 * math.pi),
            )
            for m in self.members
        ]
        self.scrapes = 0

    def exposition(self, index: int) -> bytes:
        self.scrapes += 1
        return self.engines[index].exposition(time.time()).encode()

    def manifest(self) -> bytes:
        return json.dumps([asdict(m) for m in self.members]).encode()


def route(fleet: Fleet, path: str) -> bytes | None:
    parts = path.split("?", 1)[0].strip("/").split("/")
    if len(parts) == 3 and parts[0] == "engines" and parts[2] == "metrics" and parts[1].isdigit():
        index = int(parts[1])
        return fleet.exposition(index) if index < len(fleet.engines) else None
    if parts == ["fleet.json"]:
        return fleet.manifest()
    if parts == ["health"]:
        return b"ok\n"
    return None


# A path's answer: (status line, body), or None for 404.
# (status, body) or (status, body, the body gzipped), or None for a 404.
Answer = Callable[[str], "tuple[bytes, ...] | None"]


async def serve_connection(
    answer: Answer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answer GET/HEAD requests on one keep-alive connection until the client closes it."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
            found = answer(path) if method in ("GET", "HEAD") else None
            status, body, *packed = found if found is not None else (b"404 Not Found", b"not found\n")
            extra = b""
            if "gzip" in headers.get("accept-encoding", "") and len(body) > 1024:
                # An answer may bring its body compressed already (one compression, many scrapers).
                body = packed[0] if packed else gzip.compress(body, compresslevel=1)
                extra = b"Content-Encoding: gzip\r\n"
            close = headers.get("connection", "").lower() == "close"
            writer.write(
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: "
                + CONTENT_TYPE
                + b"\r\n"
                + extra
                + b"Content-Length: "
                + str(len(body)).encode()
                + b"\r\n"
                + (b"Connection: close\r\n" if close else b"")
                + b"\r\n"
                + (body if method == "GET" else b"")
            )
            await writer.drain()
            if close:
                break
    except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.LimitOverrunError):
        pass
    except asyncio.CancelledError:
        # The server shutting down with a scraper's connection open: end quietly. Python 3.11's
        # stream callback reads a cancelled handler's exception and prints a traceback per
        # connection at the end of every run.
        pass
    finally:
        writer.close()


async def serve(fleet: Fleet, host: str, port: int, ready: asyncio.Event | None = None) -> None:
    def answer(path: str) -> tuple[bytes, bytes] | None:
        body = route(fleet, path)
        return None if body is None else (b"200 OK", body)

    server = await asyncio.start_server(lambda r, w: serve_connection(answer, r, w), host, port, backlog=4096)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        if ready:
            ready.set()
        print(f"serving {len(fleet.engines)} engines on http://{host}:{port}/engines/<i>/metrics", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet.simulator", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--engines", type=int, required=True, help="number of engines")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--unhealthy", type=int, default=1, help="engines of each unhealthy condition (default 1)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--targets", type=Path, help="write the file_sd targets file here")
    parser.add_argument("--manifest", type=Path, help="write the fleet manifest (JSON) here")
    args = parser.parse_args(argv)
    if args.engines < 1:
        parser.error("--engines must be at least 1")
    try:
        fleet = Fleet(args.engines, unhealthy=args.unhealthy, seed=args.seed)
    except ValueError as exc:
        print(f"simulator: {exc}", file=sys.stderr)
        return 2
    if args.targets:
        write_file_sd(args.targets, fleet.members, f"{args.host}:{args.port}")
    if args.manifest:
        write_manifest(args.manifest, fleet.members, fleet.profiles)
    try:
        asyncio.run(serve(fleet, args.host, args.port))
    except OSError as exc:
        print(
            f"simulator: cannot listen on {args.host}:{args.port}: {exc.strerror}; pick another --port.",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
