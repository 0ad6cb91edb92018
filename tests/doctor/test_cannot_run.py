"""When the doctor itself cannot run: one sentence on stderr, exit 2, nothing on stdout."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.bundles import generate
from tests.support.doctor_stack import LoopbackServer, Page, WebPrometheus, doctor
from tests.support.vllm_server import free_port

# bcrypt (cost 4) of "doctor-secret", made once with crypt.crypt(..., METHOD_BLOWFISH):
# Prometheus's web config only takes bcrypt hashes.
PASSWORD = "doctor-secret"
PASSWORD_HASH = "$2b$04$bPLD.WaTiBdXO9V5hiw3beTxom9nkwc2g6jr3m8YA5K7O2di29mdm"
LOGIN_PAGE = "<!DOCTYPE html><html><head><title>Sign in</title></head><body><form>...</form></body></html>\n"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("bundle") / "bundle")


def one_sentence(run, *needles: str) -> None:
    assert run.code == 2, (run.code, run.out, run.err)
    assert run.out == "", run.out
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("vllm-obs: error: ") and lines[0].endswith("."), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_prometheus_unreachable(bundle):
    url = f"http://127.0.0.1:{free_port()}"
    one_sentence(
        doctor("--prometheus", url, "--bundle", str(bundle)), "cannot reach Prometheus", "refused", url
    )


def test_an_html_page_instead_of_the_api(bundle):
    """Stand-in: a proxy that answers every path with its login page (HTTP 200, text/html)."""
    pages = {p: Page(200, LOGIN_PAGE, "text/html; charset=utf-8") for p in ("/api/v1/query", "/")}
    with LoopbackServer(pages) as proxy:
        run = doctor("--prometheus", proxy.url, "--bundle", str(bundle))
    one_sentence(run, "HTML page", "not the Prometheus API", "path prefix")


@pytest.mark.prometheus
def test_refused_credentials_and_wrong_prefix_on_a_real_prometheus(bundle, tmp_path):
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  doctor: '{PASSWORD_HASH}'\n")
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: 15s}\n")
    password = tmp_path / "password"
    password.write_text(PASSWORD + "\n")
    with WebPrometheus(config, tmp_path, web_config=web, auth=("doctor", PASSWORD)) as prom:
        base = ("--prometheus", prom.url, "--bundle", str(bundle))
        one_sentence(doctor(*base), "HTTP 401", "--basic-auth-user")
        wrong = tmp_path / "wrong"
        wrong.write_text("not-it")
        one_sentence(
            doctor(*base, "--basic-auth-user", "doctor", "--basic-auth-password-file", str(wrong)), "HTTP 401"
        )
        # The right credentials get past the door (the stack itself is empty, so it is broken: 1).
        ok = doctor(*base, "--basic-auth-user", "doctor", "--basic-auth-password-file", str(password))
        assert ok.code == 1 and "Verdict: BROKEN" in ok.out, ok.err
        # A path under which there is no API.
        one_sentence(
            doctor(
                "--prometheus",
                prom.url + "/prometheus",
                "--bundle",
                str(bundle),
                "--basic-auth-user",
                "doctor",
                "--basic-auth-password-file",
                str(password),
            ),
            "no Prometheus API",
            "path prefix",
        )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--prometheus", "prometheus:9090"), "not an http(s) URL"),
        (
            ("--prometheus", "http://x", "--alertmanager", "am:9093"),
            "--alertmanager am:9093 is not an http(s) URL",
        ),
        (("--prometheus", "http://x", "--basic-auth-user", "u"), "go together"),
        (("--prometheus", "http://x", "--ca-file", "/etc/hostname", "--insecure-skip-verify"), "not both"),
        (("--prometheus", "http://x", "--ca-file", "/nonexistent/ca.pem"), "--ca-file /nonexistent/ca.pem"),
        (
            ("--prometheus", "http://x", "--bearer-token-file", "/nonexistent/token"),
            "cannot read --bearer-token-file",
        ),
        (("--prometheus", "http://x", "--timeout", "0"), "--timeout 0"),
    ],
)
def test_bad_flags(bundle, args, needle):
    one_sentence(doctor(*args, "--bundle", str(bundle)), needle)


def test_empty_token_file(bundle, tmp_path):
    token = tmp_path / "token"
    token.write_text("\n")
    one_sentence(
        doctor("--prometheus", "http://x", "--bearer-token-file", str(token), "--bundle", str(bundle)),
        "is empty",
    )


def test_basic_auth_and_a_token_together(bundle, tmp_path, monkeypatch):
    password = tmp_path / "password"
    password.write_text("p")
    monkeypatch.setenv("VLLM_OBS_PROMETHEUS_TOKEN", "t")
    run = doctor(
        "--prometheus", "http://x", "--basic-auth-user", "u", "--basic-auth-password-file", str(password),
        "--bundle", str(bundle),
    )  # fmt: skip
    one_sentence(run, "either a bearer token", "not both")


def _broken_bundles(good: Path, tmp: Path) -> dict[str, tuple[Path, str]]:
    out = {}
    out["missing"] = (tmp / "nowhere", "is not a directory")
    empty = tmp / "empty"
    empty.mkdir()
    out["no manifest"] = (empty, ".vllm-obs-manifest.json does not exist")
    garbled = tmp / "garbled"
    shutil.copytree(good, garbled)
    (garbled / ".vllm-obs-manifest.json").write_text("{not json")
    out["garbled manifest"] = (garbled, "is not valid JSON")
    foreign = tmp / "foreign"
    shutil.copytree(good, foreign)
    (foreign / ".vllm-obs-manifest.json").write_text(json.dumps({"files": []}))
    out["foreign manifest"] = (foreign, "is not a vllm-obs manifest")
    partial = tmp / "partial"
    shutil.copytree(good, partial)
    (partial / "prometheus" / "prometheus.yml").unlink()
    out["no prometheus.yml"] = (partial, "prometheus.yml does not exist")
    bad_rules = tmp / "bad-rules"
    shutil.copytree(good, bad_rules)
    (bad_rules / "alerts" / "vllm-alerts.rules.yml").write_text("groups: [\n")
    out["bad rule file"] = (bad_rules, "is not valid YAML")
    return out


def test_unreadable_bundles(bundle, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # never reached: the bundle is read first
    for case, (path, needle) in _broken_bundles(bundle, tmp_path).items():
        run = doctor("--prometheus", url, "--bundle", str(path))
        assert run.code == 2, case
        one_sentence(run, needle)


def test_bad_kubernetes_manifest(bundle, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    one_sentence(
        doctor(
            "--prometheus", url, "--bundle", str(bundle), "--kubernetes-manifest", str(tmp_path / "none.yaml")
        ),
        "cannot read --kubernetes-manifest",
    )
    service = tmp_path / "service.yaml"
    service.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: vllm}\n")
    one_sentence(
        doctor("--prometheus", url, "--bundle", str(bundle), "--kubernetes-manifest", str(service)),
        "no workload container with a startupProbe or livenessProbe",
    )


def test_the_console_script_exits_2_with_one_line(bundle):
    script = Path(sys.executable).with_name("vllm-obs")
    url = f"http://127.0.0.1:{free_port()}"
    result = subprocess.run(
        [str(script), "doctor", "--prometheus", url, "--bundle", str(bundle), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "cannot reach Prometheus" in result.stderr


def test_a_prometheus_that_never_answers(bundle):
    """Stand-in: a loopback socket that accepts connections and never answers (a hung proxy)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        started = time.monotonic()
        run = doctor("--prometheus", url, "--bundle", str(bundle), "--timeout", "1")
        took = time.monotonic() - started
    one_sentence(run, "no answer within 1 s", "--timeout")
    assert took < 15, took  # one try and a retry on connect, no more


def test_without_the_doctor_extra_it_says_which_to_install(bundle):
    """The exporter images install vllm-obs without the `doctor` extra: the doctor names it.
    A real interpreter whose import of prometheus_api_client fails, as it does where the
    package is absent (None in sys.modules makes the import raise ModuleNotFoundError)."""
    program = (
        "import sys; sys.modules['prometheus_api_client'] = None; "
        "from vllm_obs.cli import main; "
        f"sys.exit(main(['doctor', '--prometheus', 'http://127.0.0.1:9', '--bundle', {str(bundle)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("vllm-obs: error: ") and "pip install 'vllm-obs[doctor]'" in line, line
