"""The fleet benchmark's simulator and query rewriting (benchmarks/fleet/). The simulator must keep
the real 0.32 exposition's families, labels and buckets, and its unhealthy engines must look so to
the alerts; raw panel queries must answer what the recorded ones answer."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.fleet import variants
from benchmarks.fleet.exposition import CAPTURE, Template
from benchmarks.fleet.fleet import CONDITIONS, file_sd_targets, plan
from benchmarks.fleet.load_model import load_profiles
from benchmarks.fleet.measure import check_equivalence, unranked
from benchmarks.fleet.panels import inline, panel_queries, recording_rules
from benchmarks.fleet.prometheus import Prometheus, write_config
from benchmarks.fleet.simulator import Fleet

from tests.support.simulated_fleet import fleet_bundle, simulated_fleet

REPO = Path(__file__).resolve().parents[2]


def families(text: str) -> dict[str, dict]:
    """{family: {"type": ..., "samples": {(name, labels without model_name): value}}}"""
    out = {}
    for family in text_string_to_metric_families(text):
        samples = {}
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "model_name"))
            samples[(s.name, labels)] = s.value
        out[family.name] = {"type": family.type, "samples": samples}
    return out


def value(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError(name)


def p95(text: str, family: str) -> float:
    """histogram_quantile(0.95) of the engine's whole history, as Prometheus interpolates it."""
    buckets = sorted(
        (
            (float(s.labels["le"]), s.value)
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == family + "_bucket"
        ),
    )
    rank = 0.95 * buckets[-1][1]
    previous_bound, previous_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return previous_bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (
                count - previous_count
            )
        previous_bound, previous_count = bound, count
    raise AssertionError("no bucket reaches the rank")


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return Fleet(24, seed=3, start=1_800_000_000.0)


def scrape(fleet: Fleet, index: int, at: float) -> str:
    return fleet.engines[index].exposition(at)


def test_exposition_keeps_the_captured_families_labels_and_buckets(fleet):
    captured = families(CAPTURE.read_text())
    text = scrape(fleet, 0, 1_800_000_060.0)
    simulated = families(text)
    assert simulated.keys() == captured.keys()
    for name, family in captured.items():
        assert simulated[name]["type"] == family["type"], name
        assert simulated[name]["samples"].keys() == family["samples"].keys(), name
    models = {
        m
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if (m := s.labels.get("model_name"))
    }
    assert models == {fleet.members[0].model}


def test_counters_and_histograms_only_grow_and_stay_consistent(fleet):
    first = families(scrape(fleet, 1, 1_800_000_100.0))
    second_text = scrape(fleet, 1, 1_800_000_400.0)
    second = families(second_text)
    for name, family in first.items():
        if family["type"] in ("counter", "histogram", "summary"):
            for key, before in family["samples"].items():
                if not key[0].endswith("_created"):
                    assert second[name]["samples"][key] >= before, (name, key)
    assert value(second_text, "vllm:request_success_total", finished_reason="stop") > 0
    for family in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"):
        buckets = [v for (n, _), v in second[family]["samples"].items() if n == family + "_bucket"]
        assert buckets == sorted(buckets)
        assert buckets[-1] == value(second_text, family + "_count")


def member(fleet: Fleet, condition: str | None) -> int:
    return next(m.index for m in fleet.members if m.condition == condition)


def test_unhealthy_engines_show_their_condition(fleet):
    start = 1_800_000_000.0
    healthy, high_ttft = member(fleet, None), member(fleet, "high_ttft")
    stalled, saturated, throttled = (
        member(fleet, "stalled"),
        member(fleet, "kv_saturated"),
        member(fleet, "throttled"),
    )
    late = start + 1800
    assert p95(scrape(fleet, healthy, late), "vllm:time_to_first_token_seconds") < 2
    assert 2 < p95(scrape(fleet, high_ttft, late), "vllm:time_to_first_token_seconds") < 5

    before = scrape(fleet, stalled, start + 60)
    after = scrape(fleet, stalled, late)
    assert value(after, "vllm:generation_tokens_total") == value(before, "vllm:generation_tokens_total") == 0
    assert value(after, "vllm:num_requests_running") > 0

    text = scrape(fleet, saturated, late)
    assert value(text, "vllm:kv_cache_usage_perc") > 0.9
    assert (
        value(text, "vllm:num_preemptions_total")
        / value(text, "vllm:request_success_total", finished_reason="stop")
        > 0.05
    )

    early = value(scrape(fleet, throttled, start + 300), "vllm:num_requests_waiting")
    later = value(scrape(fleet, throttled, start + 3000), "vllm:num_requests_waiting")
    assert later > early > 0
    assert value(scrape(fleet, throttled, start + 3001), "vllm:kv_cache_usage_perc") < 0.5


def test_plan_spreads_models_and_unhealthy_engines():
    profiles = load_profiles()
    members = plan(1000, profiles)
    assert len({m.instance for m in members}) == len({m.path for m in members}) == 1000
    assert sorted(m.condition for m in members if m.condition) == sorted(CONDITIONS)
    shares = {name: sum(m.model == name for m in members) / 1000 for name in profiles["models"]}
    # The unhealthy engines rotate through the models, which may move a share by 1/1000 each.
    assert shares == pytest.approx(
        {name: model["share"] for name, model in profiles["models"].items()}, abs=0.005
    )
    with pytest.raises(ValueError, match="too few"):
        plan(6, profiles)


def test_file_sd_gives_every_engine_its_path_and_instance():
    members = plan(10, load_profiles())
    groups = file_sd_targets(members, "127.0.0.1:9")
    assert {g["labels"]["instance"] for g in groups} == {m.instance for m in members}
    assert all(g["targets"] == ["127.0.0.1:9"] for g in groups)
    assert groups[3]["labels"]["__metrics_path__"] == "/engines/3/metrics"


def test_template_refuses_an_unparseable_line():
    with pytest.raises(ValueError, match="cannot parse"):
        Template("# TYPE x counter\nx 1 2 3\n")


# Query rewriting --------------------------------------------------------------------------


def test_inlining_replaces_every_recording_rule_and_keeps_the_panel_matchers(tmp_path):
    import promql_parser

    bundle = fleet_bundle(tmp_path, 9)
    rules = recording_rules(sorted((bundle / "alerts").glob("*.rules.yml")))
    queries = panel_queries(
        bundle / "dashboards", rules, "1m", "3600s", "15s", first={"$instance": "vllm-0:8000"}
    )
    assert sum(q.uses_recording_rules for q in queries) >= 30
    opened_on_one = [
        q for q in queries if q.dashboard == "vLLM / Instance and model" and "vllm-0:8000" in q.expr
    ]
    assert opened_on_one and not any('instance=~".+"' in q.expr for q in opened_on_one)
    for q in queries:
        promql_parser.parse(q.raw)
        assert not any(name in q.raw for name in rules), q.raw
    ratio = inline('job_instance_model:vllm_request_errors:ratio_5m{instance=~"a.*"}', rules)
    selectors = re.findall(r"[\w:]+\{[^}]*\}", ratio)
    assert len(selectors) >= 2  # the failed and the finished rates at least
    assert all('instance=~"a.*"' in selector for selector in selectors), ratio
    assert 'finished_reason="error"' in ratio


def test_equivalence_compares_what_an_outer_topk_ranks():
    """Tied values let topk keep different series of a record and of its inlined expression:
    the comparison reads every series under an outer topk or bottomk, and nothing else changes."""
    assert unranked('topk(5, a:b:c{x=~"(y|z)"})').strip() == 'a:b:c{x=~"(y|z)"}'
    assert unranked("bottomk(3, min by (i) (m))").strip() == "min by (i) (m)"
    assert unranked("topk(5, sum(m)) / topk(5, n)") == "topk(5, sum(m)) / topk(5, n)"
    assert unranked("sum(topk(5, m))") == "sum(topk(5, m))"

@pytest.mark.prometheus
def test_simulated_fleet_in_a_real_prometheus(tmp_path):
    """12 engines scraped every second by the real Prometheus with the bundle's rules: every
    engine is a distinct target, the stalled engine's tokens stop, and each raw panel query
    answers exactly like its recorded version."""
    with simulated_fleet(tmp_path) as (port, targets, manifest, _):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/engines/3/metrics", headers={"Accept-Encoding": "gzip"}
        )
        with urllib.request.urlopen(request, timeout=5) as page:
            assert page.headers["Content-Encoding"] == "gzip"
            assert b"vllm:kv_cache_usage_perc" in gzip.decompress(page.read())
        engines = json.loads(manifest.read_text())["engines"]

        bundle = fleet_bundle(tmp_path, port, interval="1s")
        rule_files = sorted((bundle / "alerts").glob("*.rules.yml"))
        config = write_config(
            tmp_path / "prometheus.yml", bundle / "prometheus" / "prometheus.yml", targets, rule_files
        )
        with Prometheus(config, tmp_path / "prom") as prom:
            deadline = time.monotonic() + 60
            while prom.targets_up() != (12, 12) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert prom.targets_up() == (12, 12)
            time.sleep(20)  # samples enough in the rate windows
            instances = {r["metric"]["instance"] for r in prom.query("vllm:num_requests_running")}
            assert instances == {e["instance"] for e in engines}
            stalled = next(e["instance"] for e in engines if e["condition"] == "stalled")
            assert prom.query(f'increase(vllm:generation_tokens_total{{instance="{stalled}"}}[1m]) == 0')
        rules = recording_rules(rule_files)
        # This Prometheus holds a few minutes: a 3-day subquery at 1 s reads the same samples in 260 000 steps.
        first = {"$instance": min(e["instance"] for e in engines)}
        queries = panel_queries(
            bundle / "dashboards", rules, "4s", "60s", "1s", every="1s", history="10m", first=first
        )
        # Recorded and raw queries are compared on frozen data: the same Prometheus data restarted with
        # the rules and no scrape job. Live, a scrape stored after an evaluation it predates is seen by
        # the raw query and not by the rule.
        frozen = tmp_path / "frozen.yml"
        frozen.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "scrape_configs": []}))
        with Prometheus(frozen, tmp_path / "prom") as prom:
            restarted = time.time()
            deadline = time.monotonic() + 30
            # Every group evaluated twice since: a rule reading another's record sees one made here.
            while not _every_group_evaluated_since(prom, restarted + 2) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _every_group_evaluated_since(prom, restarted + 2)
            # A stop writes no staleness markers but for a scrape it cut short (up 0, likelier under
            # load): every engine whose last scrape succeeded still answers.
            scraped = {r["metric"]["instance"] for r in prom.query("up == 1")} & {e["instance"] for e in engines}
            instances = {r["metric"]["instance"] for r in prom.query("vllm:num_requests_running")}
            assert scraped and instances == scraped
            checked = check_equivalence(prom, queries, rules)
            assert len(checked) >= 30
            different = [c for c in checked if c["matching"] != c["series"] or c["series"] != c["raw_series"]]
            assert not different, different
            assert all(c["series"] > 0 for c in checked)


def _every_group_evaluated_since(prom: Prometheus, since: float) -> bool:
    """Whether every rule group's last evaluation is at or after `since` (Unix seconds)."""
    stamps = prom.last_evaluations()
    return bool(stamps) and min(stamps) >= since


@pytest.mark.prometheus
def test_variants_keep_every_name_alerts_and_dashboards_read(tmp_path):
    bundle = fleet_bundle(tmp_path, 9)
    rule_files = sorted((bundle / "alerts").glob("*.rules.yml"))
    current = set(recording_rules(rule_files))
    readers = variants.dashboard_exprs(bundle / "dashboards") + [
        r["expr"] for f in rule_files for g in variants.load([f])[str(f)] for r in g["rules"] if "alert" in r
    ]
    read = {n for expr in readers for n in variants._NAME.findall(expr) if n in current}
    for name in variants.VARIANTS:
        files = variants.write(name, rule_files, tmp_path / name)
        names = set(variants.recorded_names(files))
        assert read <= names, (name, read - names)
        result = subprocess.run(
            ["promtool", "check", "rules", *map(str, files)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.prometheus
def test_slo_windows_from_5m_rates_answer_like_rate_over_the_window(tmp_path):
    """The SLO rules' long windows (the mean of recorded 5-minute rates, their edges put back)
    against rate() over the raw series for the whole window, on the same backfilled history. The
    history holds the recorded rates, not the edges: those are computed from the rates here."""
    from benchmarks.fleet.backfill import SIGNALS, slo_rule_files, write_openmetrics

    bundle = fleet_bundle(tmp_path, 9)
    end = time.time() - 60
    history = tmp_path / "history.om"
    write_openmetrics(history, engines=12, days=0.25, end=end)
    data = tmp_path / "prom" / "data"
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(history), str(data)],
        check=True,
        capture_output=True,
    )
    rule_files = sorted((bundle / "alerts").glob("*.rules.yml"))
    rules = {
        r["record"]: r["expr"]
        for g in variants.load(slo_rule_files(rule_files, tmp_path)).values()
        for grp in g
        for r in grp["rules"]
    }
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {evaluation_interval: 15s}\n")
    with Prometheus(config, tmp_path / "prom") as prom:
        compared = 0
        for signal, window in (
            ("vllm_time_to_first_token_seconds", "1h"),
            ("vllm_inter_token_latency_seconds", "6h"),
        ):
            histogram, threshold = SIGNALS[signal]
            total = f'sum by (job, model_name) (rate({histogram}_count{{job="vllm"}}[{window}]))'
            good = f'sum by (job, model_name) (rate({histogram}_bucket{{job="vllm", le="{threshold}"}}[{window}]))'
            raw = f"({total} - {good}) / {total}"
            recorded = rules[f"job_model:{signal}:slo_miss_ratio_{window}"]
            before = {r["metric"]["model_name"]: float(r["value"][1]) for r in prom.query(raw, at=end)}
            after = {r["metric"]["model_name"]: float(r["value"][1]) for r in prom.query(recorded, at=end)}
            assert before.keys() == after.keys() and before
            for model, value in before.items():
                assert after[model] == pytest.approx(value, rel=0.05, abs=2e-4), (signal, model)
                compared += 1
    assert compared == 6
