"""The config file: every knob documented with its default, unknown keys refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from vllm_obs.config import BundleConfig, build, default_config_text, load_config
from vllm_obs.errors import BundleError

REPO = Path(__file__).parent.parent.parent


def test_the_committed_defaults_file_is_current():
    assert (REPO / "vllm-obs.yml").read_text() == default_config_text()


def test_the_defaults_file_loads_to_the_defaults():
    assert load_config(REPO / "vllm-obs.yml") == load_config(None)


def test_every_knob_is_documented():
    text = default_config_text()
    data = yaml.safe_load(text)

    def walk(node, prefix=""):
        for key, value in node.items():
            yield f"{prefix}{key}"
            if isinstance(value, dict) and key not in ("external_labels",):
                yield from walk(value, f"{prefix}{key}.")

    lines = text.splitlines()
    for dotted in walk(data):
        key = dotted.split(".")[-1]
        index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
        assert lines[index - 1].strip().startswith("#"), f"{dotted} has no comment above it"


def test_partial_config_keeps_other_defaults(tmp_path):
    path = tmp_path / "c.yml"
    path.write_text("alerts:\n  kv_usage_threshold: 0.8\nprometheus:\n  vllm_targets: [a:1, b:2]\n")
    cfg = load_config(path)
    assert cfg.alerts.kv_usage_threshold == 0.8
    assert cfg.prometheus.vllm_targets == ["a:1", "b:2"]
    assert cfg.alerts.ttft_for == load_config(None).alerts.ttft_for


@pytest.mark.parametrize(
    "data, phrase",
    [
        ({"alert": {}}, "unknown config key 'alert'"),
        (
            {"prometheus": {"log_exporters": [{"target": "x:1", "vllm_host": "y"}]}},
            "'prometheus.log_exporters[0].vllm_host'",
        ),
        ({"alerts": {"ttft_for": "3 minutes"}}, "Prometheus duration"),
        ({"alerts": {"kv_usage_threshold": 1.5}}, "fraction between 0 and 1"),
        ({"slo": {"ttft_objective": 1}}, "fraction between 0 and 1"),
        ({"alertmanager": {"critical": {"type": "pager"}}}, "must be one of"),
        ({"alertmanager": {"critical": {"type": "pagerduty"}}}, "secret_file' in the config is required"),
        ({"alertmanager": {"watchdog": {"type": "webhook", "url": ""}}}, "must be the webhook's http(s) URL"),
        ({"prometheus": {"vllm_targets": "vllm:8000"}}, "must be a list"),
        ({"prometheus": {"tls_insecure_skip_verify": "yes"}}, "true or false"),
        ({"paging": {"recovery_for": "0s"}}, "'paging.recovery_for' in the config must be longer than 0s"),
        ({"paging": {"recovery_for": "soon"}}, "Prometheus duration"),
    ],
)
def test_bad_values_are_named(data, phrase):
    with pytest.raises(BundleError) as err:
        build(BundleConfig, data, "")
    assert phrase in err.value.message


def test_not_yaml_is_reported_with_its_line(tmp_path):
    path = tmp_path / "c.yml"
    path.write_text("alerts:\n  ttft_for: [3m\n")
    with pytest.raises(BundleError, match="not valid YAML at line"):
        load_config(path)
