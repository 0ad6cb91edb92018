"""Shared fixtures: the real vLLM server, started once per test session where it can."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import binary_guard
from tests.support.rule_slices import PASSED_DIR_ENV
from tests.support.vllm_server import VllmServer, send_traffic

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent

binary_guard.install()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real-vLLM tests first, in their order: xdist's worksteal hands the first worker the head
    of the list and steals from tails, so one worker runs them from the start, one server at a time
    and one shared `vllm_server` (docs/testing.md)."""
    items.sort(key=lambda item: item.get_closest_marker("vllm") is None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    binary_guard.running(item.nodeid, {mark.name for mark in item.iter_markers()})
    try:
        yield
    finally:
        binary_guard.stopped()


@pytest.fixture(scope="session", autouse=True)
def promtool_passes_shared_by_workers(tmp_path_factory: pytest.TempPathFactory):
    """One folder per run, shared by its xdist workers (their temp folders have one parent), where
    a promtool run that passed is marked so that no worker repeats it."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "promtool-passed"
    folder.mkdir(exist_ok=True)
    os.environ[PASSED_DIR_ENV] = str(folder)
    yield
    os.environ.pop(PASSED_DIR_ENV, None)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):
    """One real vLLM CPU server for every test that only reads from it.

    Tests that kill or break a server start their own.
    """
    server = VllmServer(tmp_path_factory.mktemp("vllm") / "vllm.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_with_traffic(vllm_server: VllmServer) -> VllmServer:
    counts = send_traffic(vllm_server)
    assert counts.get("200", 0) >= 8 and counts.get("400", 0) >= 2, counts
    return vllm_server
