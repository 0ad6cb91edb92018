"""Shared helpers for the log exporter tests: fixtures paths, a fake clock, canonical
expositions, and a running exporter subprocess."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from vllm_log_exporter.patterns import load_patterns
from vllm_log_exporter.pipeline import Pipeline

from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "fixtures" / "logs"
GOLDEN = Path(__file__).resolve().parent / "golden"


class FakeClock:
    """Wall clock for tests: starts at a fixed Unix time and moves only when told."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_pipeline(clock: Callable[[], float] | None = None, **kwargs) -> Pipeline:
    return Pipeline(load_patterns(), clock or FakeClock(), **kwargs)


def feed_text(pipeline: Pipeline, text: str | bytes, chunk: int | None = None) -> None:
    """Feed text as one source (in chunks of `chunk` bytes if given), then end it."""
    data = text.encode() if isinstance(text, str) else text
    source = pipeline.new_source()
    step = chunk or max(1, len(data))
    for start in range(0, len(data), step):
        pipeline.feed(source, data[start : start + step])
    pipeline.flush(source)
    pipeline.finish()


def samples(exposition: str) -> dict[str, float]:
    """{'name{label="v",...}': value} for every sample of a text exposition."""
    out = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def canonical(exposition: str) -> str:
    """Sorted `series value` lines; timestamps (wall clock) shown only as set or unset."""
    lines = []
    for series, value in sorted(samples(exposition).items()):
        name = series.split("{", 1)[0]
        if name.endswith("timestamp_seconds"):
            shown = "<set>" if value > 0 else "0"
        else:
            shown = format(value, ".12g")
        lines.append(f"{series} {shown}")
    return "\n".join(lines) + "\n"


# Run a command as root but bound by file modes: without these capabilities root gets
# EACCES like any user, so permission errors can be produced for real.
HONOUR_FILE_MODES = (
    ("setpriv", "--bounding-set", "-dac_override,-dac_read_search") if os.geteuid() == 0 else ()
)


def exporter_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "vllm_log_exporter.cli", *args]


def run_once(*files: Path | str, extra: tuple[str, ...] = ()) -> str:
    result = subprocess.run(
        exporter_command("--once", *map(str, files), *extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def fetch(url: str) -> str | None:
    """The exposition at url, or None while nothing answers there."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except (urllib.error.URLError, ConnectionError, OSError):
        return None


def scrape(url: str) -> dict[str, float] | None:
    exposition = fetch(url)
    return None if exposition is None else samples(exposition)


class ExporterProcess:
    """`vllm-log-exporter` as a real subprocess, serving on a free loopback port."""

    def __init__(
        self,
        *args: str,
        port: int,
        stdin: int | None = None,
        stdout: int | None = None,
        prefix: tuple[str, ...] = (),
    ) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.process = subprocess.Popen(
            [*prefix, *exporter_command("--listen", f"127.0.0.1:{port}", "--poll-interval", "0.05", *args)],
            stdin=stdin,
            stdout=stdout if stdout is not None else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def metrics(self) -> dict[str, float]:
        """Current samples, waiting for the server to answer."""
        return wait_until(lambda: self._alive_scrape(), what=f"{self.url} to answer")  # type: ignore[return-value]

    def text(self) -> str:
        """The current exposition, waiting for the server to answer."""
        return wait_until(lambda: self._alive_fetch(), what=f"{self.url} to answer")  # type: ignore[return-value]

    def _alive_fetch(self) -> str | None:
        if self.process.poll() is not None:
            raise AssertionError(f"exporter exited with {self.process.returncode}: {self.stderr()}")
        return fetch(self.url)

    def _alive_scrape(self) -> dict[str, float] | None:
        exposition = self._alive_fetch()
        return None if exposition is None else samples(exposition)

    def wait_for(self, series: str, value: float, timeout: float = 30.0) -> dict[str, float]:
        def check() -> dict[str, float] | None:
            current = self._alive_scrape()
            return current if current is not None and current.get(series) == value else None

        return wait_until(check, timeout, f"{series} == {value}")  # type: ignore[return-value]

    def kill9(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=20)

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read().decode(errors="replace")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


@contextlib.contextmanager
def exporter(*args: str, port: int, **kwargs) -> Iterator[ExporterProcess]:
    process = ExporterProcess(*args, port=port, **kwargs)
    try:
        yield process
    finally:
        process.close()
