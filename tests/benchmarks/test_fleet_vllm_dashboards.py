"""The fleet benchmark's comparison with vLLM's own dashboards (benchmarks/fleet/): their variables
substituted as Grafana sends them, the queries reading metrics the fleet lacks set apart, and the
report's verdict. The dashboards here are small ones written for the tests, in vLLM's style."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.fleet import report
from benchmarks.fleet.machine import CpuMeter
from benchmarks.fleet.measure import comparison, interleave, time_panels, unexposed
from benchmarks.fleet.panels import PanelQuery, all_value, metric_names, panel_queries
from benchmarks.fleet.prometheus import Prometheus

from tests.support.simulated_fleet import simulated_fleet

REPO = Path(__file__).resolve().parents[2]
SELECTOR = 'job=~"$job", model_name=~"$model_name", instance=~"$instance"'


def query_variable(name: str, query: str, **extra) -> dict:
    return {"type": "query", "name": name, "query": query, "includeAll": True, "multi": True, **extra}


def write_dashboard(directory: Path, title: str, targets: list[dict], variables: list[dict]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    dashboard = {
        "title": title,
        "panels": [
            {"type": "row", "title": "Row", "panels": [{"title": "Nested", "targets": targets[1:]}]},
            {"title": "Top", "targets": targets[:1]},
        ],
        "templating": {"list": variables},
    }
    path = directory / (title.lower().replace(" ", "_") + ".json")
    path.write_text(json.dumps(dashboard))
    return path


def vllm_style_variables() -> list[dict]:
    return [
        {"type": "datasource", "name": "datasource", "query": "prometheus"},
        query_variable("job", "label_values(vllm:num_requests_running, job)"),
        query_variable("model_name", 'label_values(vllm:num_requests_running{job=~"$job"}, model_name)'),
        query_variable(
            "instance", 'label_values(vllm:num_requests_running{job=~"$job", model_name=~"$model_name"}, instance)'
        ),
        {"type": "custom", "name": "ttft_slo", "current": {"text": "1s", "value": "1.0"}},
        {"type": "adhoc", "name": "filters", "filters": []},
    ]


def test_all_without_a_custom_value_expands_to_every_value_as_grafana_writes_it(tmp_path):
    asked = []
    values = {
        "job": ["vllm"],
        "model_name": ["qwen2.5-32b", "llama-3.1-8b"],
        "instance": ["vllm-0001:8000", "vllm-0000:8000"],
    }

    def label_values(match: str, label: str) -> list[str]:
        asked.append((match, label))
        return values[label]

    write_dashboard(
        tmp_path,
        "Overview",
        [
            {
                "expr": f'sum(rate(vllm:time_to_first_token_seconds_bucket{{{SELECTOR}, le="$ttft_slo"}}[$__rate_interval]))',
                "refId": "A",
            },
            {
                "expr": f"max by (model_name) (max_over_time(vllm:kv_cache_usage_perc{{{SELECTOR}}}[$__range]))",
                "instant": True,
                "range": False,
                "refId": "B",
            },
            {"expr": "up", "hide": True, "refId": "C"},
        ],
        vllm_style_variables(),
    )
    queries = panel_queries(tmp_path, {}, "1m", "600s", "15s", label_values=label_values, source="vllm")

    # Each variable's query sees the variables before it as they were expanded.
    assert asked == [
        ("vllm:num_requests_running", "job"),
        ('vllm:num_requests_running{job=~"vllm"}', "model_name"),
        ('vllm:num_requests_running{job=~"vllm", model_name=~"(llama-3\\\\.1-8b|qwen2\\\\.5-32b)"}', "instance"),
    ]
    matchers = 'job=~"vllm", model_name=~"(llama-3\\\\.1-8b|qwen2\\\\.5-32b)", instance=~"(vllm-0000:8000|vllm-0001:8000)"'
    assert [(q.panel, q.ref, q.expr, q.instant) for q in queries] == [
        ("Nested", "B", f"max by (model_name) (max_over_time(vllm:kv_cache_usage_perc{{{matchers}}}[600s]))", True),
        (
            "Top",
            "A",
            f'sum(rate(vllm:time_to_first_token_seconds_bucket{{{matchers}, le="1.0"}}[1m]))',
            False,
        ),
    ]
    assert all(q.source == "vllm" and q.raw == q.expr and not q.uses_recording_rules for q in queries)


def test_grafana_escapes_regex_metacharacters_and_a_single_value_stays_bare():
    assert all_value(["a.b", "c+d", "x|y"]) == "(a\\\\.b|c\\\\+d|x\\\\|y)"
    assert all_value(["vllm"]) == "vllm"
    assert all_value(["back\\slash"]) == "back\\\\\\\\slash"


def test_a_custom_all_value_is_kept_and_without_values_all_is_a_wildcard(tmp_path):
    variables = [
        query_variable("job", "label_values(vllm:num_requests_running, job)", allValue="vllm"),
        query_variable("instance", "label_values(vllm:num_requests_running, instance)"),
    ]
    write_dashboard(tmp_path, "Ours", [{"expr": 'up{job=~"$job", instance=~"$instance"}', "refId": "A"}], variables)

    def no_call(match: str, label: str) -> list[str]:
        assert label == "instance", "a variable with a custom all value asks for no values"
        return ["i-1"]

    assert panel_queries(tmp_path, {}, "1m", "600s", "15s", label_values=no_call)[0].expr == (
        'up{job=~"vllm", instance=~"i-1"}'
    )
    assert panel_queries(tmp_path, {}, "1m", "600s", "15s")[0].expr == 'up{job=~"vllm", instance=~".*"}'


def test_variables_that_cannot_be_resolved_are_refused(tmp_path):
    target = [{"expr": 'up{instance=~"$instance"}', "refId": "A"}]
    write_dashboard(tmp_path / "a", "A", target, [query_variable("instance", "query_result(up)")])
    with pytest.raises(ValueError, match="not a label_values"):
        panel_queries(tmp_path / "a", {}, "1m", "600s", "15s", label_values=lambda m, label: ["x"])
    write_dashboard(tmp_path / "b", "B", target, [query_variable("instance", "label_values(up, instance)")])
    with pytest.raises(ValueError, match="finds no values"):
        panel_queries(tmp_path / "b", {}, "1m", "600s", "15s", label_values=lambda m, label: [])
    write_dashboard(tmp_path / "c", "C", [{"expr": "up{x=~\"$unknown\"}", "refId": "A"}], [])
    with pytest.raises(ValueError, match="unresolved variable"):
        panel_queries(tmp_path / "c", {}, "1m", "600s", "15s")


def test_metric_names_are_the_selected_series_only():
    expr = (
        'histogram_quantile(0.95, sum by (le, instance) (rate(vllm:e2e_request_latency_seconds_bucket{job=~"(a|b)"}[5m])))'
        " / on (job, instance) group_left (model_name) group by (job, instance, model_name) (vllm:num_requests_running)"
        ' or (count(up{job="x"} == 0) or vector(0)) unless rate(job_model:vllm_ttft:p95_5m[1h:15s] offset 1h) > bool 1e-9'
    )
    assert metric_names(expr) == {
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:num_requests_running",
        "up",
        "job_model:vllm_ttft:p95_5m",
    }
    assert metric_names('label_replace(ALERTS{alertstate="firing"}, "a", "$1", "b", "(.*)")') == {"ALERTS"}


def test_interleave_alternates_and_keeps_every_query():
    assert interleave([1, 2, 3, 4], ["a", "b"]) == [1, 2, "a", 3, 4, "b"]
    assert interleave(["a"], [1, 2, 3]) == [1, 2, 3, "a"]
    assert interleave([1, 2], []) == [1, 2]


def row(source: str, dashboard: str, panel: str, seconds: float, expr: str = "q") -> dict:
    return {"source": source, "dashboard": dashboard, "panel": panel, "ref": "A", "expr": expr, "recorded_s": seconds}


def test_report_compares_mean_median_and_refresh_and_lists_what_was_left_out():
    panels = [
        row("bundle", "vLLM / Overview", "Requests", 0.010),
        row("bundle", "vLLM / Overview", "Latency", 0.030),
        row("bundle", "vLLM / Failures", "Probe", 0.001, "vllm_probe_success"),
        row("vllm", "vLLM / Overview", "Requests", 0.020),
        row("vllm", "vLLM / Overview", "TTFT", 0.060),
        row("vllm", "vLLM / Instances", "Table", 0.040),
        {**row("vllm", "vLLM / Instances", "Broken", 0.0), "error": "query failed"},
    ]
    skipped = [
        {**row("bundle", "vLLM / Failures", "Probe", 0.0, "vllm_probe_success"), "missing": ["vllm_probe_success"]},
        {**row("vllm", "vLLM / KV Cache", "NIXL", 0.0, "nixl"), "missing": ["vllm:nixl_xfer_time_seconds_sum"]},
    ]
    result = comparison(panels, skipped)
    assert result["bundle"]["all"] == pytest.approx(
        {"queries": 2, "mean_s": 0.020, "median_s": 0.020, "refresh_s": 0.040, "skipped": 1}
    )
    assert result["vllm"]["all"] == pytest.approx(
        {"queries": 3, "mean_s": 0.040, "median_s": 0.040, "refresh_s": 0.120, "skipped": 1}
    )
    assert result["vllm"]["dashboards"]["vLLM / Instances"]["errors"] == 1
    assert result["verdict"]["met"]

    results = {
        "repeats": 3,
        "panels": panels[:3],
        "vllm": {"dir": "/ref", "all": "values", "queries": 5, "panels": panels[3:]},
        "comparison": result,
        "dashboards_load": {"before": [1.0, 1, 1], "after": [1.5, 1, 1], "seconds": 30, "busy_cores": 1.2, "ours_cores": 0.9},
    }
    text = report.comparison_section(results)
    assert "| **bundle** | **all 2** | 2 | 1 | **20 ms** | 20 ms | 40 ms |" in text
    assert "| **vLLM's** | **all 2** | 3 | 1 | **40 ms** | 40 ms | 120 ms |" in text
    assert "bundle 20 ms, vLLM's 40 ms -> **met**" in text
    assert "other work 0.30" in text
    assert "`vllm:nixl_xfer_time_seconds_sum`" in text and "`vllm_probe_success`" in text

    slower = comparison([{**p, "recorded_s": p["recorded_s"] * 3} if p["source"] == "bundle" else p for p in panels], skipped)
    assert not slower["verdict"]["met"]
    assert "-> **not met**" in report.comparison_section({**results, "comparison": slower})


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.fleet.run", "--engines", "12", "--minutes", "1", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_dashboard_directory_holding_no_dashboard_is_refused_in_one_sentence(tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    result = run_cli("--vllm-dashboards", str(tmp_path), "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "broken.json is not readable JSON" in last, result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.prometheus
def test_vllm_style_queries_resolved_and_timed_on_a_real_prometheus(tmp_path):
    """12 simulated engines in a real Prometheus: the All of a vLLM-style dashboard lists every
    instance Prometheus holds, a query of a metric the fleet lacks is set apart, and the rest are
    timed interleaved with a bundle-style query, each answering for every engine."""
    with simulated_fleet(tmp_path) as (_, targets, _, simulator_pid):
        instances = sorted(g["labels"]["instance"] for g in json.loads(targets.read_text()))
        config = tmp_path / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s"},
                    "scrape_configs": [{"job_name": "vllm", "file_sd_configs": [{"files": [str(targets)]}]}],
                }
            )
        )
        write_dashboard(
            tmp_path / "theirs",
            "Theirs",
            [
                {"expr": f"sum by (instance) (rate(vllm:generation_tokens_total{{{SELECTOR}}}[$__rate_interval]))", "refId": "A"},
                {"expr": f"sum by (instance) (vllm:num_requests_running{{{SELECTOR}}})", "instant": True, "refId": "B"},
                {"expr": f"sum(rate(vllm:nixl_xfer_time_seconds_count{{{SELECTOR}}}[$__rate_interval]))", "refId": "C"},
            ],
            vllm_style_variables(),
        )
        with Prometheus(config, tmp_path / "prom") as prom:
            deadline = time.monotonic() + 60
            while prom.targets_up() != (12, 12) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert prom.targets_up() == (12, 12)
            # Every engine's rate answers 3 s ago already: the query range, aligned to whole seconds,
            # ends up to 1 s before now (scrapes lag on a busy machine, hence the wide window).
            rated = "rate(vllm:generation_tokens_total[20s] offset 3s)"
            while time.monotonic() < deadline and len(prom.query(rated)) < 12:
                time.sleep(0.5)
            assert len(prom.query(rated)) == 12
            end = time.time()
            theirs = panel_queries(
                tmp_path / "theirs",
                {},
                "20s",
                "60s",
                "1s",
                label_values=lambda match, label: prom.label_values(label, match, end - 60, end),
                source="vllm",
            )
            assert all(f'instance=~"({"|".join(instances)})"' in q.expr for q in theirs)
            expr = 'sum by (instance) (vllm:num_requests_running{job=~"vllm"})'
            ours = [PanelQuery("Ours", "Running", "A", expr, expr)]
            skipped = unexposed(ours + theirs, set(prom.label_values("__name__")))
            assert [(s["source"], s["ref"], s["missing"]) for s in skipped] == [
                ("vllm", "C", ["vllm:nixl_xfer_time_seconds_count"])
            ]
            timed = [q for q in theirs if q.ref != "C"]
            meter = CpuMeter((prom.process.pid, simulator_pid))
            rows = time_panels(prom, interleave(ours, timed), 60, 1, 1, meter, 2.0, 0, 0, log=lambda m: None)
        assert [(r["source"], r["ref"], r["instant"]) for r in rows] == [
            ("vllm", "B", True),
            ("vllm", "A", False),
            ("bundle", "A", False),
        ]
        assert [(r.get("error"), r["series"], r["recorded_s"] > 0) for r in rows] == [(None, 12, True)] * 3
        verdict = comparison(rows, skipped)
        assert verdict["vllm"]["all"]["queries"] == 2 and verdict["vllm"]["all"]["skipped"] == 1
        assert verdict["bundle"]["all"]["queries"] == 1
