"""Render a report: one line per check, grouped by family, then the verdict; or JSON for CI."""

from __future__ import annotations

import json

from .findings import FAIL, FAMILIES, WARN, Report

TAGS = {"ok": "ok  ", "info": "info", "skip": "skip", "warn": "WARN", "fail": "FAIL"}


def text(report: Report) -> str:
    lines = [
        f"vllm-obs doctor: Prometheus {report.prometheus}"
        + (f", Alertmanager {report.alertmanager}" if report.alertmanager else "")
        + f", bundle {report.bundle} ({report.bundle_source})",
        "Lines marked WARN are warnings (they do not fail the run); lines marked FAIL are problems.",
    ]
    for family, title in FAMILIES.items():
        findings = [f for f in report.findings if f.family == family]
        if not findings:
            continue
        lines += ["", title]
        for f in findings:
            line = f"  {TAGS.get(f.status, f.status)}  {f.subject}: {f.message}"
            if f.action and f.status in (FAIL, WARN):
                line += f"; {f.action}"
            lines.append(line.rstrip() + ("" if line.rstrip().endswith(".") else "."))
    lines += ["", f"Verdict: {report.verdict}"]
    return "\n".join(lines) + "\n"


def as_json(report: Report) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"
