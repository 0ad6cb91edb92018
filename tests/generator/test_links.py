"""Links in alert annotations that a pager or a chat cannot open are said at generation."""

from __future__ import annotations

import yaml
from vllm_obs.cli import main as vllm_obs


def _warnings(capsys, tmp_path, links: dict | None) -> list[str]:
    args = ["generate", "--out", str(tmp_path / "bundle")]
    if links is not None:
        config = tmp_path / "config.yml"
        config.write_text(yaml.safe_dump({"links": links}))
        args += ["--config", str(config)]
    capsys.readouterr()
    assert vllm_obs(args) == 0
    return [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("vllm-obs: warning: links.")
    ]


def test_unset_links_are_said_and_left_out_of_the_alerts(capsys, tmp_path):
    said = _warnings(capsys, tmp_path, None)
    assert len(said) == 2
    assert "links.runbook_url is unset" in said[0]
    assert "links.grafana_url is unset" in said[1]
    rules = yaml.safe_load((tmp_path / "bundle" / "alerts" / "vllm-alerts.rules.yml").read_text())
    for rule in (r for g in rules["groups"] for r in g["rules"]):
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]


def test_links_a_pager_cannot_open_are_said(capsys, tmp_path):
    local = {"runbook_url": "alerts/runbooks.md", "grafana_url": "http://localhost:3000"}
    said = _warnings(capsys, tmp_path, local)
    assert len(said) == 2
    assert "links.runbook_url is the path alerts/runbooks.md" in said[0]
    assert "links.grafana_url is http://localhost:3000" in said[1]


def test_reachable_links_are_not_warned_about(capsys, tmp_path):
    links = {
        "runbook_url": "https://git.example.com/ops/vllm-obs/blob/main/alerts/runbooks.md",
        "grafana_url": "https://grafana.example.com",
    }
    assert _warnings(capsys, tmp_path, links) == []
    rules = (tmp_path / "bundle" / "alerts" / "vllm-alerts.rules.yml").read_text()
    assert (
        "runbook_url: https://git.example.com/ops/vllm-obs/blob/main/alerts/runbooks.md#vllmtargetdown"
        in rules
    )
    assert "dashboard_url: https://grafana.example.com/d/vllm-obs-" in rules


def test_a_failed_run_prints_only_its_error(capsys, tmp_path):
    out = tmp_path / "taken"
    out.write_text("a file where the bundle should go\n")
    capsys.readouterr()
    assert vllm_obs(["generate", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vllm-obs: error: "), lines
