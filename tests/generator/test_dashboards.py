"""Dashboards: Grafana's dashboard-linter rules, alert links to panels, thresholds in sync with the
config, heatmaps, annotations, links, variables, feature rows, determinism."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
from pathlib import Path

import promql_parser
import pytest
import yaml
from vllm_obs.links import panel_id

from tests.support.bundles import (
    dashboard_panels,
    dashboard_variables,
    dashboards,
    expand,
    LINKS,
    generate,
    panels_by_row,
    recorded_names,
)
from tests.support.expositions import catalog_exposition

pytestmark = pytest.mark.slow

REPO = Path(__file__).parent.parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "metrics"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# A window no panel uses on purpose, so a raw rate with any other window shows.
RATE_SENTINEL = "7777s"
# Grafana's unit ids, as the dashboard linter's panel-units rule enumerates them (the ones a
# vLLM dashboard could need; anything else, e.g. a typo, fails).
UNITS = {
    "none", "short", "percent", "percentunit", "bytes", "decbytes", "Bps", "binBps", "s", "ms", "ns",
    "reqps", "ops", "rps", "cps", "flops", "celsius", "watt", "bool", "locale", "hertz", "dtdurations",
}  # fmt: skip
FEATURES = (
    "spec_decode",
    "lora",
    "nixl",
    "kv_offload",
    "kv_transfer_consumer",
    "kv_cache_metrics",
    "nan_check",
)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """The four bundles the linter rules are checked on."""
    tmp = tmp_path_factory.mktemp("bundles")
    return {
        "default": generate(tmp / "default", config={"links": LINKS}),
        "v0": generate(tmp / "v0", "--vllm-version", "0.9.0", "--engine", "v0", config={"links": LINKS}),
        "multi-cluster": generate(
            tmp / "mc",
            config={"prometheus": {"multi_cluster": True, "cluster_label": "k8s_cluster"}, "links": LINKS},
        ),
        "gpu": generate(tmp / "gpu", config={"gpu": {"enabled": True}, "links": LINKS}),
    }


@pytest.fixture(scope="module")
def featured(tmp_path_factory) -> Path:
    """A bundle from a 0.33 exposition with every engine feature on and two engines."""
    tmp = tmp_path_factory.mktemp("featured")
    source = tmp / "features.prom"
    source.write_text(catalog_exposition("0.33.0", features=FEATURES, t=120, engines=("0", "1")))
    return generate(
        tmp / "bundle", "--metrics-file", str(source), config={"gpu": {"enabled": True}, "links": LINKS}
    )


BUNDLES = ("default", "v0", "multi-cluster", "gpu")


def test_four_dashboards_with_unique_uids_and_titles():
    found = dashboards(REPO)
    assert [d["uid"] for d in found] == [
        "vllm-obs-failures",
        "vllm-obs-instance",
        "vllm-obs-kv-cache",
        "vllm-obs-overview",
    ]
    assert len({d["title"] for d in found}) == 4


@pytest.mark.parametrize("which", BUNDLES)
def test_template_rules(which, bundles):
    """template-datasource, template-job, template-instance, template-on-time-change-reload."""
    for dash in dashboards(bundles[which]):
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        ds = variables["datasource"]
        assert (ds["type"], ds["query"]) == ("datasource", "prometheus"), dash["title"]
        for name in ("job", "instance"):
            var = variables[name]
            where = (dash["title"], name)
            assert var["type"] == "query" and var["datasource"] == "${datasource}", where
            # Instance and model opens on one replica (no All); every other dashboard on all.
            one_replica = name == "instance" and dash["title"] == "vLLM / Instance and model"
            assert var["multi"] and var["includeAll"] != one_replica, where
            assert var["label"] == name.title(), where
            assert var["refresh"] == 2, where  # reload on time range change
        # The linter's All value for instance; job's All is the configured job (as a regex).
        assert variables["instance"]["allValue"] == ".+"
        assert variables["job"]["allValue"] == "vllm"
        assert variables["filters"]["type"] == "adhoc"
        assert variables["filters"]["datasource"] == DATASOURCE
        for var in variables.values():
            if var["type"] == "query":  # template-label-promql: the label_values selector parses
                inner = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"])
                assert inner, var["query"]
                promql_parser.parse(expand(inner.group(1), dashboard_variables(dash)))


def test_the_job_all_value_is_a_regex_matching_exactly_the_configured_job(tmp_path):
    """Grafana pastes the All value into job=~"$job" as is: it must escape for RE2 and PromQL."""
    job = "vllm.prod-1+(a)"
    bundle = generate(tmp_path / "b", config={"prometheus": {"vllm_job": job}})
    for dash in dashboards(bundle):
        all_value = {v["name"]: v for v in dash["templating"]["list"]}["job"]["allValue"]
        matcher = promql_parser.parse(f'up{{job=~"{all_value}"}}').matchers.matchers[0]
        pattern = re.compile(matcher.value)
        assert pattern.fullmatch(job)
        assert not pattern.fullmatch("vllmXprod-1+(a)") and not pattern.fullmatch("vllm.prod-11(a)")


@pytest.mark.parametrize("which", BUNDLES)
def test_panel_rules(which, bundles):
    """panel-datasource, panel-title-description, panel-units, panel-no-targets, target-promql,
    target-rate-interval; unique ids; no datasource uid but the variable anywhere."""
    bundle = bundles[which]
    recorded = recorded_names(bundle)
    for dash in dashboards(bundle):
        text = json.dumps(dash)
        assert set(re.findall(r'"uid": "([^"]*)"', text)) <= {"${datasource}", dash["uid"]}, dash["title"]
        ids = [p["id"] for p in dash["panels"]]
        assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids), dash["title"]
        values = {**dashboard_variables(dash), "$__rate_interval": RATE_SENTINEL}
        for panel in dash["panels"]:
            if panel["type"] == "row":
                continue
            where = f"{dash['title']} / {panel['title']}"
            assert panel["datasource"] == DATASOURCE, where
            assert panel["title"] and len(panel["description"]) > 20, where
            unit = (
                panel["options"]["yAxis"]["unit"]
                if panel["type"] == "heatmap"
                else panel["fieldConfig"]["defaults"]["unit"]
            )
            assert unit in UNITS, (where, unit)
            assert panel["targets"], where
            for target in panel["targets"]:
                assert target["datasource"] == DATASOURCE, where
                assert target["expr"].strip() and target["legendFormat"] is not None, where
                expr = expand(target["expr"], values)
                assert "$" not in expr.replace("$1", ""), (where, "a variable the dashboard lacks", expr)
                for name, window in _rate_windows(expr):
                    if name not in recorded:
                        assert window == RATE_SENTINEL, (
                            where,
                            f"raw rate over {window}, not $__rate_interval",
                        )


def _rate_windows(expr: str) -> list[tuple[str, str]]:
    """(series, range) of every rate() and irate() in a query, from a real PromQL parser."""
    found = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.Call) and node.func.name in ("rate", "irate"):
            for arg in node.args:
                if isinstance(arg, promql_parser.MatrixSelector):
                    seconds = int(arg.range.total_seconds())
                    found.append((arg.vector_selector.name, f"{seconds}s"))

    promql_parser.walk(promql_parser.parse(expr), pre_visit=visit)
    return found


def test_the_rate_check_catches_a_fixed_window():
    """Guard against a check that cannot fail."""
    assert _rate_windows(f'sum(rate(vllm:x_total{{a="b"}}[{RATE_SENTINEL}]))') == [
        ("vllm:x_total", RATE_SENTINEL)
    ]
    assert _rate_windows("rate(vllm:x_total[5m])") == [("vllm:x_total", "300s")]


@pytest.mark.parametrize("which", (*BUNDLES, "featured"))
def test_every_alert_link_opens_the_panel_that_explains_it(which, bundles, featured):
    bundle = featured if which == "featured" else bundles[which]
    found = {d["uid"]: d for d in dashboards(bundle)}
    rules = yaml.safe_load((bundle / "alerts" / "vllm-alerts.rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"]["dashboard_url"]
            path, _, query = url.partition("?")
            dash = found[path.split("/d/", 1)[1]]
            params = urllib.parse.parse_qs(re.sub(r"\{\{.*?\}\}", "", query))
            if rule["alert"] == "WatchdogVllmObs":
                assert "viewPanel" not in params
                continue
            # Panel ids come from titles: the id is on the dashboard only if the declared panel is.
            panels = {p["id"]: p for p in dash["panels"]}
            (view,) = params["viewPanel"]
            assert int(view) in panels, (rule["alert"], dash["title"])
            assert "var-instance={{ $labels.instance | urlquery }}" in url
            assert "var-job" not in url  # exporters' alerts carry their own job


def test_panel_ids_stay_put_when_other_panels_come_and_go(bundles):
    ids = {}
    for which in ("default", "v0"):
        for dash in dashboards(bundles[which]):
            for panel in dash["panels"]:
                key = (dash["uid"], panel["type"] == "row", panel["title"])
                ids.setdefault(key, set()).add(panel["id"])
    assert all(len(found) == 1 for found in ids.values())
    assert ids[("vllm-obs-instance", False, "Time to first token")] == {panel_id("Time to first token")}


def test_alert_thresholds_follow_the_config(tmp_path):
    alerts = {
        "ttft_p95_warning_seconds": 1,
        "itl_p95_warning_seconds": 0.15,
        "queue_waiting_threshold": 7,
        "kv_usage_threshold": 0.8,
        "preemptions_per_request": 0.1,
        "error_ratio_warning": 0.02,
    }
    gpu = {"enabled": True, "memory_full_threshold": 0.95, "idle_utilization_below": 0.2}
    paging = {"min_ready_replicas": 2}
    bundle = generate(tmp_path / "b", config={"alerts": alerts, "gpu": gpu, "paging": paging})
    panels = {(d, p["title"]): p for d, p in dashboard_panels(bundle)}

    def steps(dash: str, title: str) -> list[float]:
        thresholds = panels[(f"vLLM / {dash}", title)]["fieldConfig"]["defaults"]["thresholds"]["steps"]
        return [s["value"] for s in thresholds][1:]

    for dash in ("Instance and model", "Overview"):
        assert steps(dash, "Time to first token") == [1]
        assert steps(dash, "Inter-token latency") == [0.15]
        assert steps(dash, "Error ratio") == [0.02]
    assert steps("Overview", "Ready replicas per model") == [2]
    assert steps("KV cache and scheduler", "Waiting vs running") == [7]
    assert steps("KV cache and scheduler", "KV-cache usage per engine") == [0.8]
    assert steps("KV cache and scheduler", "Preemptions per finished request") == [0.1]
    assert steps("Overview", "KV-cache usage") == [0.8]
    assert steps("Overview", "Requests running and waiting") == [7]
    assert steps("Instance and model", "Framebuffer used") == [0.95]
    assert steps("Instance and model", "GPU utilisation against running requests") == [0.2]
    # The budget-burn panels draw the burn factors of the multi-window alerts.
    assert steps("Overview", "TTFT error-budget burn") == [1.0, 3.0, 6.0, 14.4]


def test_feature_alert_thresholds_follow_the_config(tmp_path):
    source = tmp_path / "features.prom"
    source.write_text(catalog_exposition("0.33.0", features=FEATURES, t=120, engines=("0", "1")))
    alerts = {"spec_decode_acceptance_below": 0.35, "engine_kv_spread": 0.4, "engine_waiting_spread": 6}
    bundle = generate(tmp_path / "b", "--metrics-file", str(source), config={"alerts": alerts})
    panels = {p["title"]: p for _, p in dashboard_panels(bundle)}

    def steps(title: str) -> list[float]:
        return [s["value"] for s in panels[title]["fieldConfig"]["defaults"]["thresholds"]["steps"]][1:]

    assert steps("Draft acceptance rate per replica") == [0.35]
    assert steps("KV-cache usage spread across engines") == [0.4]
    assert steps("Queue spread across engines") == [6]
    rules = yaml.safe_load((bundle / "alerts" / "vllm-alerts.rules.yml").read_text())
    fired = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"VllmSpecDecodeAcceptanceLow", "VllmEngineImbalance", "VllmKVTransferFailures"} <= fired


def test_latency_heatmaps_sit_next_to_their_percentiles():
    for dash in dashboards(REPO):
        panels = [p for p in dash["panels"] if p["type"] != "row"]
        heatmaps = [p for p in panels if p["type"] == "heatmap"]
        for heat in heatmaps:
            (target,) = heat["targets"]
            assert target["format"] == "heatmap" and target["legendFormat"] == "{{le}}"
            # A fleet dashboard reads the per-model bucket rate the rules record (every replica of
            # the models selected); one replica's dashboard reads its own buckets.
            raw = re.fullmatch(
                r"sum by \(le\) \(rate\(\S+_bucket\{.*\}\[\$__rate_interval\]\)\)", target["expr"]
            )
            recorded = re.fullmatch(r"sum by \(le\) \(job_model:\S+_bucket:rate5m\{.*\}\)", target["expr"])
            assert recorded if dash["uid"] == "vllm-obs-overview" else raw, target["expr"]
            assert heat["options"]["calculate"] is False
            beside = [p for p in panels if p["gridPos"]["y"] == heat["gridPos"]["y"] and p is not heat]
            assert any(p["title"] + " distribution" == heat["title"] for p in beside), heat["title"]
    titles = {(d["title"], p["title"]) for d in dashboards(REPO) for p in d["panels"]}
    for title in ("Time to first token", "Inter-token latency", "End-to-end latency"):
        assert ("vLLM / Instance and model", f"{title} distribution") in titles


@pytest.mark.parametrize("which", ("default", "multi-cluster", "gpu"))
def test_firing_alerts_are_annotations_filtered_by_the_variables(which, bundles):
    for dash in dashboards(bundles[which]):
        (annotation,) = dash["annotations"]["list"]
        assert annotation["datasource"] == DATASOURCE and annotation["enable"]
        selector = promql_parser.parse(expand(annotation["expr"], dashboard_variables(dash)))
        matchers = {m.name: m.value for m in selector.matchers.matchers}
        assert selector.name == "ALERTS"
        assert matchers["alertstate"] == "firing" and matchers["alertname"] == "Vllm.*"
        assert "$instance|" in annotation["expr"] and "$model_name|" in annotation["expr"]
        # The log exporter's and probe's alerts carry their own job; fleet-wide ones carry none.
        assert re.fullmatch(matchers["job"], "vllm-log-exporter") and re.fullmatch(matchers["job"], "")
        if which == "multi-cluster":
            assert 'k8s_cluster=~"$cluster|"' in annotation["expr"]
        if which == "gpu":
            assert re.fullmatch(matchers["job"], "dcgm-exporter")


def test_dashboard_links_carry_the_variables_and_the_time_range():
    found = dashboards(REPO)
    for dash in found:
        targets = [link["url"] for link in dash["links"]]
        others = [f"/d/{d['uid']}" for d in found if d is not dash]
        assert sorted(targets) == sorted(others)
        assert all(link["includeVars"] and link["keepTime"] for link in dash["links"])
    overview = next(d for d in found if d["uid"] == "vllm-obs-overview")
    drill = next(p for p in overview["panels"] if p["title"] == "Requests running and waiting")
    (link,) = drill["fieldConfig"]["defaults"]["links"]
    assert link["url"].startswith("/d/vllm-obs-instance?${__url_time_range}")
    assert "var-instance=${__field.labels.instance}" in link["url"]


def test_engine_variable_where_the_source_has_engines(bundles):
    for which, expected in (("default", True), ("v0", False)):
        for dash in dashboards(bundles[which]):
            names = [v["name"] for v in dash["templating"]["list"]]
            has = dash["uid"] in ("vllm-obs-instance", "vllm-obs-kv-cache") and expected
            assert ("engine" in names) == has, (which, dash["title"])
            if not has:  # a query must not filter on a variable the dashboard lacks
                assert "$engine" not in json.dumps(dash)


def test_feature_rows_appear_only_with_their_feature(tmp_path, featured):
    def rows(bundle: Path) -> set[str]:
        return {row for _, row, _ in panels_by_row(bundle)}

    feature_rows = {
        "Speculative decoding",
        "LoRA adapters",
        "GPUs",
        "KV connectors (transfer and offloading)",
        "KV-block residency (--kv-cache-metrics)",
    }
    plain = generate(tmp_path / "plain", "--metrics-file", str(FIXTURES / "vllm-0.32.0-cpu-traffic.prom"))
    assert not feature_rows & rows(plain)
    assert {"Engines (data parallel)", "Admission control", "Prompt sources and caches"} <= rows(plain)
    spec = generate(tmp_path / "spec", "--metrics-file", str(FIXTURES / "vllm-0.32.0-cpu-spec-decode.prom"))
    assert feature_rows & rows(spec) == {"Speculative decoding"}
    assert feature_rows <= rows(featured)
    titles = {p["title"] for _, _, p in panels_by_row(featured)}
    assert {"Acceptance by draft position", "LoRA adapters now", "NIXL throughput", "XID errors"} <= titles
    v0 = generate(tmp_path / "v0", "--vllm-version", "0.9.0", "--engine", "v0")
    assert "Engines (data parallel)" not in rows(v0)


def test_version_stat_shows_the_version_label():
    panel = next(p for _, p in dashboard_panels(REPO) if p["title"] == "vLLM version (from the log)")
    assert panel["options"]["textMode"] == "name"
    assert panel["targets"][0]["legendFormat"] == "{{version}}"


@pytest.mark.prometheus
def test_lora_counts_come_from_the_adapter_lists(featured, tmp_path):
    """The LoRA recording rules, run by the real promtool on a server whose adapters change."""
    name = "vllm:lora_requests_info"

    def series(running: str, waiting: str, values: str) -> dict:
        labels = f'job="vllm", instance="a:8000", max_lora="4", running_lora_adapters="{running}", waiting_lora_adapters="{waiting}"'
        return {"series": f"{name}{{{labels}}}", "values": values}

    test = {
        "rule_files": [str(featured / "alerts" / "vllm-recording.rules.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                # The set at 0-2m, then a new one from 3m; the old series keeps its old timestamp.
                "input_series": [
                    series("sql,chat", "", "0 60 120 120 120 120"),
                    series("sql,chat,summary", "a,b,c", "_ _ _ 180 240 300"),
                ],
                "promql_expr_test": [
                    {
                        "expr": "job_instance:vllm_lora_adapters_running:count",
                        "eval_time": "1m",
                        "exp_samples": [{"labels": _lora_labels("running"), "value": 2}],
                    },
                    {
                        "expr": "job_instance:vllm_lora_adapters_waiting:count",
                        "eval_time": "1m",
                        "exp_samples": [{"labels": _lora_labels("waiting"), "value": 0}],
                    },
                    {
                        "expr": "job_instance:vllm_lora_adapters_running:count",
                        "eval_time": "4m",
                        "exp_samples": [{"labels": _lora_labels("running"), "value": 3}],
                    },
                    {
                        "expr": "job_instance:vllm_lora_adapters_waiting:count",
                        "eval_time": "4m",
                        "exp_samples": [{"labels": _lora_labels("waiting"), "value": 3}],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "lora.test.yml"
    path.write_text(yaml.safe_dump(test))
    done = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _lora_labels(which: str) -> str:
    return f'{{__name__="job_instance:vllm_lora_adapters_{which}:count", job="vllm", instance="a:8000", max_lora="4"}}'


def test_marked_as_generated_and_deterministic(tmp_path):
    again = generate(tmp_path / "again")
    for path in (REPO / "dashboards").glob("*.json"):
        text = path.read_text()
        assert "Generated by vllm-obs" in json.loads(text)["description"]
        assert text == (again / "dashboards" / path.name).read_text()
        assert json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n" == text


@pytest.mark.parametrize(
    "release, engine, absent",
    [
        (
            "0.7.1",
            "v1",
            {"End-to-end request latency", "Preemptions per finished request", "Where the time goes (p95)"},
        ),
        ("0.13.0", "v1", {"Waiting by reason", "Requests swapped to CPU"}),
        ("0.6.0", "v0", {"HTTP responses by status"}),
    ],
)
def test_a_release_without_a_signal_loses_its_panel(release, engine, absent, tmp_path):
    bundle = generate(tmp_path / "b", "--vllm-version", release, "--engine", engine)
    titles = {p["title"] for _, p in dashboard_panels(bundle)}
    assert not absent & titles
    assert "Time to first token" in titles


def test_v0_shows_what_only_v0_has(tmp_path):
    bundle = generate(tmp_path / "b", "--vllm-version", "0.6.0", "--engine", "v0")
    titles = {p["title"] for _, p in dashboard_panels(bundle)}
    assert {"Requests swapped to CPU", "Prefix-cache hit rate"} <= titles


def test_grafana_provisioning_points_at_the_dashboards_and_prometheus():
    provider = yaml.safe_load((REPO / "grafana/provisioning/dashboards/vllm-obs.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/vllm-obs"
    datasource = yaml.safe_load((REPO / "grafana/provisioning/datasources/vllm-obs.yml").read_text())
    assert datasource["datasources"][0]["jsonData"]["timeInterval"] == "15s"
