"""Every alert has a runbook section, and its runbook_url lands on it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.support.bundles import LINKS, generate

REPO = Path(__file__).parent.parent.parent


def headings(markdown: str) -> set[str]:
    return {m.group(1).lower() for m in re.finditer(r"^## (\S+)$", markdown, re.M)}


@pytest.mark.parametrize(
    "args", [(), ("--vllm-version", "0.9.0", "--engine", "v0"), ("--vllm-version", "0.7.1", "--engine", "v1")]
)
def test_every_alert_links_to_its_own_runbook_section(args, tmp_path):
    bundle = generate(tmp_path / "bundle", *args, config={"links": LINKS})
    anchors = headings((bundle / "alerts" / "runbooks.md").read_text())
    rules = yaml.safe_load((bundle / "alerts" / "vllm-alerts.rules.yml").read_text())
    names = set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            assert url.startswith(LINKS["runbook_url"] + "#")
            anchor = url.split("#", 1)[1]
            assert anchor == rule["alert"].lower() and anchor in anchors, rule["alert"]
            names.add(rule["alert"].lower())
    assert anchors == names  # no section for an alert the bundle does not have


def test_a_section_shows_the_release_s_own_series():
    text = (REPO / "alerts" / "runbooks.md").read_text()
    assert "vllm:kv_cache_usage_perc" in text
    v0 = generate(Path(__import__("tempfile").mkdtemp()) / "b", "--vllm-version", "0.9.0", "--engine", "v0")
    assert "vllm:gpu_cache_usage_perc" in (v0 / "alerts" / "runbooks.md").read_text()


def test_runbooks_say_where_the_cause_is_and_what_to_change():
    text = (REPO / "alerts" / "runbooks.md").read_text()
    assert "the first error above the first `EngineDeadError` is the cause" in text
    for flag in ("--max-num-seqs", "--max-model-len", "--gpu-memory-utilization", "--max-num-batched-tokens"):
        assert flag in text
