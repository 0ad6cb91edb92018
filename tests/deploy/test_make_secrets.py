"""`make secrets` (stack/make_secrets.py) on real files: random secrets when missing, kept
when present, a private folder, one sentence and status 2 for what the user must fix."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

from stack.make_secrets import GENERATED

from .stackfiles import REPO

SCRIPT = REPO / "stack" / "make_secrets.py"


def run(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(directory)], capture_output=True, text=True, timeout=60
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_creates_random_secrets_in_a_private_folder(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "secrets", tmp_path / "b" / "secrets"
    assert run(first).returncode == 0 and run(second).returncode == 0
    for name in GENERATED:
        value = (first / name).read_text()
        assert value.endswith("\n") and len(value.strip()) >= 40  # 32 random bytes, base64
        assert value != (second / name).read_text()  # random, not a default
        assert mode(first / name) == 0o644  # the containers' own users read it...
    assert mode(first) == 0o700  # ...and nobody else on the host can reach it
    assert mode(first / "alertmanager") == 0o755
    assert (first / "grafana-admin-password").read_text() != (first / "vllm-api-key").read_text()


def test_says_where_each_secret_is(tmp_path: Path) -> None:
    result = run(tmp_path / "secrets")
    lines = result.stdout.splitlines()
    for name in GENERATED:
        assert any(line.startswith("created") and str(tmp_path / "secrets" / name) in line for line in lines)
    assert result.stderr == ""


def test_existing_secrets_are_kept(tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    directory.mkdir(mode=0o755)
    (directory / "grafana-admin-password").write_text("my own password\n")
    (directory / "grafana-admin-password").chmod(0o600)
    result = run(directory)
    assert result.returncode == 0, result.stderr
    assert (directory / "grafana-admin-password").read_text() == "my own password\n"
    assert "kept" in result.stdout and "created" in result.stdout  # the API key was missing
    assert mode(directory / "grafana-admin-password") == 0o644  # Grafana's user must read it
    assert mode(directory) == 0o700
    key = (directory / "vllm-api-key").read_text()
    assert run(directory).returncode == 0
    assert (directory / "vllm-api-key").read_text() == key  # a second run changes nothing


def test_an_empty_secret_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    directory.mkdir()
    (directory / "vllm-api-key").write_text("\n")
    result = run(directory)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "is empty" in result.stderr and "delete it" in result.stderr
    assert (directory / "vllm-api-key").read_text() == "\n"  # never overwritten


def test_a_file_where_the_folder_should_be(tmp_path: Path) -> None:
    (tmp_path / "secrets").write_text("")
    result = run(tmp_path / "secrets")
    assert result.returncode == 2 and result.stderr.strip().endswith("run `make secrets` again")


def test_alertmanager_files_in_the_old_place_are_pointed_out(tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    directory.mkdir()
    (directory / "pagerduty-routing-key").write_text("abc\n")
    result = run(directory)
    assert result.returncode == 0
    note = [line for line in result.stdout.splitlines() if line.startswith("note:")]
    assert len(note) == 1 and "pagerduty-routing-key" in note[0] and "alertmanager/" in note[0]


def test_make_generate_runs_make_secrets() -> None:
    plan = subprocess.run(
        ["make", "-n", "-C", str(REPO), "generate"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "stack/make_secrets.py secrets" in plan
    assert plan.index("make_secrets.py") < plan.index("vllm-obs generate")
