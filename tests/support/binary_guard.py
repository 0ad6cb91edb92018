"""Fail a test that runs a real server or tool without the marker `make check` leaves out. An audit
hook sees every process a test starts; it cannot be removed, so it reads the running test's markers
(None between tests: a session's own set-up is not judged)."""

from __future__ import annotations

import os
import sys

# Executable name -> the marker that allows it.
MARKER_OF_BINARY = {
    "promtool": "prometheus",
    "amtool": "prometheus",
    "prometheus": "prometheus",
    "prometheus-alertmanager": "prometheus",
    "alertmanager": "prometheus",
    "mtail": "prometheus",
}
VLLM_SERVER_MODULE = "vllm.entrypoints"

# The running test's node id and markers; None between tests.
_current: dict[str, str | frozenset[str] | None] = {"markers": None, "test": None}


class UnmarkedBinaryRun(RuntimeError):
    """A test ran a binary its markers do not declare."""


def needed_marker(argv: list[str]) -> str | None:
    """The marker a command needs, or None for any other command."""
    if not argv:
        return None
    name = os.path.basename(str(argv[0]))
    if name in MARKER_OF_BINARY:
        return MARKER_OF_BINARY[name]
    if any(str(arg).startswith(VLLM_SERVER_MODULE) for arg in argv[1:3]):
        return "vllm"
    return None


def _hook(event: str, args: tuple) -> None:
    markers = _current["markers"]
    if event != "subprocess.Popen" or markers is None:
        return
    argv = args[1]
    argv = [argv] if isinstance(argv, (str, bytes)) else list(argv)
    marker = needed_marker(argv)
    if marker is not None and marker not in markers and "drill" not in markers:
        raise UnmarkedBinaryRun(
            f"{_current['test']} runs {os.path.basename(str(argv[0]))} without "
            f"@pytest.mark.{marker}; mark it so `make check` leaves it out"
        )


def install() -> None:
    sys.addaudithook(_hook)


def running(test: str, markers: set[str]) -> None:
    _current["test"], _current["markers"] = test, frozenset(markers)


def stopped() -> None:
    _current["test"], _current["markers"] = None, None
