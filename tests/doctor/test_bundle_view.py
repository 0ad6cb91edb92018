"""What the doctor reads from a bundle on disk: jobs and what each is read for, the release."""

from __future__ import annotations

import pytest
from vllm_obs.catalog import Catalog
from vllm_obs.doctor.bundle_view import load, parse_source
from vllm_obs.doctor.grafana_vars import builtins, expand, regex_alternatives

from tests.support.bundles import generate

CATALOG = Catalog.load()


def test_jobs_and_their_series_come_from_the_rules(tmp_path):
    config = {
        "prometheus": {
            "vllm_job": "llm-servers",
            "extra_selector": 'namespace="llm"',
            "log_exporter_job": "llm-logs",
            "probe_job": "llm-canary",
        }
    }
    view = load(generate(tmp_path / "b", config=config), CATALOG)
    assert list(view.job_reads) == ["llm-servers", "llm-logs", "llm-canary", "prometheus", "alertmanager"]
    vllm, logs, canary, prometheus, alertmanager = view.job_reads.values()
    assert (vllm.role, logs.role, canary.role) == ("vLLM", "log exporter", "canary probe")
    assert (prometheus.role, alertmanager.role) == ("Prometheus itself", "Alertmanager itself")
    # The self-monitoring alerts read the pipeline's own failure counters.
    assert "prometheus_rule_evaluation_failures_total" in prometheus.names
    assert "alertmanager_notifications_failed_total" in alertmanager.names
    # Every read of the vLLM job carries the extra selector, so the doctor asks with it too.
    assert vllm.selector == 'job="llm-servers", namespace="llm"'
    assert logs.selector == 'job="llm-logs"'
    assert (
        "vllm:kv_cache_usage_perc" in vllm.names and "vllm:time_to_first_token_seconds_bucket" in vllm.names
    )
    assert all(n.startswith("vllm_log_") for n in logs.names)
    assert all(n.startswith("vllm_probe_") for n in canary.names)
    # Recording rules are not series a job exports.
    assert not any(":" in n and not n.startswith("vllm:") for s in view.job_reads.values() for n in s.names)


def test_a_bundle_without_probe_or_exporter_reads_only_vllm_and_the_pipeline(tmp_path):
    view = load(generate(tmp_path / "b", config={"prometheus": {"probes": [], "log_exporters": []}}), CATALOG)
    assert [s.role for s in view.job_reads.values()] == ["vLLM", "Prometheus itself", "Alertmanager itself"]
    assert [j.name for j in view.jobs] == ["vllm", "prometheus", "alertmanager"]


def test_the_release_a_bundle_was_generated_for():
    one = parse_source("the embedded catalog for vLLM 0.9.1 (v1 engine)", CATALOG)
    assert (one.engine, one.versions, one.minors) == ("v1", ("0.9.1",), frozenset({"0.9"}))
    featured = parse_source(
        "the embedded catalog for vLLM 0.32.0 (v1 engine, with lora, spec_decode)", CATALOG
    )
    assert featured.versions == ("0.32.0",)
    span = parse_source("http://h:8000/metrics (engine v1, looks like vLLM 0.32.0 to 0.33.0)", CATALOG)
    assert span.versions == ("0.32.0", "0.33.0") and span.minors == frozenset({"0.32", "0.33"})
    assert parse_source("saved.prom (engine v1, a release newer than the catalog)", CATALOG) is None


@pytest.mark.parametrize(
    ("range_text", "scrape", "rate_interval"),
    [("now-1h", "15s", "1m"), ("now-1h", "1s", "5s"), ("now-6h", "15s", "1m"), ("now-24h", "15s", "101s")],
)
def test_grafana_builtins(range_text, scrape, rate_interval):
    values = builtins(range_text, scrape)
    assert values["__rate_interval"] == rate_interval
    expr = expand(
        'rate(a{instance=~"$instance", x="${x}"}[$__rate_interval]) [[y]]', {**values, "instance": "h:1"}
    )
    assert expr == f'rate(a{{instance=~"h:1", x="${{x}}"}}[{rate_interval}]) [[y]]'


def test_multi_values_become_an_escaped_regex():
    assert regex_alternatives(["127.0.0.1:8000"]) == "127\\\\.0\\\\.0\\\\.1:8000"
    assert regex_alternatives(["a", "b.c"]) == "(a|b\\\\.c)"
