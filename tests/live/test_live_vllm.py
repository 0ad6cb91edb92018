"""End to end against a real vLLM CPU server, the real log exporter and a real Prometheus.

- `generate --metrics-url` against the live server yields a bundle whose every query
  names only series that server exposes, and promtool accepts and passes it;
- with Prometheus scraping the server and the exporter and evaluating the bundle's
  rules, every dashboard panel query returns data after a little traffic;
- a fire drill: kill the engine core of a second server and watch VllmEngineDead fire.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.generator.test_bundle_queries import exporter_series, exposition_names, unexposed
from tests.generator.test_rules import check_and_test
from tests.support.bundles import dashboard_exprs, generate
from tests.support.monitoring import Prometheus
from tests.support.vllm_server import MODEL_NAME, VllmServer, free_port, http_get, send_traffic

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]

# Panels allowed to come back empty on a healthy CPU server, and why. The test fails if
# any other panel is empty, or if fewer than 90% of the queries return data.
MAY_BE_EMPTY: dict[str, str] = {}


@contextlib.contextmanager
def log_exporter(log: Path, workdir: Path) -> Iterator[str]:
    port = free_port()
    with (workdir / "exporter.out").open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vllm_log_exporter.cli",
                "--log-file",
                str(log),
                "--listen",
                f"127.0.0.1:{port}",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if http_get(url + "/metrics", timeout=2)[0] == 200:
                    break
            time.sleep(0.2)
        else:
            raise RuntimeError((workdir / "exporter.out").read_text())
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def stack_config(vllm: VllmServer, exporter: str) -> dict:
    """The bundle config of a local stack: fast scrapes so a test sees rates quickly."""
    target = f"127.0.0.1:{vllm.port}"
    return {
        "prometheus": {
            "vllm_targets": [target],
            "log_exporters": [{"target": exporter, "vllm_instance": target}],
            "alertmanagers": [],
            "probes": [],
            "scrape_interval": "2s",
            "scrape_timeout": "2s",
            "evaluation_interval": "2s",
        }
    }


def has_data(result: list[dict]) -> bool:
    return any(math.isfinite(float(sample["value"][1])) for sample in result)


def test_generate_from_the_live_server_queries_only_what_it_exposes(vllm_with_traffic, tmp_path):
    server = vllm_with_traffic
    bundle = generate(tmp_path / "bundle", "--metrics-url", server.metrics_url)
    page = http_get(server.metrics_url)[1]
    exporter = exporter_series(tmp_path)
    assert unexposed(bundle, exposition_names(page), exporter) == {}
    manifest = (bundle / ".vllm-obs-manifest.json").read_text()
    assert "engine v1, looks like vLLM 0.32.0 to 0.33.0" in manifest
    check_and_test(bundle)


def test_every_dashboard_panel_returns_data_from_a_live_stack(vllm_with_traffic, tmp_path):
    server = vllm_with_traffic
    with log_exporter(server.log_path, tmp_path) as exporter:
        bundle = generate(
            tmp_path / "bundle", "--metrics-url", server.metrics_url, config=stack_config(server, exporter)
        )
        with Prometheus(bundle / "prometheus" / "prometheus.yml", tmp_path) as prom:
            prom.wait_for('up{job="vllm"} == 1', timeout=60)
            prom.wait_for('up{job="vllm-log-exporter"} == 1', timeout=60)
            # Traffic inside the rate windows, spread over several scrapes.
            for _ in range(3):
                send_traffic(server, requests=4)
                time.sleep(3)
            prom.wait_for("job_instance_model:vllm_time_to_first_token_seconds:p95_5m", timeout=60)
            prom.wait_for('ALERTS{alertname="Watchdog"}', timeout=60)
            # The template variables resolve to this server, then every query is asked.
            variables = {
                "$job": "vllm",
                "$instance": f"127.0.0.1:{server.port}",
                "$model_name": MODEL_NAME,
                "$engine": "0",
            }
            for name, expected in variables.items():
                values = prom.query(f'count by ({name[1:]}) (vllm:num_requests_running{{job="vllm"}})')
                assert [v["metric"][name[1:]] for v in values] == [expected]
            results = {where: prom.query(expr) for where, expr in dashboard_exprs(bundle, variables).items()}
    empty = {where for where, result in results.items() if not has_data(result)}
    unexplained = {w for w in empty if w.split(" / ")[1] not in MAY_BE_EMPTY}
    assert not unexplained, f"panels without data: {sorted(unexplained)}"
    assert len(results) >= 40
    assert (len(results) - len(empty)) / len(results) >= 0.9
    # Recorded for the issue notes: how many queries returned data.
    print(f"\n{len(results) - len(empty)}/{len(results)} panel queries returned data")


def test_fire_drill_engine_killed(tmp_path):
    """kill -9 of the engine core: the exporter sees it in the log and VllmEngineDead fires."""
    server = VllmServer(tmp_path / "drill.log")
    with server, log_exporter(server.log_path, tmp_path) as exporter:
        bundle = generate(
            tmp_path / "bundle", "--vllm-version", "0.32.0", config=stack_config(server, exporter)
        )
        with Prometheus(bundle / "prometheus" / "prometheus.yml", tmp_path) as prom:
            prom.wait_for('vllm_log_events_total{event="engine_dead"} == 0', timeout=60)
            assert not prom.query('ALERTS{alertname="VllmEngineDead"}')
            send_traffic(server, requests=2, errors=False)
            server.kill_engine_core()
            server.wait_exit(timeout=120)
            fired = prom.wait_for('ALERTS{alertname="VllmEngineDead", alertstate="firing"}', timeout=60)
            assert fired[0]["metric"]["instance"] == f"127.0.0.1:{server.port}"
            assert fired[0]["metric"]["severity"] == "critical"
            # The server exits after its engine died, so its target goes down too.
            prom.wait_for(f'up{{job="vllm", instance="127.0.0.1:{server.port}"}} == 0', timeout=30)
