"""`make check` runs no binary: a test that starts one without its marker fails."""

import subprocess

import pytest

from tests.support.binary_guard import UnmarkedBinaryRun, needed_marker


def test_an_unmarked_test_cannot_start_promtool():
    with pytest.raises(UnmarkedBinaryRun, match="without @pytest.mark.prometheus"):
        subprocess.run(["promtool", "--version"], capture_output=True)


def test_an_unmarked_test_cannot_start_a_vllm_server():
    with pytest.raises(UnmarkedBinaryRun, match="without @pytest.mark.vllm"):
        subprocess.run(["python3", "-m", "vllm.entrypoints.openai.api_server"], capture_output=True)


@pytest.mark.prometheus
def test_a_marked_test_may():
    assert needed_marker(["/usr/bin/promtool", "--version"]) == "prometheus"
    assert subprocess.run(["promtool", "--version"], capture_output=True).returncode == 0


def test_other_commands_need_no_marker():
    assert needed_marker(["git", "status"]) is None
    assert needed_marker(["python3", "-c", "print(1)"]) is None
    assert subprocess.run(["true"]).returncode == 0
