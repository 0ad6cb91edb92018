"""The bundle on disk as the doctor sees it: jobs, rule groups, panels, receivers, release.
Nothing here knows a metric name: each job's series come from the rule and panel expressions,
and their job from the rules' own `job="..."` matchers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..catalog import Catalog
from ..exporter_series import LOG, PROBE
from ..layout import DASHBOARDS_DIR, MANIFEST
from ..releases import parse_release, release_text
from .findings import DoctorCannotRun
from .grafana_vars import builtins, expand
from .selectors import PromQLSyntaxError, Selector, selectors

# Series Prometheus makes itself; the target and alerting checks look at them.
SYNTHETIC = frozenset(
    {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_samples_scraped", "scrape_duration_seconds"}
)
# The kind of target a series comes from, by the prefix its exporter gives every series.
ROLE_PREFIXES = (
    ("vllm:", "vLLM"),
    ("vllm_log_", "log exporter"),
    ("vllm_probe_", "canary probe"),
    ("DCGM_", "GPU exporter"),
    ("prometheus_", "Prometheus itself"),
    ("alertmanager_", "Alertmanager itself"),
)
# Roles whose series only the monitoring pipeline's own alerts read: missing, those alerts
# cannot fire, but every vLLM alert still can.
PIPELINE_ROLES = frozenset({"Prometheus itself", "Alertmanager itself"})
# The series each of our own exporters reports its version in.
BUILD_INFO = {
    "log exporter": LOG["vllm_log_exporter_build_info"].series,
    "canary probe": PROBE["vllm_probe_build_info"].series,
}
# Labels whose matchers pick values inside a job rather than the job's own series.
_VALUE_LABELS = frozenset({"le", "quantile"})


@dataclass(frozen=True)
class Rule:
    group: str
    file: str
    kind: str  # record | alert
    name: str
    expr: str
    for_: str
    labels: dict[str, str]
    keep_firing_for: str = ""


@dataclass(frozen=True)
class RuleGroup:
    name: str
    file: str
    interval: str | None
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class ScrapeJob:
    name: str
    interval: str | None  # the job's own scrape_interval, None: the global one
    targets: tuple[str, ...]


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str  # query | custom | interval | datasource | ...
    query: str  # label_values(EXPR, LABEL) for query variables
    all_value: str | None
    include_all: bool
    current: str | None


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref_id: str
    expr: str

    @property
    def where(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref_id}"


@dataclass(frozen=True)
class Dashboard:
    title: str
    file: str
    time_from: str
    variables: tuple[Variable, ...]
    queries: tuple[PanelQuery, ...]


@dataclass(frozen=True)
class BundleRelease:
    engine: str
    versions: tuple[str, ...]  # catalog releases ("0.32.0") the bundle was generated for

    @property
    def minors(self) -> frozenset[str]:
        return frozenset(".".join(v.split(".")[:2]) for v in self.versions)

    def describe(self) -> str:
        span = self.versions[0] if len(self.versions) == 1 else f"{self.versions[0]} to {self.versions[-1]}"
        return f"vLLM {span} ({self.engine} engine)"


@dataclass(frozen=True)
class JobReads:
    """One scrape job the bundle reads, the matchers every read of it carries, and what it reads."""

    job: str
    role: str
    matchers: tuple[tuple[str, str], ...]  # equality matchers common to the rules' selectors of the job
    names: frozenset[str]

    @property
    def selector(self) -> str:
        return ", ".join(f'{label}="{_escape(value)}"' for label, value in self.matchers)

    @property
    def title(self) -> str:
        return f"{self.role} (job {self.job})" if self.role != f"job {self.job}" else self.role


@dataclass
class BundleView:
    root: Path
    source: str
    release: BundleRelease | None
    scrape_interval: str
    evaluation_interval: str
    jobs: tuple[ScrapeJob, ...]
    alertmanager_targets: tuple[str, ...]
    groups: tuple[RuleGroup, ...]
    receivers: tuple[str, ...]
    inhibit_rules: tuple[dict[str, Any], ...]
    dashboards: tuple[Dashboard, ...]
    grafana_scrape_interval: str | None
    job_reads: dict[str, JobReads]  # job -> scope

    @property
    def rules(self) -> list[Rule]:
        return [rule for group in self.groups for rule in group.rules]

    @property
    def recorded(self) -> frozenset[str]:
        return frozenset(r.name for r in self.rules if r.kind == "record")

    def reads_of_role(self, role: str) -> JobReads | None:
        return next((s for s in self.job_reads.values() if s.role == role), None)

    def job(self, name: str) -> ScrapeJob | None:
        return next((j for j in self.jobs if j.name == name), None)

    def panel_queries(self) -> list[PanelQuery]:
        return [q for d in self.dashboards for q in d.queries]


def load(root: str | Path, catalog: Catalog) -> BundleView:
    root = Path(root)
    if not root.is_dir():
        raise DoctorCannotRun(
            f"--bundle {root} is not a directory; pass the folder `vllm-obs generate --out` wrote."
        )
    manifest = _read_json(root / MANIFEST, root)
    if not isinstance(manifest, dict) or manifest.get("generated_by") != "vllm-obs":
        raise DoctorCannotRun(f"{root / MANIFEST} is not a vllm-obs manifest; regenerate the bundle.")
    files = [str(f) for f in manifest.get("files", [])]
    prometheus = _read_yaml(root / "prometheus" / "prometheus.yml", root)
    alertmanager = _read_yaml(root / "alerts" / "alertmanager.yml", root)
    groups = tuple(g for f in files if f.endswith(".rules.yml") for g in _rule_groups(root, f))
    if not groups:
        raise DoctorCannotRun(
            f"the bundle in {root} has no rule files; regenerate it with `vllm-obs generate`."
        )
    dashboards = tuple(
        _dashboard(root, f) for f in files if f.startswith(DASHBOARDS_DIR) and f.endswith(".json")
    )
    global_ = prometheus.get("global") or {}
    datasource = _read_yaml(
        root / "grafana" / "provisioning" / "datasources" / "vllm-obs.yml", root, optional=True
    )
    view = BundleView(
        root=root,
        source=str(manifest.get("source", "")),
        release=parse_source(str(manifest.get("source", "")), catalog),
        scrape_interval=str(global_.get("scrape_interval", "1m")),
        evaluation_interval=str(global_.get("evaluation_interval", "1m")),
        jobs=tuple(_scrape_job(j) for j in prometheus.get("scrape_configs") or []),
        alertmanager_targets=tuple(
            t
            for am in (prometheus.get("alerting") or {}).get("alertmanagers") or []
            for sc in am.get("static_configs") or []
            for t in sc.get("targets") or []
        ),
        groups=groups,
        receivers=tuple(r["name"] for r in alertmanager.get("receivers") or []),
        inhibit_rules=tuple(alertmanager.get("inhibit_rules") or []),
        dashboards=dashboards,
        grafana_scrape_interval=_time_interval(datasource),
        job_reads={},
    )
    view.job_reads = _job_reads(view, catalog)
    return view


def parse_source(source: str, catalog: Catalog) -> BundleRelease | None:
    """The release(s) a manifest's source line names; None when newer than the catalog."""
    match = re.search(r"vLLM (\d[\d.]*) \((v[01]) engine(?:, with [^)]*)?\)$", source)
    if match:
        return BundleRelease(match.group(2), (match.group(1),))
    match = re.search(r"\(engine (v[01]), looks like vLLM (\d[\d.]*)(?: to (\d[\d.]*))?\)$", source)
    if not match:
        return None
    engine, first, last = (
        match.group(1),
        parse_release(match.group(2)),
        parse_release(match.group(3) or match.group(2)),
    )
    versions = tuple(r.text for r in catalog.releases if first <= r.version <= last and engine in r.engines)
    return BundleRelease(engine, versions or (release_text(first),))


def all_selectors(view: BundleView) -> list[tuple[str, Selector]]:
    """(where, selector) for every selector of every rule, panel and variable query."""
    out = []
    for rule in view.rules:
        out += [(f"rule {rule.name}", s) for s in _parse(rule.expr, f"rule {rule.name} in {rule.file}")]
    placeholders = builtins("now-1h", "15s")  # any durations do: only the selectors matter here
    for dash in view.dashboards:
        for query in dash.queries:
            expr = expand(query.expr, placeholders)
            out += [(f"panel {query.where}", s) for s in _parse(expr, f"panel {query.where}")]
        for var in dash.variables:
            expr = label_values_expr(var.query)
            if expr:
                out += [
                    (f"variable {var.name}", s) for s in _parse(expr, f"variable {var.name} of {dash.title}")
                ]
    return out


def label_values_expr(query: str) -> str | None:
    """EXPR of a Grafana `label_values(EXPR, LABEL)` variable query (None for other forms)."""
    match = re.match(r"^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", query, re.S)
    return match.group(1) if match else None


def label_values_label(query: str) -> str | None:
    match = re.match(r"^\s*label_values\((?:.*,)?\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", query, re.S)
    return match.group(1) if match else None


def role_of(name: str, catalog: Catalog) -> str | None:
    for prefix, role in ROLE_PREFIXES:
        if name.startswith(prefix):
            return role
    base = base_name(name, catalog)
    return "vLLM" if base in catalog.metrics else None


def base_name(name: str, catalog: Catalog) -> str:
    """The catalog's name for a sample name: histograms by their base name."""
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and base in catalog.metrics and catalog.metrics[base].type == "histogram":
            return base
    return name


def _job_reads(view: BundleView, catalog: Catalog) -> dict[str, JobReads]:
    """Each job the bundle's rules read, its common matchers, and every series read from it."""
    common: dict[str, dict[str, str]] = {}
    names: dict[str, set[str]] = {}
    roles: dict[str, str] = {}
    recorded = view.recorded
    fixed: list[tuple[str, str]] = []  # (job, name) read by a panel with a fixed job matcher
    pending: list[str] = []  # read by a panel through $job: placed by the kind of series
    for where, sel in all_selectors(view):
        if not sel.name or sel.name in SYNTHETIC or sel.name in recorded:
            continue
        job = sel.equalities().get("job")
        if job is None:
            pending.append(sel.name)
        elif not where.startswith("rule "):
            fixed.append((job, sel.name))
        else:
            scope = {k: v for k, v in sel.equalities().items() if k not in _VALUE_LABELS}
            common[job] = (
                scope if job not in common else {k: v for k, v in common[job].items() if scope.get(k) == v}
            )
            names.setdefault(job, set()).add(sel.name)
            role = role_of(sel.name, catalog)
            if role:
                roles.setdefault(job, role)
    for job, name in fixed:
        common.setdefault(job, {"job": job})
        names.setdefault(job, set()).add(name)
        role = role_of(name, catalog)
        if role:
            roles.setdefault(job, role)
    by_role = {role: job for job, role in roles.items()}
    for name in pending:
        role = role_of(name, catalog)
        if role in by_role:
            names[by_role[role]].add(name)
    return {
        job: JobReads(
            job=job,
            role=roles.get(job, f"job {job}"),
            matchers=tuple(sorted(common[job].items(), key=lambda kv: (kv[0] != "job", kv[0]))),
            names=frozenset(names[job]),
        )
        for job in sorted(common, key=lambda j: (_role_order(roles.get(j)), j))
    }


def _role_order(role: str | None) -> int:
    order = [r for _, r in ROLE_PREFIXES]
    return order.index(role) if role in order else len(order)


def _parse(expr: str, where: str) -> list[Selector]:
    try:
        return selectors(expr)
    except PromQLSyntaxError as exc:
        raise DoctorCannotRun(f"the {where} is not valid PromQL ({exc}); regenerate the bundle.") from None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _read_text(path: Path, root: Path) -> str:
    try:
        return path.read_text("utf-8")
    except FileNotFoundError:
        raise DoctorCannotRun(
            f"{path} does not exist, so {root} is not a whole vllm-obs bundle; pass --bundle DIR "
            "pointing at what `vllm-obs generate --out DIR` wrote."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise DoctorCannotRun(
            f"cannot read {path} ({reason}); fix its permissions or regenerate the bundle."
        ) from None


def _read_json(path: Path, root: Path) -> Any:
    try:
        return json.loads(_read_text(path, root))
    except json.JSONDecodeError as exc:
        raise DoctorCannotRun(
            f"{path} is not valid JSON (line {exc.lineno}); regenerate the bundle."
        ) from None


def _read_yaml(path: Path, root: Path, optional: bool = False) -> dict[str, Any]:
    if optional and not path.exists():
        return {}
    try:
        data = yaml.safe_load(_read_text(path, root))
    except yaml.YAMLError:
        raise DoctorCannotRun(f"{path} is not valid YAML; regenerate the bundle.") from None
    if not isinstance(data, dict):
        raise DoctorCannotRun(f"{path} is not a YAML mapping; regenerate the bundle.")
    return data


def _rule_groups(root: Path, relative: str) -> list[RuleGroup]:
    data = _read_yaml(root / relative, root)
    out = []
    for group in data.get("groups") or []:
        rules = tuple(
            Rule(
                group=group["name"],
                file=relative,
                kind="record" if "record" in r else "alert",
                name=r.get("record") or r.get("alert"),
                expr=str(r["expr"]),
                for_=str(r.get("for", "")),
                keep_firing_for=str(r.get("keep_firing_for", "")),
                labels={str(k): str(v) for k, v in (r.get("labels") or {}).items()},
            )
            for r in group.get("rules") or []
        )
        out.append(RuleGroup(group["name"], relative, group.get("interval"), rules))
    return out


def _scrape_job(job: dict[str, Any]) -> ScrapeJob:
    targets = tuple(t for sc in job.get("static_configs") or [] for t in sc.get("targets") or [])
    return ScrapeJob(str(job["job_name"]), job.get("scrape_interval"), targets)


def _dashboard(root: Path, relative: str) -> Dashboard:
    data = _read_json(root / relative, root)
    title = str(data.get("title", relative))
    variables = []
    for var in (data.get("templating") or {}).get("list") or []:
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        current = (var.get("current") or {}).get("value")
        variables.append(
            Variable(
                name=str(var.get("name")),
                kind=str(var.get("type")),
                query=str(query or ""),
                all_value=var.get("allValue"),
                include_all=bool(var.get("includeAll")),
                current=current if isinstance(current, str) else None,
            )
        )
    queries = []

    def visit(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            visit(panel.get("panels") or [])
            for target in panel.get("targets") or []:
                if target.get("expr") and not target.get("hide"):
                    queries.append(
                        PanelQuery(
                            title, str(panel.get("title", "")), str(target.get("refId", "")), target["expr"]
                        )
                    )

    visit(data.get("panels") or [])
    return Dashboard(
        title, relative, str((data.get("time") or {}).get("from", "now-1h")), tuple(variables), tuple(queries)
    )


def _time_interval(datasource: dict[str, Any]) -> str | None:
    for source in datasource.get("datasources") or []:
        if source.get("type") == "prometheus":
            value = (source.get("jsonData") or {}).get("timeInterval")
            return str(value) if value else None
    return None
