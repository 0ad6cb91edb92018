"""A real Prometheus scrapes the simulated fleet through the bundle's own scrape jobs: each
replica's vLLM /metrics (failing while its server is down), its log exporter (relabelled to the
replica's instance) and the canary (its target relabelled the same way)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
import yaml

from benchmarks.alert_quality.canary import Canary
from benchmarks.alert_quality.fleet import Fleet
from benchmarks.alert_quality.scenario import Model
from benchmarks.alert_quality.serve import Simulation, serve
from tests.benchmarks.test_alert_quality_fleet import TEMPLATE, steady
from tests.benchmarks.test_alert_quality_replica import params
from tests.support.monitoring import Prometheus
from tests.support.vllm_server import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.prometheus
def test_prometheus_scrapes_the_fleet_its_log_exporters_and_the_canary_through_the_bundles_jobs(tmp_path):
    epoch = time.time()
    fleet = Fleet(
        [(Model("chat", "llm-chat", 2, "conv", 1.0), params(), steady(2.0, 600))],
        started=epoch,
        seed=1,
        template=TEMPLATE,
    )
    dead, alive = fleet.members
    dead.at(2, lambda m, at: m.engine_dies(at))
    canary = Canary(fleet, epoch, seed=1, interval=2, timeout=1)
    sim = Simulation(fleet, canary, epoch)
    port = free_port()
    files = sim.targets(tmp_path / "targets", f"127.0.0.1:{port}")

    bundle = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())
    jobs = [j for j in bundle["scrape_configs"] if j["job_name"] in files]
    assert {j["job_name"] for j in jobs} == set(files)
    for job in jobs:
        job.pop("static_configs")
        job["file_sd_configs"] = [{"files": [str(files[job["job_name"]])]}]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": jobs}
        )
    )

    loop = asyncio.new_event_loop()
    started, stop = asyncio.Event(), asyncio.Event()
    server = threading.Thread(
        target=loop.run_until_complete, args=(serve(sim, "127.0.0.1", port, started, stop, step=0.5),)
    )
    server.start()
    try:
        deadline = time.monotonic() + 10
        while not started.is_set() and server.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.is_set(), f"the fleet's HTTP server did not start on port {port}"
        with Prometheus(config, tmp_path) as prom:
            d, a = dead.instance, alive.instance
            prom.wait_for(f'up{{job="vllm", instance="{d}"}} == 0', timeout=60)
            prom.wait_for(f'up{{job="vllm", instance="{a}"}} == 1', timeout=60)
            prom.wait_for(f'vllm:num_requests_running{{instance="{a}", model_name="chat"}}', timeout=60)
            # The log exporter's series carry the replica's instance, as the bundle relabels them.
            prom.wait_for(f'vllm_log_server_state{{instance="{d}", state="dead"}} == 1', timeout=60)
            prom.wait_for(f'vllm_log_server_state{{instance="{a}", state="ready"}} == 1', timeout=60)
            stamp = prom.wait_for(
                f'vllm_log_last_event_timestamp_seconds{{instance="{d}", event="engine_dead"}} > 0'
            )
            assert abs(float(stamp[0]["value"][1]) - (epoch + 2)) < 1e-6
            # The canary's target becomes the instance; nothing listens on the dead replica.
            prom.wait_for(f'vllm_probe_failures_total{{instance="{d}", reason="refused"}} > 0', timeout=60)
            prom.wait_for(f'vllm_probe_success{{instance="{a}", model_name="chat"}} == 1', timeout=60)
            assert not prom.query(f'vllm_probe_failures_total{{instance="{a}"}} > 0')
    finally:
        loop.call_soon_threadsafe(stop.set)
        server.join(timeout=10)
        assert not server.is_alive(), "the fleet's HTTP server did not stop"
        loop.close()
