"""Series a bundle may select beside its source's: the sidecars' and Prometheus' own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from vllm_obs.rules.areas.meta import PIPELINE_SERIES

# Series Prometheus makes, and Prometheus' and Alertmanager's own that the pipeline alerts read.
PROMETHEUS_OWN = {"up", "ALERTS", *PIPELINE_SERIES}


def exporter_series(tmp: Path) -> set[str]:
    """What the real log exporter and the real canary probe expose, read from their own output."""
    empty = tmp / "empty.log"
    empty.write_text("")
    out = subprocess.run(
        [sys.executable, "-m", "vllm_log_exporter.cli", "--once", str(empty)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # One probe of a closed port: every probe series exists from the start, whatever the outcome.
    probe = subprocess.run(
        [sys.executable, "-m", "vllm_probe", "--target", "http://127.0.0.1:9", "--model", "m", "--once"],
        capture_output=True,
        text=True,
    ).stdout
    assert "vllm_probe_success" in probe, probe
    # Families the exporter declares before it has a sample count too (the version it has
    # not read yet, the durations of a startup it has not seen complete).
    names = exposition_names(out + probe)
    # Series that only appear once their first line is seen (the stats-line gauges).
    names |= {
        "vllm_log_requests_running",
        "vllm_log_requests_waiting",
        "vllm_log_kv_cache_usage_ratio",
    }
    return names


def exposition_names(text: str) -> set[str]:
    """Sample names on the page, plus families declared there that have no sample yet."""
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {s.name for s in family.samples}
        if not family.samples:
            names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names
