"""Reaching Prometheus and Alertmanager as operators have them: behind a token-checking proxy under
a path prefix, under Prometheus's route prefix, over TLS with a private CA. The vLLM is the
stand-in of test_broken_stacks; the proxy is a loopback reverse proxy."""

from __future__ import annotations

import pytest

from tests.support.doctor_stack import TokenProxy, doctor_both, self_signed, stand_in_stack

pytestmark = pytest.mark.prometheus


def test_behind_a_proxy_with_tokens_and_a_path_prefix(tmp_path, monkeypatch):
    token, am_token = tmp_path / "token", tmp_path / "am-token"
    token.write_text("prom-token\n")
    am_token.write_text("am-token\n")
    with (
        stand_in_stack(tmp_path) as stack,
        TokenProxy(stack.prom.url, "prom-token") as prom,
        TokenProxy(stack.am.url, "am-token", prefix="/alertmanager") as am,
    ):
        bundle = ("--bundle", str(stack.bundle))
        direct = stack.doctor()
        proxied = doctor_both(
            "--prometheus", prom.url, "--alertmanager", am.url, *bundle,
            "--bearer-token-file", str(token), "--alertmanager-bearer-token-file", str(am_token),
        )  # fmt: skip
        monkeypatch.setenv("VLLM_OBS_PROMETHEUS_TOKEN", "prom-token")
        from_env = doctor_both("--prometheus", prom.url, *bundle)
        monkeypatch.setenv("VLLM_OBS_PROMETHEUS_TOKEN", "wrong")
        refused = doctor_both("--prometheus", prom.url, *bundle)
        monkeypatch.delenv("VLLM_OBS_PROMETHEUS_TOKEN")
        # Alertmanager gets the Prometheus token unless told otherwise; this proxy wants its own.
        am_refused = doctor_both(
            "--prometheus", prom.url, "--alertmanager", am.url, *bundle, "--bearer-token-file", str(token)
        )
    assert direct.code == 0, direct.text_of("fail")
    assert proxied.code == 0, proxied.text_of("fail")
    same = {(c["family"], c["subject"], c["status"]) for c in direct.checks() if c["family"] != "dashboards"}
    assert same == {
        (c["family"], c["subject"], c["status"]) for c in proxied.checks() if c["family"] != "dashboards"
    }
    assert any(c["subject"] == "Alertmanager receivers" for c in proxied.checks("ok"))
    assert from_env.code == 0, from_env.err
    assert refused.code == 2 and "answered HTTP 401" in refused.err and refused.out == ""
    assert am_refused.code == 2 and "Alertmanager at" in am_refused.err
    assert "--alertmanager-bearer-token-file" in am_refused.err


def test_a_route_prefix_over_tls_with_a_private_ca(tmp_path):
    cert, key = self_signed(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    with stand_in_stack(tmp_path, prefix="/prom", web_config=web, scheme="https", ca_file=str(cert)) as stack:
        assert stack.prom.url.startswith("https://") and stack.prom.url.endswith("/prom")
        trusted = stack.doctor("--ca-file", str(cert))
        unverified = stack.doctor("--insecure-skip-verify")
        refused = stack.doctor()
    assert trusted.code == 0, trusted.text_of("fail")
    # This stand-in's Prometheus scrapes itself over plain HTTP at no prefix, so its own job is
    # down: the pipeline panels are empty, which warns (serving is fine) rather than fails.
    assert "Failures: 3 panels empty" in trusted.text_of("warn", "dashboards")
    assert "no target of job prometheus is up" in trusted.text_of("warn", "dashboards")
    assert unverified.code == 0, unverified.text_of("fail")
    assert refused.code == 2 and refused.out == ""
    assert "TLS connection to Prometheus" in refused.err and "--ca-file" in refused.err
