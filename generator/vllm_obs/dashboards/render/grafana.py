"""Render dashboard specs to Grafana JSON with grafanalib, the only module that imports it. Output is
deterministic (sorted keys, panel ids from titles so `viewPanel` links hold, a final newline), and
every panel, target, variable and annotation names `${datasource}`, never a UID.
"""

from __future__ import annotations

import json
from typing import Any

import attr
import grafanalib.core as G

from ...config import BundleConfig
from ...links import dashboard_uid, panel_id
from ...vocabulary import scope_of
from ...yamlfmt import GENERATED
from ..spec import Annotation, Dashboard, Panel, Variable

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
FULL_WIDTH = 24


@attr.s
class _Heatmap(G.Panel):
    """Grafana's heatmap panel (9+) fed with Prometheus buckets: no recalculation, le as rows."""

    unit = attr.ib(default="s")

    def to_json_data(self) -> dict[str, Any]:
        return self.panel_json(
            {
                "type": "heatmap",
                "fieldConfig": {"defaults": {"unit": "short"}, "overrides": []},
                "options": {
                    "calculate": False,
                    "cellGap": 1,
                    "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5},
                    "filterValues": {"le": 1e-9},
                    "legend": {"show": True},
                    "rowsFrame": {"layout": "auto"},
                    "tooltip": {"mode": "single", "yHistogram": True},
                    "yAxis": {"axisPlacement": "left", "unit": self.unit},
                },
            }
        )


def render(dash: Dashboard, cfg: BundleConfig, source: str) -> str:
    built = G.Dashboard(
        title=f"{cfg.dashboards.title_prefix} / {dash.title}",
        uid=dashboard_uid(cfg, dash.key),
        description=f"{dash.description} {GENERATED} Source: {source}.",
        tags=["vllm", "vllm-obs"],
        timezone="browser",
        refresh=cfg.dashboards.refresh,
        time=G.Time(cfg.dashboards.time_from, "now"),
        editable=False,
        graphTooltip=1,
        panels=_layout(dash, cfg),
        templating=G.Templating(list=_variables(dash)),
        annotations=G.Annotations(list=[_annotation(a) for a in dash.annotations]),
        # One link per other dashboard, carrying every variable and the time range.
        links=[
            G.DashboardLink(
                title=title,
                type="link",
                uri=f"/d/{dashboard_uid(cfg, key)}",
                includeVars=True,
                keepTime=True,
                tooltip=f"{title}, on the same selection and time range",
            )
            for key, title in dash.siblings
            if key != dash.key
        ],
    )
    data = _clean(json.loads(json.dumps(built.to_json_data(), default=_encode)))
    _check_ids(data, dash.title)
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def _encode(obj: Any) -> Any:
    return obj.to_json_data()


def _clean(node: Any) -> Any:
    """Fix grafanalib's encodings that Grafana reads differently."""
    if isinstance(node, dict):
        out = {k: _clean(v) for k, v in node.items()}
        if out.get("value") == "null" and "color" in out:
            out["value"] = None  # the base threshold step is null, not the string "null"
        return out
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def _check_ids(data: dict[str, Any], title: str) -> None:
    ids = [p["id"] for p in data["panels"]]
    if len(ids) != len(set(ids)):
        raise ValueError(f"two panels of the {title} dashboard share an id: give one another title")


def _annotation(a: Annotation) -> dict[str, Any]:
    return {
        "datasource": DATASOURCE,
        "enable": True,
        "expr": a.expr,
        "iconColor": a.color,
        "name": a.name,
        "step": "1m",
        "titleFormat": a.title,
        "textFormat": a.text,
        "tagKeys": "severity",
        "useValueForTime": False,
    }


def _variables(dash: Dashboard) -> list[G.Template]:
    out = [
        G.Template(
            name="datasource",
            label="Data source",
            query="prometheus",
            type="datasource",
            includeAll=False,
            multi=False,
            hide=0,
        )
    ]
    out += [_variable(v) for v in dash.variables]
    return out


def _variable(var: Variable) -> G.Template:
    if var.kind == "adhoc":
        # Extra label filters (namespace, pod...) Grafana adds to every query of the datasource.
        return G.Template(name=var.name, label=var.label, query="", type="adhoc", dataSource=DATASOURCE)
    return G.Template(
        name=var.name,
        label=var.label,
        query=var.query,
        dataSource="${datasource}",
        includeAll=var.include_all,
        allValue=var.all_value,
        multi=True,
        refresh=2,  # on time range change: new replicas appear without a reload
        sort=1,
        # Without All, no default: Grafana opens on the first value.
        **({"default": "$__all"} if var.include_all else {}),
    )


def _layout(dash: Dashboard, cfg: BundleConfig) -> list[Any]:
    panels: list[Any] = []
    y = 0
    for row in dash.rows:
        panels.append(
            G.RowPanel(
                title=row.title,
                id=panel_id(f"row: {row.title}"),
                gridPos=G.GridPos(h=1, w=FULL_WIDTH, x=0, y=y),
            )
        )
        y += 1
        x, row_height = 0, 0
        for panel in row.panels:
            if x + panel.width > FULL_WIDTH:
                x, y = 0, y + row_height
                row_height = 0
            panels.append(_panel(panel, G.GridPos(h=panel.height, w=panel.width, x=x, y=y), cfg))
            x += panel.width
            row_height = max(row_height, panel.height)
        y += row_height
    return panels


def _thresholds(panel: Panel) -> list[G.Threshold]:
    steps = [G.Threshold(panel.base_color, 0, 0.0)]
    for i, (value, color) in enumerate(panel.thresholds, start=1):
        steps.append(G.Threshold(color, i, float(value)))
    return steps


def _targets(panel: Panel) -> list[G.Target]:
    return [
        G.Target(
            expr=q.expr,
            legendFormat=q.legend,
            refId=chr(ord("A") + i),
            instant=q.instant or panel.kind == "table",
            format="table" if panel.kind == "table" else q.format,
            datasource=DATASOURCE,
            intervalFactor=1,
        )
        for i, q in enumerate(panel.queries)
    ]


def _drill_links(panel: Panel, cfg: BundleConfig) -> list[dict[str, str]]:
    """Clicking a series (or a table row) opens the drill dashboard on that replica and model."""
    if not panel.drill:
        return []
    if panel.kind == "table":
        field = "${{__data.fields.{label}}}"
    else:
        field = "${{__field.labels.{label}}}"
    params = [
        "${__url_time_range}",
        "${datasource:queryparam}",
        "${job:queryparam}",
        f"var-instance={field.format(label='instance')}",
        f"var-model_name={field.format(label='model_name')}",
    ]
    params += [f"var-{var}={field.format(label=label)}" for label, var in scope_of(cfg).partitions]
    return [
        {
            "title": "Open this replica and model",
            "url": f"/d/{dashboard_uid(cfg, panel.drill)}?" + "&".join(params),
        }
    ]


def _table_config(panel: Panel) -> dict[str, Any]:
    fields = [name for name, _, _ in panel.columns]
    return {
        "transformations": [
            *([{"id": "merge", "options": {}}] if len(panel.queries) > 1 else []),
            {"id": "filterFieldsByName", "options": {"include": {"names": fields}}},
            {
                "id": "organize",
                "options": {
                    "indexByName": {name: i for i, name in enumerate(fields)},
                    "renameByName": {name: header for name, header, _ in panel.columns},
                },
            },
        ],
        "overrides": [
            {"matcher": {"id": "byName", "options": name}, "properties": [{"id": "unit", "value": unit}]}
            for name, _, unit in panel.columns
            if unit
        ],
    }


def _panel(panel: Panel, pos: G.GridPos, cfg: BundleConfig) -> Any:
    links = _drill_links(panel, cfg)
    common = dict(
        title=panel.title,
        description=panel.description,
        dataSource=DATASOURCE,
        targets=_targets(panel),
        gridPos=pos,
        id=panel_id(panel.title),
    )
    if panel.kind == "stat":
        return G.Stat(
            **common,
            format=panel.unit,
            thresholds=_thresholds(panel),
            reduceCalc="lastNotNull",
            graphMode="none" if panel.text_mode == "name" else "area",
            colorMode="value",
            textMode=panel.text_mode,
        )
    if panel.kind == "heatmap":
        return _Heatmap(**common, unit=panel.unit)
    if panel.kind == "table":
        table = _table_config(panel)
        return G.Table(
            **common,
            unit=panel.unit,
            transformations=table["transformations"],
            overrides=table["overrides"],
            extraJson={"fieldConfig": {"defaults": {"links": links}}},
        )
    return G.TimeSeries(
        **common,
        unit=panel.unit,
        thresholds=_thresholds(panel),
        thresholdsStyleMode="dashed" if panel.thresholds else "off",
        drawStyle="bars" if panel.kind == "bars" else "line",
        fillOpacity=60 if panel.kind == "bars" else 10,
        stacking={"mode": "normal", "group": "A"} if panel.stack else {},
        legendDisplayMode="table",
        legendPlacement="bottom",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        valueMin=panel.min,
        valueMax=panel.max,
        spanNulls=True,
        extraJson={"fieldConfig": {"defaults": {"links": links}}} if links else None,
    )
