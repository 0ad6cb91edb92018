"""The log exporter against the exporters' contract, both ways, with the real program: `--once` over
every fixture log and one log per startup-failure reason, and a live exporter following a real start
with three unreadable paths. The probe's runs are tests/probe/test_contract.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import vllm_obs_contract
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from vllm_log_exporter.contract import ContractError, closed_values, family
from vllm_log_exporter.patterns import load_patterns
from vllm_obs_contract import Exporter, Family

from tests.support.polling import wait_until
from tests.support.vllm_server import free_port

from .contract_check import Scrape, parse, series, undeclared, unseen, with_value, without_value
from .helpers import HONOUR_FILE_MODES, LOGS, exporter, run_once

pytestmark = pytest.mark.slow

CONTRACT = vllm_obs_contract.log_exporter()

UNREACHABLE: dict[str, str] = {}
"""Closed values no real run can show non-zero -> why, in one line. There are none: a new
one fails the test until someone decides it belongs here."""

# A real capture, cut after the first line holding each marker: the server is starting,
# loading its model, ready (what a live exporter serves during a startup).
STARTUP = LOGS / "vllm-0.32.0-cpu-start-stop.log"
CUTS = (b"non-default args", b"Starting to load model", b"Application startup complete.")


def reason_logs(directory: Path) -> list[Path]:
    """One log per startup-failure reason of the contract: a start line, then the sample line of the
    first pattern that fails a startup for that reason. The fixture logs show two reasons only
    (kv_cache_too_small, no_cache_memory)."""
    patterns = load_patterns()
    start = next(p.sample for p in patterns if p.kind == "startup_begin")
    logs = []
    for reason in CONTRACT["vllm_log_startup_failures"].values("reason"):
        failure = next((p for p in patterns if p.kind == "startup_failed" and p.reason == reason), None)
        if failure is None:
            continue  # no line of vLLM's says so: unseen() reports the reason
        log = directory / f"startup-failed-{reason}.log"
        log.write_text(f"{start}\n{failure.sample}\n", encoding="utf-8")
        logs.append(log)
    return logs


# The lines before an engine's death that give its cause, by reason (messages of vLLM and
# torch as they print them); `other` has none.
DEATH_CAUSES = {
    "out_of_memory": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has",
    "gpu_fault": "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    "nccl_timeout": "[Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=20518, "
    "OpType=ALLREDUCE) ran for 1800270 milliseconds before timing out.",
    "other": None,
}


def death_logs(directory: Path) -> list[Path]:
    """One log per engine-death reason of the contract: a server that started and served,
    then the line giving the cause, then the API server's EngineDeadError."""
    logs = []
    for reason in CONTRACT["vllm_log_engine_deaths"].values("reason"):
        cause = DEATH_CAUSES[reason]
        lines = [
            "(APIServer pid=1) INFO 11-29 10:00:00 [api_utils.py:286] non-default args: {'model': 'm'}",
            "(APIServer pid=1) INFO:     Application startup complete.",
            *([f"(EngineCore pid=7) ERROR 11-29 10:05:00 [core.py:1] {cause}"] if cause else []),
            "(APIServer pid=1) ERROR 11-29 10:05:00 [async_llm.py:1] vllm.v1.engine.exceptions.EngineDeadError: "
            "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        ]
        log = directory / f"engine-dead-{reason}.log"
        log.write_text("\n".join(lines) + "\n", encoding="utf-8")
        logs.append(log)
    return logs


def faulted_log(directory: Path) -> Path:
    """The 0.34 fault-tolerance log cut after its first refused request: a server whose engine
    fault tolerance holds (the state only a log that ends there shows)."""
    lines = (LOGS / "constructed-v0.34-fault-tolerance.log").read_bytes().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if b" - rejecting request " in line) + 1
    log = directory / "engine-faulted.log"
    log.write_bytes(b"".join(lines[:end]))
    return log


def once_scrapes(logs: list[Path]) -> list[Scrape]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda log: parse(f"--once {log.name}", run_once(log)), logs))


def live_scrapes(directory: Path) -> list[Scrape]:
    """A live exporter following STARTUP as it is written, with three paths it cannot read:
    a missing file, a file of mode 000 (as root, read without the capabilities that bypass
    file modes) and a directory."""
    log, missing, unreadable, folder = (
        directory / name for name in ("vllm.log", "missing.log", "mode-000.log", "directory.log")
    )
    log.write_bytes(b"")
    unreadable.write_text("never read\n")
    unreadable.chmod(0)
    folder.mkdir()
    paths = [arg for path in (log, missing, unreadable, folder) for arg in ("--log-file", str(path))]
    lines = STARTUP.read_bytes().splitlines(keepends=True)
    with exporter(*paths, port=free_port(), prefix=HONOUR_FILE_MODES) as running:
        errors = [
            series("vllm_log_read_errors_total", "reason", r)
            for r in ("not_found", "permission_denied", "io_error")
        ]
        wait_until(lambda: all(running.metrics()[e] == 1 for e in errors), what="every read error")
        scrapes = [parse("live: an empty log and three paths it cannot read", running.text())]
        written = 0
        for marker in CUTS:
            end = next(i for i in range(written, len(lines)) if marker in lines[i]) + 1
            with open(log, "ab") as out:
                out.write(b"".join(lines[written:end]))
            written = end
            running.wait_for("vllm_log_bytes_total", log.stat().st_size)
            scrapes.append(parse(f"live: up to {marker.decode()!r}", running.text()))
    return scrapes


def test_the_log_exporter_serves_what_the_contract_declares_and_all_of_it(tmp_path: Path) -> None:
    logs = [*sorted(LOGS.glob("*.log")), *reason_logs(tmp_path), *death_logs(tmp_path), faulted_log(tmp_path)]
    scrapes = [*once_scrapes(logs), *live_scrapes(tmp_path)]
    assert undeclared(CONTRACT, scrapes) == {}
    assert unseen(CONTRACT, scrapes) == set(UNREACHABLE)

    # The same scrapes against doctored copies of the contract: each disagreement shows.
    bogus = with_value(CONTRACT, "vllm_log_startup_failures", "reason", "bogus")
    assert undeclared(bogus, scrapes) == {}
    assert unseen(bogus, scrapes) == {series("vllm_log_startup_failures", "reason", "bogus"), *UNREACHABLE}
    lacking = without_value(CONTRACT, "vllm_log_files", "state", "missing")
    assert set(undeclared(lacking, scrapes)) == {'vllm_log_files{state="missing"} is not in the contract'}


# -- the exporter's reading of the contract --------------------------------------------------


def test_families_are_built_from_the_contract_and_only_from_it() -> None:
    built = family(CounterMetricFamily, "vllm_log_lines", value=3)
    spec = CONTRACT["vllm_log_lines"]
    assert (built.name, built.documentation, built.type) == (spec.name, spec.help, "counter")
    assert [(s.name, s.labels, s.value) for s in built.samples] == [("vllm_log_lines_total", {}, 3)]
    with pytest.raises(KeyError, match="vllm_log_bogus is not a family of vllm-log-exporter"):
        family(CounterMetricFamily, "vllm_log_bogus")
    with pytest.raises(
        ContractError, match="vllm_log_files is a gauge in the exporters' contract, not a counter"
    ):
        family(CounterMetricFamily, "vllm_log_files")


def test_a_value_the_exporter_names_must_be_in_the_contract() -> None:
    states = CONTRACT["vllm_log_files"].values("state")
    assert closed_values("state", "vllm_log_files", named=("missing",)) == states
    with pytest.raises(ContractError, match="has no value rotating in the exporters' contract"):
        closed_values("state", "vllm_log_files", named=("missing", "rotating"))
    # Families rendered from one set must have the same set in the contract.
    with pytest.raises(ContractError, match="label state has other values in vllm_log_server_state"):
        closed_values("state", "vllm_log_files", "vllm_log_server_state")


# -- the comparison, on a small contract ---------------------------------------------------

TINY = Exporter(
    "tiny",
    {
        "t_events": Family("t_events", "counter", "Events.", {"event": ("a", "b")}),
        "t_state": Family("t_state", "gauge", "State.", {"state": ("up", "down")}),
        "t_seconds": Family("t_seconds", "histogram", "Durations.", {"phase": ("x",)}),
        "t_info": Family("t_info", "gauge", "Info.", {"version": None}, when="once known"),
    },
)


def scrape(run: str, *families: Metric) -> Scrape:
    class Fixed:
        def collect(self) -> tuple[Metric, ...]:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    return parse(run, generate_latest(registry).decode())


def events(**values: float) -> CounterMetricFamily:
    family = CounterMetricFamily("t_events", "Events.", labels=["event"])
    for event, value in values.items():
        family.add_metric([event], value)
    return family


def state(up: float, down: float, name: str = "t_state", help: str = "State.") -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help, labels=["state"])
    family.add_metric(["up"], up)
    family.add_metric(["down"], down)
    return family


def seconds(count: int) -> HistogramMetricFamily:
    family = HistogramMetricFamily("t_seconds", "Durations.", labels=["phase"])
    family.add_metric(["x"], [("1.0", count), ("+Inf", count)], sum_value=0.5 * count)
    return family


def info(*versions: str) -> GaugeMetricFamily:
    family = GaugeMetricFamily("t_info", "Info.", labels=["version"])
    for version in versions:
        family.add_metric([version], 1)
    return family


def test_scrapes_that_agree_and_cover_the_contract_report_nothing() -> None:
    scrapes = [
        scrape("first", events(a=1, b=0), state(1, 0), seconds(0), info()),
        scrape("second", events(a=1, b=2), state(0, 1), seconds(1), info("1.2")),
    ]
    assert undeclared(TINY, scrapes) == {}
    assert unseen(TINY, scrapes) == set()


def test_values_only_ever_at_zero_and_families_never_filled_are_unseen() -> None:
    scrapes = [scrape("only", events(a=1, b=0), state(1, 0), seconds(0), info())]
    assert unseen(TINY, scrapes) == {
        't_events{event="b"}',
        't_state{state="down"}',
        't_seconds{phase="x"}',
        "t_info",
    }


def test_what_the_contract_does_not_declare_is_undeclared() -> None:
    other = GaugeMetricFamily("t_other", "Other.", value=1)
    as_counter = CounterMetricFamily("t_state", "State.", labels=["state"])
    as_counter.add_metric(["up"], 1)
    relabelled = HistogramMetricFamily("t_seconds", "Durations.", labels=["stage"])
    relabelled.add_metric(["x"], [("+Inf", 1)], sum_value=1)
    found = undeclared(
        TINY,
        [
            scrape("values", events(b=1, a=1, c=1), state(1, 0, help="Other help."), seconds(1)),
            scrape("families", other, as_counter, relabelled),
        ],
    )
    assert found == {
        't_events{event="c"} is not in the contract': "values",
        "t_events serves event in the order ['b', 'a'], the contract ['a', 'b']": "values",
        "t_state has HELP 'Other help.', the contract 'State.'": "values",
        "t_other is not in the contract": "families",
        "t_state is a counter, the contract says gauge": "families",
        "t_state_total is not a sample of t_state (t_state)": "families",
        "t_seconds has labels ['stage'], the contract ['phase']": "families",
        "t_events has no samples, yet the contract has no `when` for it": "families",
    }


def test_doctored_copies_of_the_contract_are_reported() -> None:
    scrapes = [scrape("run", events(a=1, b=1), state(1, 1), seconds(1), info("1.2"))]
    assert unseen(with_value(TINY, "t_state", "state", "sideways"), scrapes) == {'t_state{state="sideways"}'}
    assert undeclared(without_value(TINY, "t_events", "event", "a"), scrapes) == {
        't_events{event="a"} is not in the contract': "run"
    }
    assert TINY["t_state"].values("state") == ("up", "down")  # the copies leave it alone
