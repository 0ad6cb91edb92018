"""The doctor on real Prometheus and Alertmanager stacks, each broken in one way. vLLM is a stand-in
serving a saved real 0.32 exposition, since the monitoring is what breaks here; its counters do not
move, so the doctor warns of no traffic, and warnings do not fail a run."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests
import yaml
from vllm_obs.catalog import Catalog
from vllm_obs.doctor import bundle_view
from vllm_obs.doctor.access import Auth
from vllm_obs.doctor.checks.panels import _why
from vllm_obs.doctor.clients import PrometheusClient
from vllm_obs.doctor.context import Context
from vllm_obs.doctor.findings import Report

from tests.support.doctor_stack import TRAFFIC_EXPOSITION, DoctorRun, stand_in_stack, wait_until
from tests.support.loopback import Page

pytestmark = pytest.mark.prometheus


def fails(run: DoctorRun, family: str | None = None) -> list[dict]:
    return run.checks("fail", family)


def exposed_names(path: Path = TRAFFIC_EXPOSITION) -> set[str]:
    return {
        line.split("{")[0].split(" ")[0] for line in path.read_text().splitlines() if line and line[0] != "#"
    }


def assert_consistent(run: DoctorRun) -> None:
    """The text and JSON reports say the same, and the exit code follows the failures."""
    assert run.report["verdict"]["exit_code"] == run.code
    assert len(run.lines("fail")) == len(fails(run)) == run.report["verdict"]["failures"]
    assert len(run.lines("warn")) == len(run.checks("warn")) == run.report["verdict"]["warnings"]
    assert run.out.rstrip().splitlines()[-1].startswith("Verdict: ")
    assert run.code == (1 if fails(run) else 0)


def test_a_stack_whose_only_trouble_is_no_traffic_is_healthy(tmp_path):
    with stand_in_stack(tmp_path) as stack:
        run = stack.doctor()
    assert_consistent(run)
    assert run.code == 0, run.text_of("fail")
    assert "Verdict: HEALTHY with" in run.out
    oks = {c["subject"] for c in run.checks("ok")}
    assert {"vLLM (job vllm)", "log exporter (job vllm-log-exporter)", "Prometheus → Alertmanager"} <= oks
    assert {
        "WatchdogVllmObs in Alertmanager",
        "Alertmanager receivers",
        "log exporter instance",
        "silences",
    } <= oks
    # Every rule group is loaded and the same as on disk.
    groups = [c for c in run.checks("ok", "rules") if c["subject"].startswith("vllm-obs.")]
    assert groups and all("same" in c["message"] for c in groups)
    # The warnings are all about traffic that did not happen (the saved exposition stands still).
    quiet = ("traffic", "not exported yet", "has counted nothing")
    assert run.checks("warn") and all(
        any(word in c["message"] for word in quiet) for c in run.checks("warn")
    ), run.text_of("warn")


def test_a_bundle_for_another_release_names_each_renamed_series(tmp_path):
    with stand_in_stack(tmp_path, source=("--vllm-version", "0.9.1")) as stack:
        # The exporter reads the log's version line on its own clock: its first scrape may
        # come before it (seen on a loaded machine), and the drift check needs the series.
        wait_until(
            lambda: bool(stack.prom.api("/api/v1/query", query="vllm_log_vllm_version_info")["result"]),
            "the log exporter's version series in Prometheus",
        )
        run = stack.doctor()
    assert_consistent(run)
    assert run.code == 1
    renamed = {
        c["subject"]: c["message"].split("the server has ", 1)[1].split(" ", 1)[0]
        for c in fails(run, "names")
        if "the server has " in c["message"]
    }
    assert renamed == {
        "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",
        "vllm:gpu_prefix_cache_hits_total": "vllm:prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_queries_total": "vllm:prefix_cache_queries_total",
        "vllm:time_per_output_token_seconds_bucket": "vllm:inter_token_latency_seconds_bucket",
        "vllm:time_per_output_token_seconds_count": "vllm:inter_token_latency_seconds_count",
    }
    # Every replacement is what the server really exposes; every old name is not.
    names = exposed_names()
    assert set(renamed.values()) <= names and not set(renamed) & names
    assert all("regenerate the bundle" in c["action"] for c in fails(run, "names"))
    release = next(c for c in run.checks(family="names") if c["subject"] == "vLLM release")
    assert (
        release["status"] == "warn"
        and "0.32.0 to 0.34.0" in release["message"]
        and "0.9.1" in release["message"]
    )
    # The empty panels are traced to the renames.
    assert any("vllm:kv_cache_usage_perc instead" in c["message"] for c in fails(run, "dashboards"))
    drift = next(c for c in run.checks(family="lifecycle") if c["subject"] == "vLLM version")
    assert drift["status"] == "warn" and "regenerate the bundle" in drift["action"]


def test_an_exporter_instance_that_matches_no_vllm_target_names_the_broken_inhibition(tmp_path):
    with stand_in_stack(tmp_path, exporter_instance="vllm:8000") as stack:
        run = stack.doctor()
    assert_consistent(run)
    assert run.code == 1
    (line,) = [c for c in fails(run, "labels") if c["subject"] == "log exporter instance"]
    assert line["items"] == ["vllm:8000"]
    assert "the inhibition of" in line["message"] and "by VllmEngineDead" in line["message"]
    assert "VllmHighTimeToFirstToken" in line["message"]
    assert stack.vllm in line["action"]  # the instance it should carry


def test_a_rule_file_missing_from_prometheus(tmp_path):
    def drop_alerts(config: dict) -> None:
        config["rule_files"] = [f for f in config["rule_files"] if "alerts.rules" not in f]

    with stand_in_stack(tmp_path, prometheus_edit=drop_alerts, wait_for_watchdog=False) as stack:
        run = stack.doctor()
    assert_consistent(run)
    (missing,) = [c for c in fails(run, "rules") if c["subject"] == "alerts/vllm-alerts.rules.yml"]
    assert "not loaded" in missing["message"] and "rule_files" in missing["action"]
    watchdog = [c for c in fails(run, "alerting") if c["subject"] == "WatchdogVllmObs"]
    assert watchdog and "not loaded" in watchdog[0]["message"]
    # The recording rules are still there and checked.
    recording = yaml.safe_load((stack.bundle / "alerts" / "vllm-recording.rules.yml").read_text())["groups"]
    assert {g["name"] for g in recording} <= {c["subject"] for c in run.checks("ok", "rules")}


DUPLICATE_MATCH = 'vector(1) + on () (label_replace(vector(1), "side", "a", "", "") or label_replace(vector(1), "side", "b", "", ""))'


def test_a_rule_with_an_evaluation_error(tmp_path):
    """A rule the operator added to the bundle joins one series to two: Prometheus cannot evaluate it."""

    group: list[str] = []

    def add_rule(bundle: Path) -> None:
        path = bundle / "alerts" / "vllm-recording.rules.yml"
        data = yaml.safe_load(path.read_text())
        data["groups"][0]["rules"].append({"record": "site:doctor_test:joined", "expr": DUPLICATE_MATCH})
        group.append(data["groups"][0]["name"])
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    with stand_in_stack(tmp_path, bundle_edit=add_rule) as stack:
        run = stack.doctor()
    assert_consistent(run)
    (broken,) = [c for c in fails(run, "rules") if "fails to evaluate" in c["message"]]
    assert broken["subject"] == f"{group[0]} / site:doctor_test:joined"
    assert "duplicate" in broken["message"] or "many" in broken["message"]
    assert not any("stale" in c["message"] for c in fails(run, "rules"))  # disk and Prometheus agree


def stale_after(tmp_path, edit) -> tuple[dict, list[dict]]:
    """Doctor's stale-rules findings once `edit` changed the bundle's alert rules on disk (it
    returns the group it changed); Prometheus still runs the rules it loaded."""
    with stand_in_stack(tmp_path) as stack:
        path = stack.bundle / "alerts" / "vllm-alerts.rules.yml"
        data = yaml.safe_load(path.read_text())
        group = edit(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        run = stack.doctor()
    assert_consistent(run)
    return group, [c for c in fails(run, "rules") if "stale" in c["message"]]


def test_stale_rules_are_reported(tmp_path):
    """The bundle on disk moved a threshold."""
    rule = {}

    def move(data: dict) -> dict:
        rule.update(data["groups"][0]["rules"][0])
        moved = re.sub(r"> (\d+(?:\.\d+)?)", lambda m: f"> {2 * float(m.group(1)):g}", rule["expr"], count=1)
        assert moved != rule["expr"]
        data["groups"][0]["rules"][0]["expr"] = moved
        return data["groups"][0]

    group, stale = stale_after(tmp_path, move)
    assert [c["subject"] for c in stale] == [group["name"]]
    assert f"the expression of {rule['alert']} (rule 1) differs" in stale[0]["message"]


def test_a_stale_keep_firing_for_is_reported(tmp_path):
    """The bundle on disk keeps the capacity page open longer (paging.recovery_for), with the
    same expression."""
    where = {}

    def lengthen(data: dict) -> dict:
        group, index, rule = next(
            (g, i, r) for g in data["groups"] for i, r in enumerate(g["rules"]) if r.get("keep_firing_for")
        )
        rule["keep_firing_for"] = "1h"
        where.update(alert=rule["alert"], number=index + 1)
        return group

    group, stale = stale_after(tmp_path, lengthen)
    assert [c["subject"] for c in stale] == [group["name"]]
    assert (
        f"the `keep_firing_for` of {where['alert']} (rule {where['number']}) differs" in stale[0]["message"]
    )


def test_no_alertmanager_configured(tmp_path):
    with stand_in_stack(tmp_path, alerting=False) as stack:  # nothing sends the Watchdog: no wait
        run = stack.doctor()
    assert_consistent(run)
    (none,) = [c for c in fails(run, "alerting") if c["subject"] == "Prometheus → Alertmanager"]
    assert "no Alertmanager" in none["message"] and "alerting.alertmanagers" in none["action"]
    (undelivered,) = [c for c in fails(run, "alerting") if c["subject"] == "WatchdogVllmObs in Alertmanager"]
    assert "has not received it" in undelivered["message"]


def test_a_scrape_interval_too_long_for_the_rate_windows(tmp_path):
    """The running Prometheus scrapes vLLM every 90 s: a [5m] rate sees three samples at most, and
    the [2m] of alerts.target_down_for one, so a single missed scrape reads as a replica down."""

    def slow(config: dict) -> None:
        for job in config["scrape_configs"]:
            if job["job_name"] == "vllm":
                job["scrape_interval"], job["scrape_timeout"] = "90s", "10s"

    with stand_in_stack(tmp_path, prometheus_edit=slow, wait_for_scrapes=False) as stack:
        run = stack.doctor()
    assert_consistent(run)
    short = [c for c in fails(run, "labels") if c["subject"].startswith("[")]
    assert [c["subject"] for c in short] == ["[2m] over job vllm", "[5m] over job vllm"]
    down, rates = short
    assert "at most every 30 s" in down["action"] and down["items"] == [
        "job_instance_model:vllm_replica_unready:cause"
    ]
    assert "every 90 s" in rates["message"] and "at most every 75 s" in rates["action"]
    assert "job_instance_model:vllm_time_to_first_token_seconds:p95_5m" in rates["items"]


def silence(am_url: str, matchers: list[dict], comment: str) -> str:
    now = datetime.now(timezone.utc)
    body = {
        "matchers": matchers,
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
        "createdBy": "doctor-test",
        "comment": comment,
    }
    response = requests.post(f"{am_url}/api/v2/silences", json=body, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["silenceID"]


def test_silences_that_hide_vllm_alerts(tmp_path):
    with stand_in_stack(tmp_path) as stack:
        am = stack.am.url
        vllm_id = silence(
            am, [{"name": "alertname", "value": "Vllm.*", "isRegex": True, "isEqual": True}], "upgrade"
        )
        unrelated = silence(am, [{"name": "alertname", "value": "NodeDiskFull", "isRegex": False}], "disk")
        run = stack.doctor()
        watchdog_id = silence(
            am, [{"name": "alertname", "value": "WatchdogVllmObs", "isRegex": False}], "noisy"
        )
        wait_until(
            lambda: any(
                a["labels"]["alertname"] == "WatchdogVllmObs" and a["status"]["state"] == "suppressed"
                for a in requests.get(f"{am}/api/v2/alerts", timeout=10).json()
            ),
            "Watchdog to be silenced",
        )
        silenced = stack.doctor()
    assert_consistent(run)
    assert run.code == 0  # a silence is a warning: it may well be on purpose
    (line,) = [c for c in run.checks("warn", "alerting") if c["subject"] == f"silence {vllm_id}"]
    assert "VllmEngineDead" in line["items"] and "WatchdogVllmObs" not in line["items"]
    assert '"upgrade"' in line["message"] and f"amtool silence expire {vllm_id}" in line["action"]
    assert not [c for c in run.checks() if c["subject"] == f"silence {unrelated}"]
    # Silencing the dead man's switch breaks the alerting path.
    assert_consistent(silenced)
    assert silenced.code == 1
    assert any(
        c["subject"] == "WatchdogVllmObs in Alertmanager" and "silenced" in c["message"]
        for c in fails(silenced)
    )
    assert any(c["subject"] == f"silence {watchdog_id}" for c in silenced.checks("warn"))


def test_json_report_shape(tmp_path):
    with stand_in_stack(tmp_path, exporter_instance="vllm:8000") as stack:
        run = stack.doctor()
    data = run.report
    assert set(data) == {
        "prometheus",
        "alertmanager",
        "bundle",
        "bundle_source",
        "verdict",
        "checks",
        "timings_seconds",
        "requests",
    }
    # Bounded: some hundreds of queries (one per series the bundle reads), whatever the fleet.
    assert 20 < data["requests"]["prometheus"] < 800 and 0 < data["requests"]["alertmanager"] < 10
    assert data["bundle_source"] == "vLLM 0.32.0 to 0.34.0 (v1 engine)"
    assert set(data["timings_seconds"]) == {
        "targets",
        "names",
        "rules",
        "labels",
        "alerting",
        "dashboards",
        "lifecycle",
    }
    for check in data["checks"]:
        assert check["status"] in ("ok", "info", "skip", "warn", "fail")
        assert check["family"] in data["timings_seconds"]
        if check["status"] in ("warn", "fail"):
            assert check.get("action"), check
    json.dumps(data)  # plain data


def test_a_scrape_pool_named_otherwise_is_found_through_up(tmp_path):
    """As the Prometheus Operator does: the pool is podMonitor/..., the job label is relabelled."""

    def operator_names(config: dict) -> None:
        for job in config["scrape_configs"]:
            if job["job_name"] == "vllm":
                job["job_name"] = "podMonitor/llm/vllm/0"
                job.setdefault("relabel_configs", []).append({"target_label": "job", "replacement": "vllm"})

    with stand_in_stack(tmp_path, prometheus_edit=operator_names) as stack:
        run = stack.doctor()
    assert_consistent(run)
    assert run.code == 0, run.text_of("fail")
    vllm = next(c for c in run.checks("ok", "targets") if c["subject"] == "vLLM (job vllm)")
    assert "(from up)" in vllm["message"]


def test_a_config_other_than_the_bundles(tmp_path):
    config = tmp_path / "other.yml"
    config.write_text(yaml.safe_dump({"prometheus": {"vllm_job": "llm", "probes": []}}))
    with stand_in_stack(tmp_path) as stack:
        run = stack.doctor("--config", str(config))
    (line,) = [c for c in fails(run, "targets") if c["subject"] == "--config"]
    assert "llm" in line["message"] and "regenerate" in line["action"]


SPEC_DECODE_EXPOSITION = TRAFFIC_EXPOSITION.with_name("vllm-0.32.0-cpu-spec-decode.prom")


def test_a_counter_stored_without_total_and_a_feature_that_is_off(tmp_path):
    """The bundle was generated from a server running speculative decoding (a real capture);
    the server Prometheus scrapes runs without it, and a metric relabelling strips `_total`
    from one counter on the way in, as an OpenTelemetry translation can."""

    def strip_total(config: dict) -> None:
        for job in config["scrape_configs"]:
            if job["job_name"] == "vllm":
                job["metric_relabel_configs"] = [
                    {
                        "source_labels": ["__name__"],
                        "regex": "vllm:prompt_tokens_total",
                        "target_label": "__name__",
                        "replacement": "vllm:prompt_tokens",
                    }
                ]

    source = ("--metrics-file", str(SPEC_DECODE_EXPOSITION))
    with stand_in_stack(tmp_path, source=source, prometheus_edit=strip_total) as stack:
        run = stack.doctor()
    assert_consistent(run)
    (total,) = [c for c in fails(run, "names") if c["subject"] == "vllm:prompt_tokens_total"]
    assert "vllm:prompt_tokens exists" in total["message"] and "_total" in total["action"]
    feature = {c["subject"] for c in run.checks("warn", "names") if "spec_decode feature" in c["message"]}
    assert (
        "vllm:spec_decode_num_drafts_total" in feature
        and "vllm:spec_decode_num_draft_tokens_total" in feature
    )
    # Only those: nothing else of the server is missing.
    assert {c["subject"] for c in fails(run, "names")} == {"vllm:prompt_tokens_total"}


def test_a_receiver_whose_secret_file_is_missing_or_empty(tmp_path):
    """Alertmanager loads a receiver whose key file is missing, and amtool accepts it: only the
    doctor (and the first failed notification) says so."""

    def add_receivers(bundle: Path) -> None:
        path = bundle / "alerts" / "alertmanager.yml"
        data = yaml.safe_load(path.read_text())
        data["receivers"] += [
            {
                "name": "pager",
                "pagerduty_configs": [{"routing_key_file": "/etc/alertmanager/secrets/pd-key"}],
            },
            {"name": "chat", "slack_configs": [{"api_url_file": "/etc/alertmanager/secrets/slack-url"}]},
        ]
        path.write_text(yaml.safe_dump(data))

    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "slack-url").write_text("  \n")  # empty; pd-key is missing
    with stand_in_stack(tmp_path, bundle_edit=add_receivers) as stack:
        broken = stack.doctor("--alertmanager-secrets", str(secrets))
        (secrets / "pd-key").write_text("0123456789abcdef\n")
        (secrets / "slack-url").write_text("https://hooks.slack.example/T/B/x\n")
        fixed = stack.doctor("--alertmanager-secrets", str(secrets))
        unchecked = stack.doctor()
    assert_consistent(broken)
    (failure,) = [c for c in fails(broken, "alerting") if c["subject"] == "receiver secrets"]
    assert "pd-key" in failure["message"] and "is missing" in failure["message"]
    assert "slack-url" in failure["message"] and "is empty" in failure["message"]
    assert broken.code == 1
    assert [c["subject"] for c in fixed.checks("ok", "alerting") if c["subject"] == "receiver secrets"]
    assert not fails(fixed, "alerting")
    assert [c for c in unchecked.checks("skip", "alerting") if c["subject"] == "receiver secrets"]


def test_a_series_the_first_request_registers_is_waited_for_by_nothing(tmp_path):
    """A bundle for vLLM 0.34 (its render-time panel reads a histogram the server registers on its
    first request) on a server that has not shown it: a warning that names why, no failure. The
    stand-in shows what an idle 0.34 server shows (the 0.32 capture: the same series)."""
    with stand_in_stack(tmp_path, source=("--vllm-version", "0.34.0")) as stack:
        run = stack.doctor()
    assert_consistent(run)
    render = [c for c in run.checks(family="names") if "request_render_duration" in c["subject"]]
    assert render and all(c["status"] == "warn" and "first request" in c["message"] for c in render), render
    assert not [c for c in fails(run) if "request_render_duration" in c["message"]]


def test_a_scrape_that_fails_while_the_doctor_looks_is_named_not_blamed_on_the_query(tmp_path):
    with stand_in_stack(tmp_path, alerting=False) as stack:
        catalog = Catalog.load()
        prom = PrometheusClient(stack.prom.url, Auth(timeout=10))
        ctx = Context(bundle_view.load(str(stack.bundle), catalog), catalog, prom, Report("", None, "", ""))
        panel = 'vllm:num_requests_running{job="vllm"}'
        assert _why(ctx, panel) is None  # every scrape so far answered
        page = stack.vllm_server.pages["/metrics"]
        stack.vllm_server.pages["/metrics"] = Page(503, "engine busy\n")

        def up() -> float:
            return float(stack.prom.api("/api/v1/query", query='up{job="vllm"}')["result"][0]["value"][1])

        wait_until(lambda: up() == 0, "a failed scrape of the stand-in")
        stack.vllm_server.pages["/metrics"] = page
        wait_until(lambda: up() == 1, "the stand-in scraped again")
        cause = _why(ctx, panel)
        assert cause is not None and cause.status == "warn"
        assert "a scrape of job vllm failed while the doctor looked" in cause.text
        assert "run the doctor again" in cause.action
        assert _why(ctx, 'vllm_log_exporter_up{job="vllm-log-exporter"}') is None  # that job never failed
        prom.close()
