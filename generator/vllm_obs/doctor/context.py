"""What one doctor run knows: the bundle, the clients, and the facts earlier checks found. Checks run
in order and leave facts behind, so a later one (the dashboards check above all) can say *why* a
panel is empty, not only that it is.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ..catalog import Catalog
from ..config import BundleConfig
from .bundle_view import PIPELINE_ROLES, BundleView
from .clients import AlertmanagerClient, ApiError, PrometheusClient
from .findings import FAIL, WARN, Finding, Report


@dataclass(frozen=True)
class Target:
    job: str
    instance: str
    health: str  # up | down | unknown
    error: str
    scrape_url: str
    interval_s: float | None


@dataclass(frozen=True)
class Cause:
    """Why a series or a recording rule has no samples; status is warn or fail."""

    status: str
    text: str
    action: str = ""  # what to do, when no earlier line of the report says it


@dataclass(frozen=True)
class Presence:
    instances: int  # targets of the job that have the series
    engine_label: bool  # some of its series carry an engine label


@dataclass
class Context:
    view: BundleView
    catalog: Catalog
    prom: PrometheusClient
    report: Report
    am: AlertmanagerClient | None = None
    config: BundleConfig | None = None
    kubernetes_manifest: str | None = None
    alertmanager_secrets: str | None = None  # the folder Alertmanager's secret files come from
    # Facts found along the way.
    targets: dict[str, list[Target]] | None = None  # job -> targets; None: not known
    presence: dict[tuple[str, str], Presence] = field(default_factory=dict)  # (job, name) -> presence
    causes: dict[str, Cause] = field(default_factory=dict)  # series or recorded name -> why it is empty
    loaded_groups: dict[str, list[dict]] | None = None  # rule group name -> groups loaded under it
    scrape_intervals: dict[str, float] = field(default_factory=dict)  # job -> seconds
    started: float = field(default_factory=time.monotonic)
    _failed_scrapes: set[str] = field(default_factory=set)  # jobs seen failing a scrape in this run

    def add(
        self, family: str, status: str, subject: str, message: str, action: str = "", items=()
    ) -> Finding:
        return self.report.add(Finding(family, status, subject, message, action, list(items)))

    def unchecked(self, family: str, subject: str, what: str, exc: ApiError) -> Finding:
        """A check this Prometheus (or Alertmanager) could not answer: a warning, not a verdict."""
        return self.add(
            family,
            WARN,
            subject,
            f"not checked: could not {what} ({exc.describe})",
            "raise --timeout if it timed out; a Prometheus-compatible service that lacks this API "
            "(Thanos Query, Mimir) cannot answer it, Prometheus itself can",
        )

    def up_targets(self, job: str) -> list[Target]:
        return [t for t in (self.targets or {}).get(job, []) if t.health == "up"]

    def job_is_down(self, job: str) -> bool:
        """True when the job is known to have no target up (unknown target state: False)."""
        return self.targets is not None and job in self.targets and not self.up_targets(job)

    def example_metrics_url(self) -> str:
        """A vLLM target's scrape URL, for the `vllm-obs generate --metrics-url` advice."""
        scope = self.view.reads_of_role("vLLM")
        if scope:
            for target in self.up_targets(scope.job) or (self.targets or {}).get(scope.job, []):
                if target.scrape_url:
                    return target.scrape_url
        return "http://VLLM-HOST:8000/metrics"

    def regenerate_advice(self) -> str:
        return (
            f"regenerate the bundle against the running server: vllm-obs generate --metrics-url "
            f"{self.example_metrics_url()} --out {self.view.root} (with your --config)"
        )

    def fail_cause(self, name: str, text: str) -> None:
        self.causes.setdefault(name, Cause(FAIL, text))

    def is_pipeline(self, job: str) -> bool:
        """Whether only the monitoring pipeline's own alerts read this job (Prometheus', Alertmanager's)."""
        reads = self.view.job_reads.get(job)
        return bool(reads and reads.role in PIPELINE_ROLES)

    def scrape_failed_lately(self, job: str) -> Cause | None:
        """A scrape of the job that failed during this run (one interval back too): its series were
        stale for an interval, so an empty query then says nothing about the bundle."""
        if job not in self._failed_scrapes:
            seconds = math.ceil(time.monotonic() - self.started + self.scrape_intervals.get(job, 60))
            try:
                if not self.prom.query(f'min_over_time(up{{job="{job}"}}[{seconds}s]) == 0'):
                    return None
            except ApiError:
                return None
            self._failed_scrapes.add(job)
        return Cause(
            WARN,
            f"a scrape of job {job} failed while the doctor looked, which leaves its series missing until "
            "the next scrape",
            "run the doctor again; if this comes back, see the Targets line for the job",
        )

    def job_down(self, job: str) -> Cause:
        """Why what a job's series feed is empty when none of its targets is up: a failure, but
        a warning for the pipeline's own jobs, as the Targets check says (serving is unaffected)."""
        return Cause(WARN if self.is_pipeline(job) else FAIL, f"no target of job {job} is up (see Targets)")
