"""A vLLM whose engine dies exits 0 (vLLM issue #48966), so a restart-on-failure supervisor leaves
it down; the bundle pages the death anyway. A real vLLM CPU server, log exporter, probe, Prometheus
and Alertmanager on the drill clock, and `kill -9` of its EngineCore."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from tests.support.drill_stack import PAGER, DrillStack, wait_until
from tests.support.vllm_server import http_get

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]

CONFIG = yaml.safe_load((Path(__file__).parent.parent / "drills" / "drill-config.yml").read_text())


def test_an_engine_death_that_exits_0_is_dead_in_the_log_failing_the_canary_and_paged(tmp_path):
    with DrillStack(tmp_path, CONFIG) as stack:
        slot = stack.new_slot("Z")
        slot.server.start()
        stack.start([slot], slot.server.metrics_url)
        i = slot.instance
        wait_until(
            lambda: stack.value(f'vllm_probe_success{{instance="{i}"}}') == 1, "a first good canary", 90
        )
        wait_until(
            lambda: stack.value(f'vllm_log_server_state{{instance="{i}", state="ready"}}') == 1,
            "the log exporter's ready state in Prometheus",
            60,
        )
        # The page counts ready replicas of a model Prometheus has seen served: wait for its scrape.
        wait_until(
            lambda: stack.value("sum(job_model:vllm_replicas_ready:count)") == 1,
            "the replica counted ready in Prometheus",
            60,
        )
        killed = time.time()
        slot.server.kill_engine_core()

        assert slot.server.wait_exit(timeout=120) == 0  # the death exits "successfully"
        page = wait_until(
            lambda: stack.recorder.first_firing("VllmModelCapacityLow", PAGER, killed, naming=f"{i} (dead)"),
            "the capacity page naming the dead replica",
            120,
        )
        assert page.receiver == PAGER
        # The log says dead, not a planned stop, whatever the exit status.
        assert stack.value(f'vllm_log_server_state{{instance="{i}", state="dead"}}') == 1
        assert stack.value(f'vllm_log_events_total{{instance="{i}", event="engine_dead"}}') == 1
        # The canary's requests fail: nothing listens any more.
        wait_until(lambda: stack.value(f'vllm_probe_success{{instance="{i}"}}') == 0, "a failed canary", 60)
        with pytest.raises(OSError):
            http_get(slot.server.url + "/health", timeout=2)
