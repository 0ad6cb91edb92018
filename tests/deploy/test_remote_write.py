"""Many clusters through remote write, for real (docs/multi-cluster.md): two agents remote-write into
a central Prometheus with a real Alertmanager; a stopped server pages for its cluster alone, west's by
its own route. The clock is shortened through the bundle's knobs (docs/testing.md)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.generator.test_alertmanager import routes
from tests.support.bundles import generate, rule_exprs, selected_names
from tests.support.loopback import LoopbackServer
from tests.support.monitoring import Alertmanager
from tests.support.notifications import webhook_receivers
from tests.support.remote_write import (
    AgentPrometheus,
    ReceivingPrometheus,
    agent_config,
    central_config,
    write_yaml,
)
from tests.support.stand_in import stand_in

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).parent.parent.parent
# A real capture of an idle vLLM 0.32.0 CPU server: nothing in flight, so only a failure alerts.
EXPOSITION = REPO / "tests" / "fixtures" / "metrics" / "vllm-0.32.0-cpu-idle.prom"
INSTANCE = "vllm-0:8000"  # the replica's name in both clusters
MODEL = "tiny-llama"
WATCHDOG = "WatchdogVllmObs"
TIMEOUT = 60  # for any one state to be reached; the whole test takes about 35 s


def bundle_config(webhook: str) -> dict:
    return {
        "prometheus": {"multi_cluster": True, "cluster_label": "cluster", "evaluation_interval": "1s"},
        "alerts": {"target_down_for": "10s"},
        "alertmanager": {
            "group_wait": "1s",
            "warning_group_wait": "1s",
            "group_interval": "5s",
            **webhook_receivers(webhook),
        },
    }


def with_west_route(generated: Path, webhook: str, out: Path) -> Path:
    """The bundle's alertmanager.yml with a first child route sending cluster="west" elsewhere."""
    config = yaml.safe_load(generated.read_text())
    assert config["route"]["group_by"][0] == "cluster", config["route"]["group_by"]
    config["route"]["routes"].insert(0, {"receiver": "west-webhook", "matchers": ['cluster="west"']})
    config["receivers"].append(
        {"name": "west-webhook", "webhook_configs": [{"url": f"{webhook}/west", "send_resolved": True}]}
    )
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out


def until(check: Callable[[], object], what: str, timeout: float = TIMEOUT) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)


def by_cluster(prom: ReceivingPrometheus, expr: str) -> dict[str, float]:
    return {r["metric"].get("cluster", ""): float(r["value"][1]) for r in prom.query(expr)}


def test_the_fixture_serves_every_vllm_series_the_multi_cluster_rules_select(tmp_path):
    """Else a rule could stay silent in the remote-write test for want of its input."""
    bundle = generate(tmp_path / "bundle", config=bundle_config("http://127.0.0.1:1"))
    selected = set().union(*(selected_names(expr) for expr in rule_exprs(bundle).values()))
    served = {
        line.split("{", 1)[0].split(" ", 1)[0]
        for line in EXPOSITION.read_text().splitlines()
        if line and not line.startswith("#")
    }
    missing = sorted(n for n in selected if n.startswith("vllm:") and n not in served)
    assert not missing, missing


def test_two_clusters_remote_write_into_one_ruler_that_alerts_and_routes_by_cluster(tmp_path):
    page = EXPOSITION.read_text()
    with contextlib.ExitStack() as stack:
        webhook = stack.enter_context(LoopbackServer())
        bundle = generate(tmp_path / "bundle", config=bundle_config(webhook.url))
        rules = sorted((bundle / "alerts").glob("*.rules.yml"))
        am_config = with_west_route(
            bundle / "alerts" / "alertmanager.yml", webhook.url, tmp_path / "alertmanager.yml"
        )
        # The added route is the one a west alert takes, and an east one does not.
        page_labels = {"alertname": "VllmModelCapacityLow", "severity": "critical", "model_name": MODEL}
        assert routes(am_config, {**page_labels, "cluster": "west"}) == ["west-webhook"]
        east_receivers = routes(am_config, {**page_labels, "cluster": "east"})
        assert east_receivers == ["critical-webhook", "warning-webhook"]

        for name in ("am", "central", "agent-east", "agent-west"):
            (tmp_path / name).mkdir()
        am = stack.enter_context(Alertmanager(am_config, tmp_path / "am"))
        central_yml = write_yaml(
            tmp_path / "central" / "prometheus.yml", central_config(rules, f"127.0.0.1:{am.port}")
        )
        central = stack.enter_context(ReceivingPrometheus(central_yml, tmp_path / "central"))

        east_server = stack.enter_context(contextlib.ExitStack())
        east = east_server.enter_context(stand_in(lambda: page))
        west_server = stack.enter_context(contextlib.ExitStack())
        west = west_server.enter_context(stand_in(lambda: page))
        west_agent = stack.enter_context(contextlib.ExitStack())
        for cluster, target, owner in (("east", east, stack), ("west", west, west_agent)):
            config = agent_config(cluster, [target], central.write_url, instance=INSTANCE)
            path = write_yaml(tmp_path / f"agent-{cluster}" / "prometheus.yml", config)
            owner.enter_context(AgentPrometheus(path, tmp_path / f"agent-{cluster}"))

        # Both clusters arrive, each replica under the same name, kept apart by `cluster`.
        up = f'up{{job="vllm", instance="{INSTANCE}"}}'
        until(lambda: by_cluster(central, up) == {"east": 1, "west": 1}, "both clusters' scrapes")
        ready = f'job_model:vllm_replicas_ready:count{{job="vllm", model_name="{MODEL}"}}'
        until(lambda: by_cluster(central, ready) == {"east": 1, "west": 1}, "a ready replica per cluster")

        def per_replica_recorded() -> dict[str, set[str]] | None:
            """The per-replica recorded names by cluster, once both clusters have the same ones
            (the rates among them: they need two scrapes)."""
            found: dict[str, set[str]] = {}
            for r in central.query(f'{{__name__=~"job_instance_model:.+", instance="{INSTANCE}"}}'):
                found.setdefault(r["metric"].get("cluster", ""), set()).add(r["metric"]["__name__"])
            if found.keys() != {"east", "west"} or found["east"] != found["west"]:
                return None
            return found if "job_instance_model:vllm_requests_finished:rate5m" in found["east"] else None

        recorded = until(per_replica_recorded, "the per-replica recorded series of both clusters")
        assert "job_instance_model:vllm_served_model:replica" in recorded["east"]
        healthy = central.query(f'ALERTS{{alertstate="firing", alertname!="{WATCHDOG}"}}')
        assert not healthy, [a["metric"] for a in healthy]

        # East's server stops answering.
        east_server.close()

        down = f'ALERTS{{alertname="VllmTargetDown", alertstate="firing", instance="{INSTANCE}"}}'
        firing = until(lambda: central.query(down), "VllmTargetDown to fire on the central Prometheus")
        assert [a["metric"]["cluster"] for a in firing] == ["east"], firing
        capacity = f'ALERTS{{alertname="VllmModelCapacityLow", alertstate="firing", model_name="{MODEL}"}}'
        paged = until(lambda: central.query(capacity), "VllmModelCapacityLow to fire")
        assert [a["metric"]["cluster"] for a in paged] == ["east"], paged
        assert by_cluster(central, ready) == {"east": 0, "west": 1}

        def page_for_east() -> dict | None:
            for path, payload in list(webhook.posted):
                if path == "/critical" and any(
                    a["status"] == "firing"
                    and a["labels"].get("alertname") == "VllmModelCapacityLow"
                    and a["labels"].get("cluster") == "east"
                    for a in payload["alerts"]
                ):
                    return payload
            return None

        note = until(page_for_east, "east's capacity page at the critical webhook")
        assert note["groupLabels"].get("cluster") == "east", note["groupLabels"]
        (page,) = [a for a in note["alerts"] if a["labels"]["alertname"] == "VllmModelCapacityLow"]
        assert f"not ready: {INSTANCE} (down)." in page["annotations"]["description"], page

        # East's lost replica holds back its VllmTargetDown (equal: cluster, instance).
        def target_down_inhibited() -> bool:
            return any(
                a["labels"].get("alertname") == "VllmTargetDown"
                and a["labels"].get("cluster") == "east"
                and a["status"]["inhibitedBy"]
                for a in am.alerts()
            )

        until(target_down_inhibited, "Alertmanager to inhibit east's VllmTargetDown under its page")

        # Nothing about west, ever: nothing fired in the central's history but east's alerts and the
        # watchdog, and only east's notifications arrived. Pending is allowed: a slow scrape, or the
        # job-wide VllmMetricsAbsent (no cluster) before the first samples, can be pending.
        fired = f'ALERTS{{alertstate="firing", alertname!="{WATCHDOG}", cluster!="east", scope!="job"}}'
        elsewhere = central.query(f"count_over_time({fired}[10m])")
        assert not elsewhere, [a["metric"] for a in elsewhere]
        notes = [(path, payload) for path, payload in list(webhook.posted) if path != "/watchdog"]
        assert all(path != "/west" for path, _ in notes), notes
        for path, payload in notes:
            assert payload["groupLabels"].get("cluster") == "east", (path, payload["groupLabels"])
            assert {a["labels"].get("cluster") for a in payload["alerts"]} == {"east"}, (path, payload)

        # West's server stops answering too: west's page, naming its replica, takes the west route
        # only. (A west agent that stops instead sends nothing at all: its replica leaves
        # discovery as far as the center can tell, which is a ticket, docs/multi-cluster.md.)
        before = len(webhook.posted)
        west_server.close()
        west_page = 'ALERTS{alertname="VllmModelCapacityLow", alertstate="firing", cluster="west"}'
        until(lambda: central.query(west_page), "VllmModelCapacityLow for west")

        def west_notes() -> list[tuple[str, dict]]:
            return [
                (path, payload)
                for path, payload in list(webhook.posted)[before:]
                if any(a["labels"].get("cluster") == "west" for a in payload["alerts"])
            ]

        def west_page_noted() -> list[tuple[str, dict]]:
            notes = west_notes()
            paged = any(
                a["labels"]["alertname"] == "VllmModelCapacityLow" for _, p in notes for a in p["alerts"]
            )
            return notes if paged else []

        notes = until(west_page_noted, "the west page at the west receiver")
        assert {path for path, _ in notes} == {"/west"}, notes
        (payload,) = [p for _, p in notes if p["alerts"][0]["labels"]["alertname"] == "VllmModelCapacityLow"]
        assert payload["groupLabels"].get("cluster") == "west", payload["groupLabels"]
        assert "(down)" in payload["alerts"][0]["annotations"]["description"], payload
