"""Shared fixtures: the real vLLM server, started once per test session where it can."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.vllm_server import VllmServer, send_traffic

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent


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
