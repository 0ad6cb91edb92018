"""What the mixin leaves to `_config`: the knobs (values that change text and numbers, never which
rules and panels exist), the forms each is written in (a Python rendering and its jsonnet twin),
and the sentinels that locate each form in a generated bundle (docs/design.md).
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import (
    AlertsSection,
    BundleConfig,
    DashboardsSection,
    GpuSection,
    LinksSection,
    PagingSection,
    PrometheusSection,
    SloSection,
)
from ..dashboards.panels.queries import regex_literal
from ..dcgm import gpu_selector
from ..links import dashboard_uid
from ..promql import number, seconds
from ..rules.expressions import human_seconds, percent
from ..vocabulary import DASHBOARDS


@dataclass(frozen=True)
class Knob:
    """One `_config` field: where it comes from in vllm-obs.yml and how it reads in jsonnet."""

    name: str  # the _config field
    section: str  # the vllm-obs.yml section, "" for knobs the mixin derives
    key: str  # the vllm-obs.yml key
    kind: str  # number | objective | duration | text
    doc: str
    # jsonnet expression of a derived knob (a selector built from a job name); None: a plain value
    derived: str | None = None


@dataclass(frozen=True)
class Form:
    """A knob as text: in the sentinel bundle, in the real bundle, and rebuilt in jsonnet."""

    name: str  # field of lib/values.libsonnet
    sentinel: str
    real: str
    jsonnet: str  # expression over `c` (the _config) and `f` (lib/format.libsonnet)
    knobs: tuple[str, ...]  # the _config fields it reads


def camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _doc(section: type, key: str) -> str:
    return next(f.metadata["doc"] for f in dataclasses.fields(section) if f.name == key)


# The sections whose knobs tune alerts (DEVELOPERS.md, "A new alert") and the prefix of their
# `_config` names; an objective keeps its own name (`ttftObjective`).
VALUE_SECTIONS = (
    ("alerts", AlertsSection, ""),
    ("slo", SloSection, "slo_"),
    ("paging", PagingSection, ""),
    ("gpu", GpuSection, "gpu_"),
)


def _kind(f: dataclasses.Field) -> str:
    """A config field's knob kind: an objective, a number (a float) or else a duration."""
    if f.name.endswith("_objective"):
        return "objective"
    return "number" if f.type in (float, "float") else "duration"


def value_knobs() -> list[Knob]:
    """Thresholds, durations and objectives: every number and string of the alert sections but
    those the config marks (`knob(bucket_bound=...)`, `shapes_rules`), structures and job names."""
    texts = {(k.section, k.key) for k in text_knobs()}
    out = []
    for section, fields, prefix in VALUE_SECTIONS:
        for f in dataclasses.fields(fields):
            value = f.type in (float, "float", str, "str")
            if not f.metadata["mixin"] or not value or (section, f.name) in texts:
                continue
            kind = _kind(f)
            name = camel(f.name if kind == "objective" else prefix + f.name)
            out.append(Knob(name, section, f.name, kind, f.metadata["doc"]))
    return out


def _selector(job_knob: str, extra: str = "") -> str:
    if not extra:
        return f"'job=\"%s\"' % self.{job_knob}"
    return (
        f"std.join(', ', ['job=\"%s\"' % self.{job_knob}] + (\n"
        f"      local extra = std.stripChars(self.{extra}, ' \\t\\n\\r');\n"
        "      if extra == '' then [] else [extra]\n"
        "    ))"
    )


def text_knobs() -> list[Knob]:
    p, d = PrometheusSection, DashboardsSection
    return [
        Knob("vllmJob", "prometheus", "vllm_job", "text", _doc(p, "vllm_job")),
        Knob("vllmExtraSelector", "prometheus", "extra_selector", "text", _doc(p, "extra_selector")),
        Knob(
            "vllmSelector",
            "",
            "",
            "text",
            "matchers of every vLLM series: the job and the extra matchers",
            _selector("vllmJob", "vllmExtraSelector"),
        ),
        Knob("logExporterJob", "prometheus", "log_exporter_job", "text", _doc(p, "log_exporter_job")),
        Knob(
            "logExporterSelector",
            "",
            "",
            "text",
            "matchers of the log exporters' series",
            _selector("logExporterJob"),
        ),
        Knob("probeJob", "prometheus", "probe_job", "text", _doc(p, "probe_job")),
        Knob("probeSelector", "", "", "text", "matchers of the canary probes' series", _selector("probeJob")),
        Knob("gpuJob", "gpu", "job", "text", _doc(GpuSection, "job")),
        Knob("gpuSelector", "", "", "text", "matchers of the DCGM exporters' series", _selector("gpuJob")),
        Knob(
            "showMultiCluster",
            "prometheus",
            "multi_cluster",
            "text",
            "keep the cluster label in every aggregation and alert, and show the dashboards' cluster "
            "variable (Thanos, Mimir, or a Prometheus whose targets carry the label)",
        ),
        Knob("clusterLabel", "prometheus", "cluster_label", "text", _doc(p, "cluster_label")),
        Knob(
            "runbookURLPattern",
            "links",
            "runbook_url",
            "text",
            "each alert's runbook_url: %s is the alert name in lower case (the section's anchor)",
        ),
        Knob("grafanaURL", "links", "grafana_url", "text", _doc(LinksSection, "grafana_url")),
        Knob("dashboardUIDs", "dashboards", "uid_prefix", "text", "uid of each dashboard, by file name"),
        Knob("dashboardTitlePrefix", "dashboards", "title_prefix", "text", _doc(d, "title_prefix")),
        Knob("dashboardRefresh", "dashboards", "refresh", "text", _doc(d, "refresh")),
        Knob("dashboardTimeFrom", "dashboards", "time_from", "text", _doc(d, "time_from")),
    ]


# -- sentinels ------------------------------------------------------------------------------

# Text sentinels share a marker, so anything left unreplaced is easy to find.
MARKER = "vllmobssentinel"
TEXT_SENTINELS = {
    ("prometheus", "vllm_job"): f"{MARKER}.vllm",  # a dot, so its regex form differs from it
    ("prometheus", "extra_selector"): f'{MARKER}_extra="x"',
    ("prometheus", "log_exporter_job"): f"{MARKER}.exporter",
    ("prometheus", "probe_job"): f"{MARKER}.probe",
    ("prometheus", "cluster_label"): f"{MARKER}_cluster",
    ("gpu", "job"): f"{MARKER}.gpu",
    ("links", "runbook_url"): f"https://{MARKER}.runbooks/runbooks.md",
    ("links", "grafana_url"): f"https://{MARKER}.grafana",
    ("dashboards", "uid_prefix"): f"{MARKER}-uid",
    ("dashboards", "title_prefix"): f"{MARKER.capitalize()}Title",
    ("dashboards", "refresh"): f"{MARKER}-refresh",
    ("dashboards", "time_from"): f"now-{MARKER}",
}


def _duration(total: int) -> str:
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}d{hours}h{minutes}m{secs}s"


# A number or a duration as it stands in text: from its first digit, with its unit (`0.05`, `5%`,
# `200ms`, `1h30m`), not counting a full stop after it or a digit before it (`p95_5m` has `5m`).
TOKEN = re.compile(r"\d[A-Za-z0-9.%]*")
SUFFIX = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ%"


def tokens(text: str) -> list[tuple[int, str]]:
    """(start, token) of every number or duration in a text."""
    out = []
    for match in TOKEN.finditer(text):
        start = match.start()
        if start > 0 and text[start - 1] in "0123456789.":
            continue
        out.append((start, match.group(0).rstrip(".")))
    return out


def sentinel_values(knobs: list[Knob], corpus: str) -> dict[str, Any]:
    """A sentinel per value knob: fractions of seven or eight digits (valid for every fraction knob)
    and durations of months in four units, each of whose renderings differs from every other one and
    appears nowhere in `corpus` (the bundle's own rules and dashboards: `80%` may be a constant)."""
    rng = random.Random(20240607)  # fixed: the bundle is deterministic
    out: dict[str, Any] = {}
    taken: set[str] = set()
    present = {t for _, token in tokens(corpus) for t in (token, token.rstrip(SUFFIX))}
    for knob in knobs:
        while True:
            if knob.kind == "duration":
                value: Any = _duration(rng.randint(10_000_000, 99_999_999))
                texts = [python(value) for _, python, _ in DURATION_FORMS]
            else:
                digits = 8 if knob.kind == "objective" else 7
                value = rng.randint(10 ** (digits - 1) + 1, 10**digits - 1) / 10**digits
                renderings = NUMBER_FORMS + (OBJECTIVE_FORMS if knob.kind == "objective" else ())
                texts = [python(value) for _, python, _ in renderings]
            if len(set(texts)) == len(texts) and not (taken | present) & set(texts):
                taken |= set(texts)
                out[knob.name] = value
                break
    return out


def sentinel_config(
    cfg: BundleConfig, knobs: list[Knob], values: dict[str, Any], multi: bool
) -> BundleConfig:
    """The user's configuration with every knob set to its sentinel (structure untouched)."""
    changes: dict[str, dict[str, Any]] = {}
    for knob in knobs:
        if knob.section and knob.name in values:
            changes.setdefault(knob.section, {})[knob.key] = values[knob.name]
    for (section, key), text in TEXT_SENTINELS.items():
        changes.setdefault(section, {})[key] = text
    changes["prometheus"]["multi_cluster"] = multi
    sections = {name: dataclasses.replace(getattr(cfg, name), **fields) for name, fields in changes.items()}
    return dataclasses.replace(cfg, **sections)


# -- forms ----------------------------------------------------------------------------------

# (suffix, Python rendering, jsonnet rendering of `{x}`), for every number and objective knob.
NUMBER_FORMS: tuple[tuple[str, Callable[[float], str], str], ...] = (
    ("", number, "f.number({x})"),
    ("G", lambda x: f"{x:g}", "f.g({x})"),
    ("Human", human_seconds, "f.humanSeconds({x})"),
    ("Percent", percent, "f.percent({x})"),
    ("Times100", lambda x: number(x * 100), "f.number({x} * 100)"),
    ("Percent0", lambda x: f"{x:.0%}", "f.fixedPercent({x}, 0)"),
    ("Percent2", lambda x: f"{x:.2%}", "f.fixedPercent({x}, 2)"),
)
# An objective is also written as its error budget (1 - objective, rounded as the rules do).
OBJECTIVE_FORMS: tuple[tuple[str, Callable[[float], str], str], ...] = (
    ("Budget", lambda x: number(round(1 - x, 10)), "f.number(f.budget({x}))"),
    ("BudgetG", lambda x: f"{round(1 - x, 10):g}", "f.g(f.budget({x}))"),
    ("BudgetPercent2", lambda x: f"{round(1 - x, 10):.2%}", "f.fixedPercent(f.budget({x}), 2)"),
)
DURATION_FORMS: tuple[tuple[str, Callable[[str], str], str], ...] = (
    ("", lambda d: d, "{x}"),
    ("Seconds", lambda d: str(int(seconds(d))), "std.toString(f.seconds({x}))"),
    ("SecondsTwice", lambda d: str(int(seconds(d)) * 2), "std.toString(2 * f.seconds({x}))"),
)


def _real(cfg: BundleConfig, knob: Knob) -> Any:
    return getattr(getattr(cfg, knob.section), knob.key)


def value_forms(cfg: BundleConfig, knobs: list[Knob], sentinels: dict[str, Any]) -> list[Form]:
    out = []
    for knob in knobs:
        if knob.kind == "duration":
            renderings: tuple[tuple[str, Callable[[Any], str], str], ...] = DURATION_FORMS
        else:
            renderings = NUMBER_FORMS + (OBJECTIVE_FORMS if knob.kind == "objective" else ())
        for suffix, python, js in renderings:
            out.append(
                Form(
                    name=knob.name + suffix,
                    sentinel=python(sentinels[knob.name]),
                    real=python(_real(cfg, knob)),
                    jsonnet=js.format(x=f"c.{knob.name}"),
                    knobs=(knob.name,),
                )
            )
    return out


def _cluster(real: BundleConfig, sentinel: BundleConfig) -> list[Form]:
    """The cluster label where multi-cluster puts it; each empty when it is off."""
    on = real.prometheus.multi_cluster
    label, mark = real.prometheus.cluster_label, sentinel.prometheus.cluster_label
    shapes = {
        "clusterBy": ("{}, ", "c.clusterLabel + ', '"),
        "inCluster": (" in cluster {{{{ $labels.{} }}}}", "' in cluster {{ $labels.%s }}' % c.clusterLabel"),
        "clusterMatcher": ('{}=~"$cluster", ', "'%s=~\"$cluster\", ' % c.clusterLabel"),
        "clusterAlertMatcher": ('{}=~"$cluster|", ', "'%s=~\"$cluster|\", ' % c.clusterLabel"),
        "clusterLinkParams": (
            "{{{{ if $labels.{0} }}}}&var-cluster={{{{ $labels.{0} | urlquery }}}}{{{{ end }}}}",
            "'{{ if $labels.%(l)s }}&var-cluster={{ $labels.%(l)s | urlquery }}{{ end }}' % { l: c.clusterLabel }",
        ),
        "clusterDrillParam": (
            "&var-cluster=${{__field.labels.{}}}",
            "'&var-cluster=${__field.labels.%s}' % c.clusterLabel",
        ),
        "clusterTableDrillParam": (
            "&var-cluster=${{__data.fields.{}}}",
            "'&var-cluster=${__data.fields.%s}' % c.clusterLabel",
        ),
    }
    out = [
        Form(
            name=name,
            sentinel=shape.format(mark),
            real=shape.format(label) if on else "",
            jsonnet=f"if c.showMultiCluster then {js} else ''",
            knobs=("showMultiCluster", "clusterLabel"),
        )
        for name, (shape, js) in shapes.items()
    ]
    # The bare label, in what only multi-cluster adds (the dashboards' cluster variable).
    out.append(Form("clusterLabel", mark, label, "c.clusterLabel", ("showMultiCluster", "clusterLabel")))
    return out


def text_forms(real: BundleConfig, sentinel: BundleConfig) -> list[Form]:
    def extra(cfg: BundleConfig) -> str:  # dashboards.queries.Filters._extra
        stripped = cfg.prometheus.extra_selector.strip()
        return f", {stripped}" if stripped else ""

    jobs = (
        ("vllm", lambda c: c.prometheus.vllm_job, lambda c: c.vllm_selector, "vllmJob", "vllmSelector"),
        (
            "logExporter",
            lambda c: c.prometheus.log_exporter_job,
            lambda c: c.exporter_selector,
            "logExporterJob",
            "logExporterSelector",
        ),
        ("probe", lambda c: c.prometheus.probe_job, lambda c: c.probe_selector, "probeJob", "probeSelector"),
        ("gpu", lambda c: c.gpu.job, gpu_selector, "gpuJob", "gpuSelector"),
    )
    out = []
    for prefix, job, selector, job_knob, selector_knob in jobs:
        knobs = (
            (job_knob, selector_knob) if prefix != "vllm" else (job_knob, "vllmExtraSelector", selector_knob)
        )
        out += [
            Form(f"{prefix}Selector", selector(sentinel), selector(real), f"c.{selector_knob}", knobs),
            Form(
                f"{prefix}JobRegex",
                regex_literal(job(sentinel)),
                regex_literal(job(real)),
                f"f.regexLiteral(c.{job_knob})",
                (job_knob,),
            ),
            Form(f"{prefix}Job", job(sentinel), job(real), f"c.{job_knob}", (job_knob,)),
        ]
    out.append(
        Form(
            "vllmExtraMatchers",
            extra(sentinel),
            extra(real),
            "f.extraMatchers(c.vllmExtraSelector)",
            ("vllmExtraSelector",),
        )
    )
    out += _cluster(real, sentinel)
    out.append(
        Form(
            "grafanaURL",
            sentinel.links.grafana_url.rstrip("/"),
            real.links.grafana_url.rstrip("/"),
            "std.rstripChars(c.grafanaURL, '/')",
            ("grafanaURL",),
        )
    )
    for key in DASHBOARDS:
        out.append(
            Form(
                f"{camel(key)}UID",
                dashboard_uid(sentinel, key),
                dashboard_uid(real, key),
                f"c.dashboardUIDs['{dashboard_file(key)}']",
                ("dashboardUIDs",),
            )
        )
    d_s, d_r = sentinel.dashboards, real.dashboards
    out += [
        Form(
            "dashboardTitlePrefix",
            d_s.title_prefix,
            d_r.title_prefix,
            "c.dashboardTitlePrefix",
            ("dashboardTitlePrefix",),
        ),
        Form("dashboardRefresh", d_s.refresh, d_r.refresh, "c.dashboardRefresh", ("dashboardRefresh",)),
        Form(
            "dashboardTimeFrom", d_s.time_from, d_r.time_from, "c.dashboardTimeFrom", ("dashboardTimeFrom",)
        ),
    ]
    return out


def dashboard_file(key: str) -> str:
    """A dashboard's file name, as the bundle writes it under dashboards/."""
    return f"vllm-{key.replace('_', '-')}.json"


def check_distinct(forms: list[Form]) -> None:
    """Two forms written alike in the sentinel bundle could not be told apart."""
    seen: dict[str, str] = {}
    for form in forms:
        if form.sentinel in seen:
            raise ValueError(
                f"the mixin forms {seen[form.sentinel]} and {form.name} share the sentinel text {form.sentinel!r}"
            )
        seen[form.sentinel] = form.name


def knob_defaults(cfg: BundleConfig) -> dict[str, Any]:
    """Each plain (not derived) knob's value in this bundle's configuration, for config.libsonnet."""
    out: dict[str, Any] = {}
    for knob in value_knobs():
        out[knob.name] = _real(cfg, knob)
    p = cfg.prometheus
    out.update(
        vllmJob=p.vllm_job,
        vllmExtraSelector=p.extra_selector,
        logExporterJob=p.log_exporter_job,
        probeJob=p.probe_job,
        gpuJob=cfg.gpu.job,
        showMultiCluster=p.multi_cluster,
        clusterLabel=p.cluster_label,
        runbookURLPattern=cfg.links.runbook_url.replace("%", "%%") + "#%s" if cfg.links.runbook_url else "",
        grafanaURL=cfg.links.grafana_url,
        dashboardUIDs={dashboard_file(key): dashboard_uid(cfg, key) for key in DASHBOARDS},
        dashboardTitlePrefix=cfg.dashboards.title_prefix,
        dashboardRefresh=cfg.dashboards.refresh,
        dashboardTimeFrom=cfg.dashboards.time_from,
    )
    return out
