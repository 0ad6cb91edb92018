"""The feature and GPU panels no server here can feed, proven on a real Prometheus: stand-ins serve
a catalog-built vLLM 0.33 exposition with those features (tests/support/expositions.py) and the
constructed dcgm-exporter page; the bundle, scrapes, recording rules and every query are real."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from tests.support.bundles import generate, panels_by_row, substitute
from tests.support.expositions import MODEL, catalog_exposition
from tests.support.monitoring import Prometheus
from tests.support.stand_in import stand_in

pytestmark = pytest.mark.prometheus

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"
FEATURES = ("lora", "nixl", "kv_offload", "kv_transfer_consumer", "kv_cache_metrics", "nan_check")
# Rows whose panels only these stand-ins can feed here.
ROWS = {
    "LoRA adapters",
    "GPUs",
    "KV connectors (transfer and offloading)",
    "KV-block residency (--kv-cache-metrics)",
    "Engines (data parallel)",
    "Admission control",
    "Prompt sources and caches",
    "Model FLOPs and memory traffic (--enable-mfu-metrics)",
}
EXTRA_PANELS = {"Requests with NaN logits", "KV-cache configuration"}


def test_feature_and_gpu_panels_return_data_from_stand_ins(tmp_path):
    started = time.monotonic()

    def vllm_page() -> str:
        return catalog_exposition(
            "0.33.0", features=FEATURES, t=time.monotonic() - started, engines=("0", "1")
        )

    dcgm = (FIXTURES / "dcgm-exporter-4.8.3-host.prom").read_text()
    source = tmp_path / "features.prom"
    source.write_text(vllm_page())
    with stand_in(vllm_page) as vllm, stand_in(lambda: dcgm) as gpu_exporter:
        config = {
            "prometheus": {
                "vllm_targets": [vllm],
                "log_exporters": [],
                "probes": [],
                "alertmanagers": [],
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "gpu": {"enabled": True, "exporters": [{"target": gpu_exporter, "vllm_instance": vllm}]},
        }
        bundle = generate(tmp_path / "bundle", "--metrics-file", str(source), config=config)
        panels = [
            (dash, row, panel)
            for dash, row, panel in panels_by_row(bundle)
            if row in ROWS or panel["title"] in EXTRA_PANELS
        ]
        assert ROWS <= {row for _, row, _ in panels}
        variables = {"$job": "vllm", "$instance": vllm, "$model_name": MODEL, "$engine": "0|1"}
        with Prometheus(bundle / "prometheus" / "prometheus.yml", tmp_path) as prom:
            prom.wait_for('up{job="vllm"} == 1', timeout=60)
            prom.wait_for('up{job="dcgm-exporter"} == 1', timeout=60)
            prom.wait_for("job_instance:vllm_lora_adapters_running:count", timeout=60)
            prom.wait_for(f'instance_gpu:vllm_gpu_utilization:ratio{{instance="{vllm}"}}', timeout=60)
            time.sleep(5)  # several scrapes inside every rate window
            results = {
                (dash, panel["title"], target["refId"]): prom.query(substitute(target["expr"], variables))
                for dash, _, panel in panels
                for target in panel["targets"]
            }
            lora = prom.query("job_instance:vllm_lora_adapters_running:count")
    empty = sorted(where for where, result in results.items() if not _has_data(result))
    assert not empty, f"feature or GPU panel queries without data: {empty}"
    assert len(results) >= 60
    # The stand-in runs two adapters out of max_lora 4: the count and the label come through.
    assert [(s["metric"]["max_lora"], s["value"][1]) for s in lora] == [("4", "2")]
    print(f"\n{len(results)} feature and GPU panel queries returned data")


def _has_data(result: list[dict]) -> bool:
    return any(math.isfinite(float(sample["value"][1])) for sample in result)
