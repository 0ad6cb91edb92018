"""--metrics-url against real HTTP(S) servers on loopback: bearer token and TLS."""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from vllm_obs.cli import main as vllm_obs

pytestmark = pytest.mark.slow

GOOD = (Path(__file__).parent.parent / "fixtures" / "metrics" / "vllm-0.32.0-cpu-traffic.prom").read_bytes()
TOKEN = "s3cret-token"


class Guarded(BaseHTTPRequestHandler):
    """Serves the real exposition only with the right bearer token, as a proxy might."""

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_response(401)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(GOOD)))
        self.end_headers()
        self.wfile.write(GOOD)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve(tls: ssl.SSLContext | None = None) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Guarded)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    scheme = "https" if tls else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def self_signed(tmp: Path) -> ssl.SSLContext:
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=vllm.test",
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def test_bearer_token_from_a_file(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    with serve() as url:
        assert vllm_obs(["generate", "--metrics-url", url, "--out", str(tmp_path / "no")]) == 2
        assert "HTTP 401" in capsys.readouterr().err
        code = vllm_obs(
            [
                "generate",
                "--metrics-url",
                url,
                "--bearer-token-file",
                str(token),
                "--out",
                str(tmp_path / "b"),
            ]
        )
    assert code == 0
    assert (tmp_path / "b" / "alerts" / "vllm-alerts.rules.yml").exists()
    assert not (tmp_path / "no").exists()


def test_bearer_token_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_OBS_BEARER_TOKEN", TOKEN)
    with serve() as url:
        assert vllm_obs(["generate", "--metrics-url", url, "--out", str(tmp_path / "b")]) == 0


def test_tls_verification_and_its_toggle(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VLLM_OBS_BEARER_TOKEN", TOKEN)
    with serve(self_signed(tmp_path)) as url:
        assert vllm_obs(["generate", "--metrics-url", url, "--out", str(tmp_path / "no")]) == 2
        err = capsys.readouterr().err
        assert "TLS certificate" in err and "--insecure-skip-verify" in err
        code = vllm_obs(
            ["generate", "--metrics-url", url, "--insecure-skip-verify", "--out", str(tmp_path / "b")]
        )
    assert code == 0
