"""The mixin/ folder of a bundle: a jsonnet monitoring mixin with the same rules and dashboards, laid
out as kubernetes-mixin (mixin.libsonnet, config.libsonnet, alerts/, rules/, dashboards/, lib/ and
the *.jsonnet entry points; docs/design.md).
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from typing import Any

import yaml

from ..config import BundleConfig
from ..dashboards.build import dashboards as build_dashboards
from ..dashboards.render.grafana import render as render_dashboard
from ..promql import number
from ..rules.assembly import assemble
from ..rules.recording import recording_groups
from ..rules.rule_files import rule_group  # what rule_file writes, as data
from ..signals import Resolution
from ..vocabulary import Vocabulary, vocabulary
from ..yamlfmt import GENERATED
from . import emit
from .format_lib import FORMAT_LIBSONNET
from .knobs import (
    Form,
    Knob,
    check_distinct,
    dashboard_file,
    knob_defaults,
    sentinel_config,
    sentinel_values,
    text_forms,
    text_knobs,
    value_forms,
    value_knobs,
)
from .template import Deriver, Fill, Lit, Node, Obj, check_filled, check_no_sentinel

ROOT = "mixin"


@dataclasses.dataclass(frozen=True)
class Rendered:
    alerts: Any
    rules: Any
    dashboards: dict[str, Any]  # file name -> dashboard


def _render(res: Resolution, cfg: BundleConfig, source: str) -> Rendered:
    """The rules and dashboards for a configuration, as the data the bundle's files hold (the rule
    files' data straight from the function rule_file writes: writing YAML and reading it back
    would give the same and take most of the time)."""
    v = vocabulary(res, cfg)
    return Rendered(
        alerts={"groups": [rule_group(g, v) for g in assemble(v).groups]},
        rules={"groups": [rule_group(g, v) for g in recording_groups(v)]},
        dashboards={
            dashboard_file(d.key): json.loads(render_dashboard(d, cfg, source)) for d in build_dashboards(v)
        },
    )


def mixin_files(
    v: Vocabulary,
    source: str,
    alerts: str,
    rules: str,
    dashboards: dict[str, str],
    header: list[str],
) -> dict[str, str]:
    """mixin/ for the bundle whose alert and recording rule files and dashboards (by file name) are given.
    It builds the vocabularies of the two sentinel configurations (multi-cluster on and off) that
    locate each knob."""
    res, cfg = v.res, v.cfg
    knobs = value_knobs()
    sentinels = sentinel_values(knobs, "\n".join([alerts, rules, *dashboards.values()]))
    on_cfg = sentinel_config(cfg, knobs, sentinels, multi=True)
    off_cfg = sentinel_config(cfg, knobs, sentinels, multi=False)
    forms = value_forms(cfg, knobs, sentinels) + text_forms(cfg, on_cfg)
    check_distinct(forms)
    off_forms = value_forms(off_cfg, knobs, sentinels) + text_forms(off_cfg, on_cfg)
    off = Fill({f.name: f.real for f in off_forms}, sentinels, on_cfg.links.runbook_url, False)
    real = Fill(
        {f.name: f.real for f in forms},
        {k.name: getattr(getattr(cfg, k.section), k.key) for k in knobs},
        cfg.links.runbook_url,
        cfg.prometheus.multi_cluster,
    )
    numbers = {sentinels[k.name]: k.name for k in knobs if k.kind != "duration"}
    deriver = Deriver(forms, numbers, on_cfg.links.runbook_url)

    on_data, off_data = _render(res, on_cfg, source), _render(res, off_cfg, source)
    if set(on_data.dashboards) != set(dashboards) or set(off_data.dashboards) != set(dashboards):
        raise ValueError("the mixin's dashboards differ from the bundle's")

    def derive(on: Any, off_value: Any, expected: Any, where: str) -> Node:
        template = deriver.node(on, off_value, where, off)
        check_no_sentinel(template, where)
        check_filled(template, real, expected, where)
        return template

    alert_t = derive(on_data.alerts, off_data.alerts, _load(alerts), "prometheusAlerts")
    rule_t = derive(on_data.rules, off_data.rules, _load(rules), "prometheusRules")
    dash_t = {
        name: derive(
            on_data.dashboards[name],
            off_data.dashboards[name],
            json.loads(text),
            f"grafanaDashboards['{name}']",
        )
        for name, text in sorted(dashboards.items())
    }
    used_forms = [f for f in forms if f.name in deriver.used]
    used = {k for f in used_forms for k in f.knobs} | {
        n for n in deriver.used if n in {k.name for k in knobs}
    }
    used.add("runbookURLPattern")  # every alert links its runbook

    top = [f"// {GENERATED}", *(f"// {line}" for line in header)]
    out = {
        "mixin.libsonnet": _mixin(top),
        "config.libsonnet": _config(top, cfg, used),
        "lib/format.libsonnet": "\n".join(top) + "\n" + FORMAT_LIBSONNET.lstrip("\n"),
        "lib/values.libsonnet": _values(top, used_forms),
        "alerts/alerts.libsonnet": _part(
            top,
            "prometheusAlerts",
            "groups+:",
            _groups(alert_t),
            "The alerting rules of alerts/vllm-alerts.rules.yml.",
        ),
        "rules/rules.libsonnet": _part(
            top,
            "prometheusRules",
            "groups+:",
            _groups(rule_t),
            "The recording rules of alerts/vllm-recording.rules.yml.",
        ),
        "dashboards/dashboards.libsonnet": _dashboards(top, sorted(dash_t)),
        "alerts.jsonnet": _entry(
            top, "std.manifestYamlDoc(mixin.prometheusAlerts)", "jsonnet -S alerts.jsonnet > alerts.yaml"
        ),
        "rules.jsonnet": _entry(
            top, "std.manifestYamlDoc(mixin.prometheusRules)", "jsonnet -S rules.jsonnet > rules.yaml"
        ),
        "dashboards.jsonnet": _entry(
            top, "mixin.grafanaDashboards", "jsonnet -m dashboards_out dashboards.jsonnet"
        ),
    }
    for name, template in dash_t.items():
        out[f"dashboards/{name.removesuffix('.json')}.libsonnet"] = _part(
            top, "grafanaDashboards", f"{emit.key(name)}:", template, f"The dashboard dashboards/{name}."
        )
    return {f"{ROOT}/{path}": text for path, text in out.items()}


def _load(text: str) -> Any:
    """A rule file as data (libyaml's safe loader where PyYAML has it: the same data, faster)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _groups(template: Node) -> Node:
    """The `groups` list of a rule file's template."""
    if not (isinstance(template, Obj) and [k for k, _, _ in template.items] == [Lit("groups")]):
        raise ValueError("a rule file holds nothing but its groups")
    return template.items[0][1]


def _mixin(top: list[str]) -> str:
    return "\n".join(
        [
            *top,
            "// The vLLM monitoring mixin: prometheusAlerts, prometheusRules and grafanaDashboards.",
            "// Override knobs with `_config+::` (see config.libsonnet).",
            "(import 'config.libsonnet') +",
            "(import 'alerts/alerts.libsonnet') +",
            "(import 'rules/rules.libsonnet') +",
            "(import 'dashboards/dashboards.libsonnet')",
            "",
        ]
    )


def _entry(top: list[str], expr: str, usage: str) -> str:
    return "\n".join([*top, f"// Usage: {usage}", "local mixin = import 'mixin.libsonnet';", expr, ""])


def _dashboards(top: list[str], names: list[str]) -> str:
    imports = " +\n".join(f"(import '{n.removesuffix('.json')}.libsonnet')" for n in names)
    return "\n".join([*top, imports, ""])


def _part(top: list[str], field: str, entry: str, template: Node, what: str) -> str:
    """One generated file: `field+:: { entry: template }` (`groups+:` adds to other mixins' groups)."""
    pad = emit.INDENT
    return "\n".join(
        [
            *top,
            f"// {what} Thresholds, durations and names come from _config (config.libsonnet).",
            "local values = import '../lib/values.libsonnet';",
            "",
            "{",
            f"{pad}local c = $._config,",
            f"{pad}local v = values(c),",
            f"{pad}{field}+:: {{",
            f"{pad * 2}{entry}{emit.spaced(emit.node(template, pad * 2))},",
            f"{pad}}},",
            "}",
            "",
        ]
    )


def _values(top: list[str], forms: list[Form]) -> str:
    # Locals, so that each rendering is computed once however many rules and panels use it.
    lines = [
        *top,
        "// Each knob of _config as the text the rules and dashboards show it in: a threshold as",
        "// PromQL writes it (0.05), as a description writes it (5%, 200ms); a duration as is or in seconds.",
        "local f = import 'format.libsonnet';",
        "",
        "function(c)",
    ]
    lines += [f"{emit.INDENT}local {form.name} = {form.jsonnet};" for form in forms]
    lines += ["{"]
    lines += [f"{emit.INDENT}{emit.key(form.name)}: {form.name}," for form in forms]
    lines += ["}", ""]
    return "\n".join(lines)


def _literal(value: Any, indent: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return number(value)
    if isinstance(value, dict):
        inner = indent + emit.INDENT
        fields = "".join(f"{inner}{emit.key(k)}: {_literal(v, inner)},\n" for k, v in value.items())
        return "{\n" + fields + indent + "}"
    return emit.string(str(value))


def _comment(text: str, pad: str) -> list[str]:
    return [
        f"{pad}// {line}" for line in textwrap.wrap(text, width=100 - len(pad) - 3, break_on_hyphens=False)
    ]


def _config(top: list[str], cfg: BundleConfig, used: set[str]) -> str:
    defaults = knob_defaults(cfg)
    pad = emit.INDENT * 2
    lines = [
        *top,
        "// The knobs of the vLLM mixin, with this bundle's values. Override any of them in your jsonnet:",
        "//   (import 'mixin/mixin.libsonnet') + { _config+:: { vllmJob: 'llm/vllm', queueWaitingThreshold: 50 } }",
        "// Rules and panels exist only for what the bundle was generated from (the series of the",
        "// vLLM release, the log exporters and probes, the GPU layer): regenerate to change those.",
        "{",
        f"{emit.INDENT}_config+:: {{",
    ]

    def block(title: str, knobs: list[Knob]) -> None:
        chosen = [k for k in knobs if k.name in used]
        if not chosen:
            return
        lines.extend(_comment(title, pad))
        for knob in chosen:
            where = f" (vllm-obs.yml {knob.section}.{knob.key})" if knob.section else ""
            lines.extend(_comment(knob.doc + where, pad))
            value = knob.derived if knob.derived else _literal(defaults[knob.name], pad)
            lines.append(f"{pad}{emit.key(knob.name)}: {value},")
        lines.append("")

    texts = {k.name: k for k in text_knobs()}
    block(
        "Selectors are inserted between {} in Prometheus queries: set the job names (and the extra "
        "matchers); the selectors are built from them.",
        [texts[n] for n in ("vllmJob", "vllmExtraSelector", "vllmSelector", "logExporterJob",
                            "logExporterSelector", "probeJob", "probeSelector", "gpuJob", "gpuSelector")],
    )  # fmt: skip
    block(
        "Many clusters: with showMultiCluster, every aggregation and join keeps clusterLabel, alerts "
        "name it and the dashboards get a cluster variable.",
        [texts["showMultiCluster"], texts["clusterLabel"]],
    )
    by_section: dict[str, list[Knob]] = {}
    for knob in value_knobs():
        by_section.setdefault(knob.section, []).append(knob)
    block(
        "Alert thresholds and durations: one knob per key of the alerts section of vllm-obs.yml.",
        by_section["alerts"],
    )
    block("Service-level objectives of the budget-burn alerts.", by_section["slo"])
    block("When a model's lost serving capacity pages.", by_section["paging"])
    block("The GPU layer (dcgm-exporter).", by_section["gpu"])
    block(
        "Links and dashboards.",
        [texts[n] for n in ("runbookURLPattern", "grafanaURL", "dashboardUIDs", "dashboardTitlePrefix",
                            "dashboardRefresh", "dashboardTimeFrom")],
    )  # fmt: skip
    if lines[-1] == "":
        lines.pop()
    lines += [f"{emit.INDENT}}},", "}", ""]
    return "\n".join(lines)
