"""Bad input gets one clear sentence, exit status 2, and leaves the output untouched."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from vllm_obs.cli import main as vllm_obs

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"
GOOD = (FIXTURES / "vllm-0.32.0-cpu-traffic.prom").read_text()


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def existing_bundle(tmp_path: Path, capsys) -> Path:
    """An output directory that already holds a bundle and a file of the user's own."""
    out = tmp_path / "bundle"
    assert vllm_obs(["generate", "--out", str(out)]) == 0
    (out / "NOTES.txt").write_text("mine\n")
    capsys.readouterr()
    return out


def run_failing(capsys, out: Path, *args: str) -> str:
    before = snapshot(out) if out.exists() else None
    code = vllm_obs(["generate", "--out", str(out), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vllm-obs: error: "), err
    assert lines[0].endswith("."), "one full sentence"
    after = snapshot(out) if out.exists() else None
    assert after == before, "the output directory changed"
    assert not [p for p in out.parent.rglob(".vllm-obs-staging-*")], "staging left behind"
    return lines[0]


class Responder(BaseHTTPRequestHandler):
    status = 200
    body = b""
    content_type = "text/plain; version=0.0.4"
    declared_length: int | None = None

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(self.declared_length or len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def http_server(**attrs: object) -> Iterator[str]:
    handler = type("Handler", (Responder,), attrs)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_connection(capsys, existing_bundle):
    line = run_failing(capsys, existing_bundle, "--metrics-url", f"http://127.0.0.1:{closed_port()}/metrics")
    assert "connection refused" in line and "vLLM is running" in line


def test_timeout(capsys, existing_bundle):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    try:
        port = listener.getsockname()[1]
        line = run_failing(
            capsys, existing_bundle, "--metrics-url", f"http://127.0.0.1:{port}/metrics", "--timeout", "0.5"
        )
    finally:
        listener.close()
    assert "did not answer within 0.5 s" in line


@pytest.mark.parametrize(
    "status, phrase",
    [
        (401, "--bearer-token-file"),
        (403, "not authorised"),
        (404, "no such page"),
        (500, "server error"),
        (503, "server error"),
    ],
)
def test_http_error_status(capsys, existing_bundle, status, phrase):
    with http_server(status=status, body=b"nope") as url:
        line = run_failing(capsys, existing_bundle, "--metrics-url", url)
    assert f"HTTP {status}" in line and phrase in line


def test_html_page_from_a_proxy(capsys, existing_bundle):
    page = b"<!DOCTYPE html><html><body>Please log in</body></html>"
    with http_server(body=page, content_type="text/html; charset=utf-8") as url:
        line = run_failing(capsys, existing_bundle, "--metrics-url", url)
    assert "HTML page" in line


def test_html_page_saved_to_a_file(capsys, existing_bundle, tmp_path):
    saved = tmp_path / "metrics.prom"
    saved.write_text("<html><head><title>502 Bad Gateway</title></head></html>\n")
    assert "HTML page" in run_failing(capsys, existing_bundle, "--metrics-file", str(saved))


def test_empty_body(capsys, existing_bundle):
    with http_server(body=b"") as url:
        assert "is empty" in run_failing(capsys, existing_bundle, "--metrics-url", url)


def test_connection_closed_before_the_announced_length(capsys, existing_bundle):
    body = GOOD.encode()[:5000]
    with http_server(body=body, declared_length=len(GOOD.encode())) as url:
        assert "truncated" in run_failing(capsys, existing_bundle, "--metrics-url", url)


@pytest.mark.parametrize(
    "cut_after",
    [
        'vllm:num_requests_running{engine="0",mod',
        'vllm:num_requests_running{engine="0",model_name="tiny-llama"}',
    ],
)
def test_file_truncated_mid_line(cut_after, capsys, existing_bundle, tmp_path):
    """Cut inside a label set, or before the value."""
    at = GOOD.index(cut_after) + len(cut_after)
    saved = tmp_path / "cut.prom"
    saved.write_text(GOOD[:at])
    assert "truncated" in run_failing(capsys, existing_bundle, "--metrics-file", str(saved))


def test_a_whole_last_line_without_its_newline_is_kept(capsys, tmp_path):
    """Saved by an editor or pasted without the final newline (as the real GPU exposition in
    ../shared/reference/field was): every line is whole, so it is a bundle."""
    saved = tmp_path / "metrics.prom"
    saved.write_text(GOOD.rstrip("\n"))
    out = tmp_path / "bundle"
    assert vllm_obs(["generate", "--out", str(out), "--metrics-file", str(saved)]) == 0
    assert "wrote" in capsys.readouterr().err
    fresh = tmp_path / "fresh"
    (tmp_path / "whole.prom").write_text(GOOD)
    assert vllm_obs(["generate", "--out", str(fresh), "--metrics-file", str(tmp_path / "whole.prom")]) == 0
    rules = "alerts/vllm-alerts.rules.yml"
    as_pasted = snapshot(out)[rules].decode().replace(str(saved), str(tmp_path / "whole.prom"))
    assert as_pasted == snapshot(fresh)[rules].decode()


def test_file_truncated_at_a_line_boundary_inside_a_histogram(capsys, existing_bundle, tmp_path):
    lines = GOOD.splitlines(keepends=True)
    cut = next(
        i
        for i, line in enumerate(lines)
        if "time_to_first_token_seconds_bucket" in line and 'le="1.0"' in line
    )
    saved = tmp_path / "cut.prom"
    saved.write_text("".join(lines[: cut + 1]))
    line = run_failing(capsys, existing_bundle, "--metrics-file", str(saved))
    assert "incomplete histogram vllm:time_to_first_token_seconds" in line


def test_garbled_exposition(capsys, existing_bundle, tmp_path):
    saved = tmp_path / "garbled.prom"
    saved.write_text(
        GOOD.replace('vllm:num_requests_running{engine="0"', 'vllm:num_requests_running{engine="0', 1)
    )
    assert "not valid Prometheus text format" in run_failing(
        capsys, existing_bundle, "--metrics-file", str(saved)
    )


def test_binary_garbage(capsys, existing_bundle, tmp_path):
    saved = tmp_path / "garbage.prom"
    saved.write_bytes(os.urandom(2048).replace(b"<", b"x") + b"\n")
    line = run_failing(capsys, existing_bundle, "--metrics-file", str(saved))
    assert "UTF-8" in line or "not valid Prometheus text format" in line


def test_exposition_without_vllm_series(capsys, existing_bundle, tmp_path):
    saved = tmp_path / "node.prom"
    saved.write_text("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    assert "has no vllm: series" in run_failing(capsys, existing_bundle, "--metrics-file", str(saved))


def test_series_renamed_by_an_unknown_platform_are_named(capsys, existing_bundle, tmp_path):
    """Ray's renaming is understood (test_platforms.py); a renaming nobody documents is refused."""
    saved = tmp_path / "renamed.prom"
    saved.write_text("# TYPE myco_vllm_num_requests_running gauge\nmyco_vllm_num_requests_running 1\n")
    line = run_failing(capsys, existing_bundle, "--metrics-file", str(saved))
    assert "myco_vllm_num_requests_running" in line and "no known platform" in line


def test_missing_metrics_file(capsys, existing_bundle, tmp_path):
    assert "does not exist" in run_failing(
        capsys, existing_bundle, "--metrics-file", str(tmp_path / "nope.prom")
    )


@pytest.mark.parametrize("version", ["0.5.5", "0.35.0", "banana"])
def test_unknown_vllm_version(capsys, existing_bundle, version):
    line = run_failing(capsys, existing_bundle, "--vllm-version", version)
    assert version in line


def test_engine_the_release_does_not_have(capsys, existing_bundle):
    assert "no v0 engine" in run_failing(
        capsys, existing_bundle, "--vllm-version", "0.12.0", "--engine", "v0"
    )


def test_unknown_config_key_is_named(capsys, existing_bundle, tmp_path):
    config = tmp_path / "c.yml"
    config.write_text(yaml.safe_dump({"alerts": {"ttft_p95_warning_secs": 3}}))
    line = run_failing(capsys, existing_bundle, "--config", str(config))
    assert "unknown config key 'alerts.ttft_p95_warning_secs'" in line


def test_wrongly_typed_config_value_is_named(capsys, existing_bundle, tmp_path):
    config = tmp_path / "c.yml"
    config.write_text(yaml.safe_dump({"alerts": {"kv_usage_threshold": "high"}}))
    assert "'alerts.kv_usage_threshold'" in run_failing(capsys, existing_bundle, "--config", str(config))


def test_slo_threshold_must_be_a_bucket_bound(capsys, existing_bundle, tmp_path):
    config = tmp_path / "c.yml"
    config.write_text(yaml.safe_dump({"slo": {"ttft_threshold_seconds": 2.0}}))
    line = run_failing(capsys, existing_bundle, "--config", str(config))
    assert "slo.ttft_threshold_seconds = 2 is not a histogram bucket bound" in line
    assert "1, 2.5, 5" in line  # the valid bounds are listed


def test_out_is_an_existing_file(capsys, tmp_path):
    target = tmp_path / "occupied"
    target.write_text("a file\n")
    line = run_failing(capsys, target / "bundle")
    assert "cannot write to" in line
    assert target.read_text() == "a file\n"


def test_out_without_permission(capsys, tmp_path):
    out = tmp_path / "locked"
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    if os.geteuid() == 0:
        # root ignores permission bits: make the directory immutable for a real refusal.
        subprocess.run(["chattr", "+i", str(out)], check=True)
        expected = "Operation not permitted"
    else:
        out.chmod(0o555)
        expected = "Permission denied"
    try:
        line = run_failing(capsys, out)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(out)], check=True)
        out.chmod(0o755)
    assert "cannot write to" in line and expected in line
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(
    ("section", "setting", "value", "bounds"),
    [
        ("alerts", "ttft_p95_warning_seconds", 2.0, "1, 2.5, 5"),  # inside (1, 2.5]: the p95 interpolates
        ("alerts", "itl_p95_warning_seconds", 0.25, "0.2, 0.3, 0.4"),
    ],
)
def test_quantile_threshold_must_be_a_bucket_bound(
    capsys, existing_bundle, tmp_path, section, setting, value, bounds
):
    config = tmp_path / "c.yml"
    config.write_text(yaml.safe_dump({section: {setting: value}}))
    line = run_failing(capsys, existing_bundle, "--config", str(config))
    assert f"{section}.{setting} = {value:g} is not a histogram bucket bound" in line
    assert bounds in line  # the valid bounds are listed
