"""Retiming a finished fleet run (benchmarks/fleet/retime.py): both sides' panel queries on the run's
stored TSDB, over the hour before its fleet stopped, and a clear refusal of a folder that holds none."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from benchmarks.fleet import retime
from benchmarks.fleet.prometheus import Prometheus, write_config

from tests.support.simulated_fleet import fleet_bundle, simulated_fleet


def test_the_fleet_ends_its_minutes_after_its_start():
    results = {"started": "2026-12-08 00:07:39 UTC", "minutes": 65.0}
    assert retime.fleet_end(results) == 1796688459 + 65 * 60


def test_a_folder_without_a_finished_run_is_refused_in_one_line(tmp_path, capsys):
    assert retime.main([str(tmp_path)]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "holds no finished run" in out[0] and str(tmp_path) in out[0]
    assert not (tmp_path / "retime").exists()


def vllm_style_dashboard(directory: Path) -> None:
    directory.mkdir()
    expr = 'sum by (instance) (rate(vllm:generation_tokens_total{instance=~"$instance"}[$__rate_interval]))'
    dashboard = {
        "title": "Theirs",
        "panels": [{"title": "Tokens", "targets": [{"expr": expr, "refId": "A"}]}],
        "templating": {
            "list": [
                {"type": "query", "name": "instance", "query": "label_values(vllm:num_requests_running, instance)",
                 "includeAll": True, "multi": True}
            ]
        },
    }
    (directory / "theirs.json").write_text(json.dumps(dashboard))


@pytest.mark.prometheus
def test_retime_times_both_sides_on_a_stopped_runs_stored_series(tmp_path):
    """12 simulated engines scraped for a minute, then everything stopped; the retime's Prometheus
    scrapes nothing, so each answer comes from the stored minute: every engine in vLLM's query."""
    run = tmp_path / "run"
    run.mkdir()
    with simulated_fleet(run) as (port, targets, _, _):
        bundle = fleet_bundle(run, port, interval="1s")
        rules = sorted((bundle / "alerts").glob("*.rules.yml"))
        config = write_config(run / "fleet.yml", bundle / "prometheus" / "prometheus.yml", targets, rules)
        with Prometheus(config, run / "prometheus") as prom:
            started = time.time()
            deadline = time.monotonic() + 90
            answered = "rate(vllm:generation_tokens_total[1m])"
            while time.monotonic() < deadline and (len(prom.query(answered)) < 12 or time.time() < started + 60):
                time.sleep(1)
            assert len(prom.query(answered)) == 12
            stopped = time.time()
    results = {
        "engines": 12,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
        "minutes": (stopped - int(started)) / 60,
        "range_s": 60.0,
        "step_s": 1.0,
        "rate_interval": "60s",
        "generator_commit": "test",
    }
    (run / "results.json").write_text(json.dumps(results))
    vllm_style_dashboard(tmp_path / "theirs")

    command = [str(run), "--vllm-dashboards", str(tmp_path / "theirs"), "--repeats", "1", "--quiet-wait-budget", "0"]
    assert retime.main(command) == 0

    retimed = json.loads((run / "retime" / "results.json").read_text())
    (theirs,) = retimed["vllm"]["panels"]
    assert theirs["series"] == 12 and "error" not in theirs
    ours = [p for p in retimed["panels"] if "error" not in p]
    assert len(ours) == len(retimed["panels"]) and any(p["series"] > 0 for p in ours)
    assert retimed["comparison"]["vllm"]["all"]["queries"] == 1
    assert "| **vLLM's** | **all 1** | 1 |" in (run / "retime" / "summary.md").read_text()
