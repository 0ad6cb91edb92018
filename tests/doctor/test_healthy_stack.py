"""A healthy stack is reported healthy: the session's real vLLM, the real log exporter and canary
probe, a real Prometheus with the bundle generated from that server, and a real Alertmanager with
the generated routing, its receivers pointed at a loopback webhook."""

from __future__ import annotations

import contextlib
import time

import pytest

from tests.support.doctor_stack import (
    Alertmanager,
    LoopbackServer,
    WebPrometheus,
    canary_probe,
    doctor_settled,
    generate,
    log_exporter,
    settle,
    stack_config,
    wait_until,
    write_prometheus_config,
)
from tests.support.vllm_server import MODEL_NAME, free_port, send_traffic

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]


@pytest.fixture(scope="module")
def healthy(vllm_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("healthy")
    instance = f"127.0.0.1:{vllm_server.port}"
    with contextlib.ExitStack() as stack:
        webhook = stack.enter_context(LoopbackServer())
        exporter = stack.enter_context(log_exporter(vllm_server.log_path, tmp))
        probe = stack.enter_context(canary_probe(vllm_server.url, tmp))
        am_port, prom_port = free_port(), free_port()
        config = stack_config(
            [instance],
            exporters=[(exporter, instance)],
            probes=[probe],
            alertmanager=f"127.0.0.1:{am_port}",
            webhook=webhook.url,
            interval="2s",
            prometheus=f"127.0.0.1:{prom_port}",
        )
        bundle = generate(tmp / "bundle", config, "--metrics-url", vllm_server.metrics_url)
        am = stack.enter_context(Alertmanager(bundle / "alerts" / "alertmanager.yml", tmp, port=am_port))
        prom = stack.enter_context(WebPrometheus(write_prometheus_config(bundle), tmp, port=prom_port))
        settle(prom, bundle)
        wait_until(
            lambda: any(a["labels"]["alertname"] == "WatchdogVllmObs" for a in am.alerts()),
            "WatchdogVllmObs in Alertmanager",
        )
        # Real traffic spread over several scrapes, so every rate window holds some.
        for _ in range(3):
            assert send_traffic(vllm_server, requests=3).get("200", 0) >= 3
            time.sleep(2)
        wait_until(
            lambda: bool(
                prom.api("/api/v1/query", query="job_instance_model:vllm_time_to_first_token_seconds:p95_5m")[
                    "result"
                ]
            ),
            "the TTFT recording rule",
            timeout=60,
        )
        wait_until(
            lambda: any(p == "/watchdog" for p, _ in webhook.posted), "a Watchdog notification", timeout=60
        )
        send_traffic(vllm_server, requests=2)
        run = doctor_settled("--prometheus", prom.url, "--alertmanager", am.url, "--bundle", str(bundle))
        yield run, instance


def test_a_healthy_stack_is_reported_healthy(healthy):
    run, instance = healthy
    print("\n" + run.out)  # the report, for the CI log
    assert run.code == 0, run.text_of("fail")
    assert not run.lines("fail") and run.report["verdict"]["failures"] == 0
    assert run.out.rstrip().splitlines()[-1].startswith("Verdict: HEALTHY")
    oks = {(c["family"], c["subject"]) for c in run.checks("ok")}
    assert {
        ("targets", "vLLM (job vllm)"),
        ("targets", "log exporter (job vllm-log-exporter)"),
        ("targets", "canary probe (job vllm-probe)"),
        ("names", "vLLM release"),
        ("names", "vLLM (job vllm)"),
        ("labels", "log exporter instance"),
        ("labels", "canary probe instance"),
        ("labels", "model_name"),
        ("labels", "rate windows"),
        ("alerting", "Prometheus → Alertmanager"),
        ("alerting", "WatchdogVllmObs"),
        ("alerting", "WatchdogVllmObs in Alertmanager"),
        ("alerting", "Alertmanager receivers"),
        ("alerting", "silences"),
        ("lifecycle", "server states"),
        ("lifecycle", "vLLM version"),
    } <= oks, sorted(oks)
    model = next(c for c in run.checks("ok", "labels") if c["subject"] == "model_name")
    assert MODEL_NAME in model["message"]
    # Every rule group loaded, the same as the bundle on disk (Prometheus re-prints each expression).
    groups = [c for c in run.checks(family="rules") if c["subject"].startswith("vllm-obs.")]
    assert len(groups) >= 9 and all(c["status"] == "ok" and "same" in c["message"] for c in groups)
    startup = next(c for c in run.checks(family="lifecycle") if c["subject"] == "start-up time")
    assert "1 start-up(s) measured" in startup["message"] and instance in startup["message"]


def test_most_panels_of_a_healthy_stack_have_data(healthy):
    run, _ = healthy
    for summary in (c for c in run.checks(family="dashboards") if " of " in c["message"]):
        have, total = (int(x) for x in summary["message"].split(" panel")[0].split(" of "))
        assert have / total >= 0.75, summary
    # What stays empty is explained as a warning (no traffic in a short window, a feature off).
    for check in run.checks("warn", "dashboards"):
        assert check["action"].startswith("nothing is broken"), check
