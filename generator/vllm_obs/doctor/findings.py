"""What the doctor reports: one finding per check, grouped by family, and the verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import BundleError

# The check families, in the order they are run and printed.
FAMILIES = {
    "targets": "Targets",
    "names": "Series the bundle reads",
    "rules": "Rules",
    "labels": "Label plumbing",
    "alerting": "Alerting path",
    "dashboards": "Dashboards",
    "lifecycle": "Lifecycle",
}

OK, INFO, SKIP, WARN, FAIL = "ok", "info", "skip", "warn", "fail"


class DoctorCannotRun(BundleError):
    """The doctor itself cannot run: unreachable Prometheus, refused credentials, bad input."""


@dataclass
class Finding:
    family: str
    status: str  # ok | info | skip | warn | fail
    subject: str  # what was checked, short: "job vllm", "vllm:kv_cache_usage_perc"
    message: str  # what is so, or what is wrong
    action: str = ""  # what to do about it (failures and warnings)
    items: list[str] = field(default_factory=list)  # the affected things, for --json

    def as_dict(self) -> dict:
        out = {"family": self.family, "status": self.status, "subject": self.subject, "message": self.message}
        if self.action:
            out["action"] = self.action
        if self.items:
            out["items"] = self.items
        return out


@dataclass
class Report:
    prometheus: str
    alertmanager: str | None
    bundle: str
    bundle_source: str
    findings: list[Finding] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per family
    requests: dict[str, int] = field(default_factory=dict)  # HTTP requests made, per service

    def add(self, finding: Finding) -> Finding:
        self.findings.append(finding)
        return finding

    def count(self, status: str) -> int:
        return sum(1 for f in self.findings if f.status == status)

    @property
    def exit_code(self) -> int:
        return 1 if self.count(FAIL) else 0

    @property
    def verdict(self) -> str:
        failures, warnings = self.count(FAIL), self.count(WARN)
        if failures:
            plural = "s" if failures != 1 else ""
            extra = f" and {warnings} warning{'s' if warnings != 1 else ''}" if warnings else ""
            return f"BROKEN: {failures} problem{plural}{extra}; fix the FAIL lines above, then run the doctor again."
        if warnings:
            return (
                f"HEALTHY with {warnings} warning{'s' if warnings != 1 else ''}: nothing is broken; "
                "the WARN lines say what stays empty or silent and why."
            )
        return "HEALTHY: every target, series, rule, label join, alert path and panel checked out."

    def as_dict(self) -> dict:
        return {
            "prometheus": self.prometheus,
            "alertmanager": self.alertmanager,
            "bundle": self.bundle,
            "bundle_source": self.bundle_source,
            "verdict": {
                "status": "broken" if self.count(FAIL) else ("warnings" if self.count(WARN) else "healthy"),
                "text": self.verdict,
                "failures": self.count(FAIL),
                "warnings": self.count(WARN),
                "exit_code": self.exit_code,
            },
            "checks": [f.as_dict() for f in self.findings],
            "timings_seconds": {k: round(v, 3) for k, v in self.timings.items()},
            "requests": self.requests,
        }
