"""Compose every artefact of a bundle, in memory, from one source and one config."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from . import layout
from .alertmanager_config import alertmanager_config, inhibition_wait_warnings
from .autoscaling import autoscaling_files
from .catalog import Catalog
from .config import BundleConfig
from .dashboards.build import SIGNAL_PANELS, dashboards
from .dashboards.render.grafana import render as render_dashboard
from .dashboards.render.provisioning import dashboard_provider, datasources
from .dashboards.spec import Dashboard
from .kubernetes_manifests import alertmanager_config_resource, dashboards_config_map, prometheus_rule
from .links import link_warnings
from .mixin import mixin_files
from .platforms import platforms
from .prometheus_config import prometheus_config
from .rules.assembly import AREAS, Assembled, assemble
from .rules.model import Group
from .rules.promtool_files import test_files
from .rules.recording import recording_groups
from .rules.rule_files import rule_file
from .rules.runbook_file import runbook
from .signals import resolve
from .source import MetricSource
from .vocabulary import Vocabulary, vocabulary
from .yamlfmt import dump


@dataclass(frozen=True)
class Bundle:
    files: dict[str, str]  # relative path -> content
    warnings: list[str]
    summary: str


@dataclass(frozen=True)
class Parts:
    """Everything a bundle is made of, before it is written as text: what reads the source."""

    v: Vocabulary
    recording: list[Group]
    assembled: Assembled
    routing: dict[str, Any]
    dashboards: list[Dashboard]
    tests: dict[str, dict]  # promtool test documents by group
    runbook: str


RULE_FILES = (layout.RECORDING_RULES, layout.ALERT_RULES)


def compose(source: MetricSource, catalog: Catalog, cfg: BundleConfig, with_tests: bool = True) -> Parts:
    """with_tests=False leaves out the promtool documents (half the time), for output without them."""
    v = vocabulary(resolve(source, catalog), cfg)
    recording = recording_groups(v)
    assembled = assemble(v)
    rule_tests = [layout.from_rule_tests_dir(f) for f in RULE_FILES]
    tests = test_files(assembled, v, rule_tests, [g.name for g in recording]) if with_tests else {}
    return Parts(
        v=v,
        recording=recording,
        assembled=assembled,
        routing=alertmanager_config(v, assembled.inhibitions),
        dashboards=dashboards(v),
        tests=tests,
        runbook=runbook(assembled, v),
    )


def build_bundle(source: MetricSource, catalog: Catalog, cfg: BundleConfig) -> Bundle:
    parts = compose(source, catalog, cfg)
    v, recording, assembled, routing = parts.v, parts.recording, parts.assembled, parts.routing
    header = [f"Source: {source.summary}."]
    files: dict[str, str] = {
        layout.PROMETHEUS_CONFIG: dump(
            prometheus_config(cfg, [layout.from_prometheus_dir(f) for f in RULE_FILES]), header
        ),
        layout.RECORDING_RULES: rule_file(recording, v, header),
        layout.ALERT_RULES: rule_file(assembled.groups, v, header),
        layout.ALERTMANAGER_CONFIG: dump(routing, header),
        layout.RUNBOOKS: parts.runbook,
        layout.DATASOURCES: dump(datasources(cfg), header),
        layout.DASHBOARD_PROVIDER: dump(dashboard_provider(cfg), header),
    }
    for dash in parts.dashboards:
        files[layout.dashboard_file(dash.key)] = render_dashboard(dash, cfg, source.summary)
    dashboard_files = {k: t for k, t in files.items() if k.startswith(layout.DASHBOARDS_DIR)}
    files.update(_kubernetes_files(parts, source, catalog, header))
    files.update(autoscaling_files(cfg, header))
    # The same rules and dashboards as a jsonnet mixin, its thresholds and names left to _config.
    files.update(
        mixin_files(
            v,
            source.summary,
            files[layout.ALERT_RULES],
            files[layout.RECORDING_RULES],
            {k.removeprefix(layout.DASHBOARDS_DIR): t for k, t in dashboard_files.items()},
            header,
        )
    )
    for group, doc in parts.tests.items():
        files[layout.rule_test_file(group)] = dump(
            doc, [*header, f"Run with: promtool test rules {layout.RULE_TESTS_DIR}*.test.yml"]
        )
    files[layout.MANIFEST] = (
        json.dumps({"generated_by": "vllm-obs", "source": source.summary, "files": sorted(files)}, indent=2)
        + "\n"
    )
    return Bundle(files=files, warnings=_warnings(v, assembled), summary=source.summary)


def _kubernetes_files(
    parts: Parts, source: MetricSource, catalog: Catalog, header: list[str]
) -> dict[str, str]:
    """The Prometheus Operator's objects: the same rules, dashboards and routing, composed with
    pod labels on (every alert names its namespace and pod, every fleet-wide rule is per
    namespace), which the compose output leaves out for its simple labels unless asked."""
    cfg = parts.v.cfg
    if not cfg.prometheus.pod_labels:
        cfg = dataclasses.replace(cfg, prometheus=dataclasses.replace(cfg.prometheus, pod_labels=True))
        parts = compose(source, catalog, cfg, with_tests=False)
    rules = {
        layout.RECORDING_RULES: rule_file(parts.recording, parts.v, header),
        layout.ALERT_RULES: rule_file(parts.assembled.groups, parts.v, header),
    }
    boards = {
        layout.dashboard_file(d.key): render_dashboard(d, cfg, source.summary) for d in parts.dashboards
    }
    return {
        layout.PROMETHEUS_RULE: prometheus_rule(rules, header),
        layout.DASHBOARDS_CONFIG_MAP: dashboards_config_map(boards, header),
        layout.ALERTMANAGER_CONFIG_RESOURCE: alertmanager_config_resource(parts.routing, header),
    }


def _warnings(v: Vocabulary, assembled: Assembled) -> list[str]:
    """One per signal the source lacks that something depends on, naming what was left out;
    then the areas' own (a missing label value, a setting that makes a knob unused)."""
    res = v.res
    out = []
    for key in res.missing:
        if key == "prefix_cache_hits" and "prefix_cache_hit_rate" in res.signals:
            continue  # the V0 engine reports the rate as a gauge; its panel uses that
        skipped = [d.name for d in assembled.skipped if key in d.needs]
        skipped += [f"{d.name} (in part)" for d in assembled.built if key in d.uses]
        if key in SIGNAL_PANELS:
            skipped.append(SIGNAL_PANELS[key])
        if skipped:
            listed = ", ".join(skipped[:-1]) + " and " + skipped[-1] if len(skipped) > 1 else skipped[0]
            out.append(f"{res.source.origin} has no {key} series; skipped {listed}.")
    for area in AREAS:
        if hasattr(area, "warnings"):
            out += area.warnings(v)
    return out + _platform_job_warning(v) + link_warnings(v.cfg) + inhibition_wait_warnings(v.cfg)


def _platform_job_warning(v: Vocabulary) -> list[str]:
    """A platform that scrapes the servers itself names its own job: the bundle selects one."""
    platform = next((p for p in platforms() if p.key == v.res.source.platform), None)
    job = v.cfg.prometheus.vllm_job
    if platform is None or not platform.job or job.endswith(platform.job.rsplit("/", 1)[-1]):
        return []
    return [
        f"{platform.title} scrapes the servers itself, under the job {platform.job}; set "
        f'prometheus.vllm_job to it (the bundle selects job="{job}").'
    ]
