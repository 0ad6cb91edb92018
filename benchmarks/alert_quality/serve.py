"""The simulated fleet over HTTP in real time, for a real Prometheus: /replicas/<instance>/metrics
(503 while its server does not answer), /replicas/<instance>/log, /probe/metrics and /health;
`targets` writes the file_sd files the bundle's scrape jobs expect. Time 0 is `start` (Unix time).
"""

from __future__ import annotations

import asyncio
import bisect
import gzip
import json
import time
from pathlib import Path

from ..fleet.simulator import serve_connection
from .canary import Canary
from .fleet import Fleet

UNAVAILABLE = (b"503 Service Unavailable", b"the server does not answer\n")


class Simulation:
    def __init__(
        self, fleet: Fleet, canary: Canary, start: float, scale: float = 1.0, chunk: float = float("inf")
    ) -> None:
        """chunk: the most simulated seconds one tick runs, so that a fleet catching up never
        holds the server (and every scrape waiting on it) longer than that takes."""
        self.fleet, self.canary, self.start, self.scale, self.chunk = fleet, canary, start, scale, chunk
        self.members = {m.instance: m for m in fleet.members}
        self._renders: dict[str, tuple] = {}
        self._logs: dict[str, tuple] = {}
        # After each tick: the wall time and the simulated time reached.
        self.walls: list[float] = [start]
        self.reached: list[float] = [0.0]
        self.slowest_tick = 0.0  # wall seconds: a tick longer than the scrape interval starves scrapes

    def tick(self, wall: float) -> bool:
        """Run the fleet and the canary towards the simulated time of wall-clock `wall`, at most
        `chunk` simulated seconds; whether they are still behind it."""
        target = (wall - self.start) * self.scale
        t = min(target, self.fleet.now + self.chunk)
        if t > self.fleet.now:
            began = time.monotonic()
            self.fleet.advance(t, metrics=False)  # each exposition is brought up to date when read
            self.canary.advance(t)
            self.slowest_tick = max(self.slowest_tick, time.monotonic() - began)
            self.walls.append(time.time())
            self.reached.append(t)
        return t < target

    def simulated(self, wall: float) -> float:
        """The simulated time the fleet had reached at wall time `wall` (a notification's time on
        the fleet's own clock, whether or not the fleet kept up with the wall clock)."""
        clock = (wall - self.start) * self.scale
        i = bisect.bisect_right(self.walls, wall) - 1
        if i < 0:
            return clock
        # Between two ticks the fleet was somewhere from the first's time to the next one's:
        # the clock's time, within those bounds.
        upper = self.reached[i + 1] if i + 1 < len(self.reached) else clock
        return max(self.reached[i], min(clock, upper))

    def behind(self) -> float:
        """The most simulated seconds the fleet was behind its clock after any tick."""
        return max((w - self.start) * self.scale - t for w, t in zip(self.walls, self.reached, strict=True))

    def answer(self, path: str) -> tuple[bytes, bytes] | None:
        parts = path.split("?", 1)[0].strip("/").split("/")
        if parts == ["health"]:
            return b"200 OK", b"ok\n"
        if parts == ["probe", "metrics"]:
            return b"200 OK", self.canary.exposition()
        if len(parts) == 3 and parts[0] == "replicas" and parts[1] in self.members:
            member = self.members[parts[1]]
            if parts[2] == "metrics":
                if not member.server.answering:
                    return UNAVAILABLE
                return (b"200 OK", *self._rendered(member))
            if parts[2] == "log":
                return (b"200 OK", *self._logged(member))
        return None

    def _rendered(self, member) -> tuple[bytes, bytes]:
        """The replica's exposition and its gzip, made once per tick however many Prometheus
        servers scrape it (every rule set of a run watches the same fleet)."""
        key = (self.fleet.now, id(member.metrics))
        cached = self._renders.get(member.instance)
        if cached is None or cached[0] != key:
            body = member.exposition().encode()
            cached = (key, body, gzip.compress(body, compresslevel=1))
            self._renders[member.instance] = cached
        return cached[1], cached[2]

    def _logged(self, member) -> tuple[bytes, ...]:
        """The log exporter's exposition, made again only when its log changed."""
        log = member.server.log
        key = (id(log), log.version)
        cached = self._logs.get(member.instance)
        if cached is None or cached[0] != key:
            cached = (key, log.exposition())
            self._logs[member.instance] = cached
        return (cached[1],)

    def targets(self, folder: Path, address: str) -> dict[str, Path]:
        """The file_sd files of the three scrape jobs, by job name."""
        return write_targets(list(self.members), folder, address)


def write_targets(instances: list[str], folder: Path, address: str) -> dict[str, Path]:
    """The file_sd files of the three scrape jobs for these replicas, by job name."""
    folder.mkdir(parents=True, exist_ok=True)
    by_job = {
        "vllm": [
            {
                "targets": [address],
                "labels": {"__metrics_path__": f"/replicas/{i}/metrics", "instance": i},
            }
            for i in instances
        ],
        "vllm-log-exporter": [
            {
                "targets": [address],
                "labels": {"__metrics_path__": f"/replicas/{i}/log", "__vllm_instance": i},
            }
            for i in instances
        ],
        "vllm-probe": [{"targets": [address], "labels": {"__metrics_path__": "/probe/metrics"}}],
    }
    out = {}
    for job, groups in by_job.items():
        path = folder / f"{job}.json"
        staged = path.with_suffix(".tmp")
        staged.write_text(json.dumps(groups, indent=1))
        staged.replace(path)  # Prometheus watches the file: never let it read half of it
        out[job] = path
    return out


async def serve(
    sim: Simulation, host: str, port: int, started: asyncio.Event, stop: asyncio.Event, step: float = 1.0
) -> None:
    """Serve until `stop` is set, the clock advanced every `step` wall seconds (between
    requests: one loop), or chunk by chunk with the requests in between while it is behind;
    `started` once listening."""
    server = await asyncio.start_server(lambda r, w: serve_connection(sim.answer, r, w), host, port)
    async with server:
        started.set()
        while not stop.is_set():
            if sim.tick(time.time()):
                await asyncio.sleep(0)  # behind: serve what waits, then the next chunk
                continue
            try:
                await asyncio.wait_for(stop.wait(), step)
            except asyncio.TimeoutError:  # the builtin TimeoutError only from Python 3.11
                pass
