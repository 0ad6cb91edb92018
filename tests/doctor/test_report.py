"""The report: exit code and verdict from the findings, the text and JSON renderings, and
that every warning or failure the code can emit says what to do."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from vllm_obs.doctor import output
from vllm_obs.doctor.findings import FAIL, INFO, OK, SKIP, WARN, Finding, Report

DOCTOR = Path(__file__).parent.parent.parent / "generator" / "vllm_obs" / "doctor"


def report(*statuses: str) -> Report:
    out = Report("http://prom:9090", None, "bundle", "vLLM 0.32.0 (v1 engine)")
    for i, status in enumerate(statuses):
        out.add(
            Finding(
                "names",
                status,
                f"series {i}",
                f"message {i}",
                f"action {i}" if status in (WARN, FAIL) else "",
            )
        )
    return out


def test_exit_code_and_verdict():
    assert report(OK, INFO, SKIP).exit_code == 0
    assert report(OK).verdict.startswith("HEALTHY:")
    assert report(OK, WARN, WARN).exit_code == 0
    assert report(OK, WARN, WARN).verdict.startswith("HEALTHY with 2 warnings")
    assert report(OK, WARN, FAIL).exit_code == 1
    assert report(OK, WARN, FAIL).verdict.startswith("BROKEN: 1 problem and 1 warning;")


def test_text_has_one_line_per_finding_grouped_and_a_verdict():
    rep = report(OK, WARN, FAIL)
    rep.add(Finding("targets", OK, "job vllm", "1 target, all up"))
    lines = output.text(rep).splitlines()
    assert lines[0].startswith("vllm-obs doctor: Prometheus http://prom:9090, bundle bundle")
    # Families in their fixed order, whatever order the findings came in.
    assert lines.index("Targets") < lines.index("Series the bundle reads")
    assert "  WARN  series 1: message 1; action 1." in lines
    assert "  FAIL  series 2: message 2; action 2." in lines
    assert "  ok    series 0: message 0." in lines
    assert lines[-1] == f"Verdict: {rep.verdict}"


def test_json_is_the_same_report_as_data():
    rep = report(OK, WARN, FAIL)
    data = json.loads(output.as_json(rep))
    assert data["verdict"] == {
        "status": "broken",
        "text": rep.verdict,
        "failures": 1,
        "warnings": 1,
        "exit_code": 1,
    }
    assert [c["status"] for c in data["checks"]] == [OK, WARN, FAIL]
    assert data["checks"][2]["action"] == "action 2" and "action" not in data["checks"][0]


def test_every_warning_and_failure_in_the_code_says_what_to_do():
    """A static check of the doctor's source: each ctx.add(..., WARN|FAIL, ...) passes an action."""
    missing = []
    for path in sorted(DOCTOR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add"
            ):
                continue
            if (
                len(node.args) >= 2
                and isinstance(node.args[1], ast.Name)
                and node.args[1].id in ("WARN", "FAIL")
            ):
                if len(node.args) < 5 and not any(k.arg == "action" for k in node.keywords):
                    missing.append(f"{path.name}:{node.lineno}")
    assert not missing, missing
