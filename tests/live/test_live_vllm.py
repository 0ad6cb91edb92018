"""End to end against a real vLLM CPU server, log exporter and Prometheus: `generate --metrics-url`
gives a bundle naming only served series that promtool passes, and every panel query returns data
after a little traffic. The failure modes are the drills' (tests/drills)."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.generator.test_bundle_queries import unexposed
from tests.generator.test_rules import check_and_test
from tests.probe.helpers import running_probe
from tests.support.bundles import ANOTHER_RELEASE, dashboard_panels, dashboards, expand, generate, substitute
from tests.support.exposed import exporter_series, exposition_names
from tests.support.monitoring import Alertmanager, Prometheus
from tests.support.vllm_server import MODEL_NAME, VllmServer, free_port, http_get, send_traffic

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]

# Panel queries ("panel" or "panel / refId") allowed to come back empty on a healthy CPU
# server, and why. The test fails if any other query is empty, or if fewer than 90% return data.
MAY_BE_EMPTY: dict[str, str] = {
    "Cache hit rates / B": "no KV connector: nothing is looked up in an external prefix cache, so no hit rate",
    "Cache hit rates / C": "a text-only model: nothing is looked up in the multimodal cache, so no hit rate",
}
# n-gram speculative decoding, as the real capture runs it; repetitive prompts give it drafts.
SPEC_DECODE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
REPETITIVE = "one two three one two three one {i}"


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


def stack_config(
    vllm: VllmServer, exporter: str, probe: str | None = None, prometheus: str = "", alertmanager: str = ""
) -> dict:
    """The bundle config of a local stack: fast scrapes so a test sees rates quickly; Prometheus
    and Alertmanager (host:port) scrape themselves where given."""
    target = f"127.0.0.1:{vllm.port}"
    return {
        "prometheus": {
            "vllm_targets": [target],
            "log_exporters": [{"target": exporter, "vllm_instance": target}],
            "alertmanagers": [alertmanager] if alertmanager else [],
            "prometheus_targets": [prometheus] if prometheus else [],
            "probes": [probe] if probe else [],
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
    assert "engine v1, looks like vLLM 0.32.0 to 0.34.0" in manifest
    check_and_test(bundle, **ANOTHER_RELEASE)


@pytest.fixture(scope="module")
def spec_decode_server(tmp_path_factory) -> Iterator[VllmServer]:
    """A real vLLM with n-gram speculative decoding on, for the dashboards' live proof."""
    server = VllmServer(
        tmp_path_factory.mktemp("spec") / "vllm.log",
        extra_args=["--speculative-config", json.dumps(SPEC_DECODE)],
    )
    with server:
        counts = send_traffic(server, requests=6, prompt=REPETITIVE)
        assert counts.get("200", 0) >= 6, counts
        yield server


@contextlib.contextmanager
def steady_traffic(server: VllmServer) -> Iterator[None]:
    """Requests in the background, so every rate window of the queries holds some."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            send_traffic(server, requests=2, prompt=REPETITIVE)
            stop.wait(1.0)

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join(timeout=120)


def test_every_dashboard_panel_returns_data_from_a_live_stack(spec_decode_server, tmp_path):
    results, empty = _panel_results(spec_decode_server, tmp_path, pod_labels=False)
    titles = {panel for _, panel, _ in results}
    assert {"Draft acceptance rate", "Acceptance by draft position", "Canary probe latency"} <= titles
    assert {"Time to first token distribution", "Replicas", "API server file descriptors"} <= titles
    assert len(results) >= 150
    assert (len(results) - len(empty)) / len(results) >= 0.9
    # Recorded for the issue notes: how many queries returned data.
    print(f"\n{len(results) - len(empty)}/{len(results)} panel queries returned data; empty: {sorted(empty)}")


def test_the_kubernetes_dashboards_return_data_when_series_carry_namespace_and_pod(
    spec_decode_server, tmp_path
):
    """The ConfigMap's dashboards (pod labels on: a Namespace variable, rules by namespace and
    pod) on series labelled as a PodMonitor labels them: the same panels answer."""
    results, empty = _panel_results(spec_decode_server, tmp_path, pod_labels=True)
    assert len(results) >= 150
    assert (len(results) - len(empty)) / len(results) >= 0.9
    print(f"\n{len(results) - len(empty)}/{len(results)} panel queries returned data; empty: {sorted(empty)}")


# What a PodMonitor adds to every series of the pod (vLLM and its two sidecars), and to
# Prometheus' and Alertmanager's own, which run in their own namespace.
POD = {"namespace": "llm", "pod": "vllm-0-7d9f8c6b5-abcde"}
MONITORING = {"namespace": "monitoring", "pod": "prometheus-k8s-0"}


def _with_pod_labels(prometheus_yml: Path) -> None:
    """Every static target of the bundle's scrape config labelled as the operator labels it."""
    own = {"prometheus", "alertmanager"}
    config = yaml.safe_load(prometheus_yml.read_text())
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            static["labels"] = {**static.get("labels", {}), **(MONITORING if job["job_name"] in own else POD)}
    assert {j["job_name"] for j in config["scrape_configs"]} >= {"vllm", "vllm-log-exporter", "vllm-probe"}
    prometheus_yml.write_text(yaml.safe_dump(config, sort_keys=False))


def _panel_results(server: VllmServer, tmp_path: Path, pod_labels: bool) -> tuple[dict, set]:
    """Every panel query of a bundle generated for this stack, asked of a Prometheus that
    scraped it; fails on an empty query MAY_BE_EMPTY does not explain."""
    target = f"127.0.0.1:{server.port}"
    with (
        log_exporter(server.log_path, tmp_path) as exporter,
        running_probe("--target", server.url, "--interval", "4", "--timeout", "3.5") as probe,
    ):
        probe.text()  # serving, or its exit status and stderr
        probe_address = f"127.0.0.1:{probe.port}"
        prom_port, am_port = free_port(), free_port()
        config = stack_config(
            server,
            exporter,
            probe_address,
            prometheus=f"127.0.0.1:{prom_port}",
            alertmanager=f"127.0.0.1:{am_port}",
        )
        config["prometheus"]["pod_labels"] = pod_labels
        bundle = generate(tmp_path / "bundle", "--metrics-url", server.metrics_url, config=config)
        if pod_labels:
            _with_pod_labels(bundle / "prometheus" / "prometheus.yml")
        with (
            Alertmanager(bundle / "alerts" / "alertmanager.yml", tmp_path, port=am_port),
            Prometheus(bundle / "prometheus" / "prometheus.yml", tmp_path, port=prom_port) as prom,
            steady_traffic(server),
        ):
            for job in ("vllm", "vllm-log-exporter", "vllm-probe", "prometheus", "alertmanager"):
                prom.wait_for(f'up{{job="{job}"}} == 1', timeout=60)
            prom.wait_for("job_instance_model:vllm_time_to_first_token_seconds:p95_5m", timeout=60)
            prom.wait_for(f'vllm_probe_success{{instance="{target}"}} == 1', timeout=60)
            prom.wait_for('ALERTS{alertname="WatchdogVllmObs"}', timeout=60)
            time.sleep(6)  # a few more scrapes of the probe and the traffic inside the rate windows
            # The template variables resolve to this server, then every query is asked.
            variables = {"$job": "vllm", "$instance": target, "$model_name": MODEL_NAME, "$engine": "0"}
            if pod_labels:
                variables["$namespace"] = POD["namespace"]
            for name, expected in variables.items():
                values = prom.query(f'count by ({name[1:]}) (vllm:num_requests_running{{job="vllm"}})')
                assert [v["metric"][name[1:]] for v in values] == [expected]
            if pod_labels:  # the recorded series keep the pod the sidecars' series are joined on
                assert prom.query(f'job_instance_model:vllm_requests_running:sum{{pod="{POD["pod"]}"}}')
                assert prom.query(f'vllm_probe_success{{pod="{POD["pod"]}", instance="{target}"}}')
            results = {where: prom.query(expr) for where, expr in panel_queries(bundle, variables).items()}
            # The firing-alert annotation of every dashboard is a valid query (nothing fires here).
            for dash in dashboards(bundle):
                for annotation in dash["annotations"]["list"]:
                    prom.query(expand(annotation["expr"], variables))
    empty = {where for where, result in results.items() if not has_data(result)}
    unexplained = {w for w in empty if w[1] not in MAY_BE_EMPTY and f"{w[1]} / {w[2]}" not in MAY_BE_EMPTY}
    assert not unexplained, f"panel queries without data: {sorted(unexplained)}"
    return results, empty


def panel_queries(bundle: Path, variables: dict[str, str]) -> dict[tuple[str, str, str], str]:
    """(dashboard, panel, refId) -> the query as Grafana sends it for these variable values."""
    return {
        (dash, panel["title"], target["refId"]): substitute(target["expr"], variables)
        for dash, panel in dashboard_panels(bundle)
        for target in panel["targets"]
    }
