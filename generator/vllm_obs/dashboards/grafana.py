"""Render dashboard specs to Grafana JSON with grafanalib (the only module that imports it).

Output is deterministic: keys sorted, panel ids assigned in layout order, a trailing
newline. Every panel and target names the `${datasource}` variable, never a UID.
"""

from __future__ import annotations

import json
from typing import Any

import grafanalib.core as G

from ..config import BundleConfig
from ..links import dashboard_uid
from ..yamlfmt import GENERATED
from .spec import Dashboard, Panel

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
FULL_WIDTH = 24


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
        panels=_layout(dash),
        templating=G.Templating(list=_variables(dash)),
        links=[
            G.DashboardLink(
                title="vLLM dashboards",
                type="dashboards",
                tags=["vllm-obs"],
                asDropdown=True,
                includeVars=True,
                keepTime=True,
            )
        ],
    ).auto_panel_ids()
    data = _clean(json.loads(json.dumps(built.to_json_data(), default=_encode)))
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
    for var in dash.variables:
        out.append(
            G.Template(
                name=var.name,
                label=var.label,
                query=var.query,
                dataSource="${datasource}",
                includeAll=True,
                allValue=var.all_value,
                multi=True,
                refresh=2,  # on time range change: new replicas appear without a reload
                sort=1,
                default="$__all",
            )
        )
    return out


def _layout(dash: Dashboard) -> list[Any]:
    panels: list[Any] = []
    y = 0
    for row in dash.rows:
        panels.append(G.RowPanel(title=row.title, gridPos=G.GridPos(h=1, w=FULL_WIDTH, x=0, y=y)))
        y += 1
        x, row_height = 0, 0
        for panel in row.panels:
            if x + panel.width > FULL_WIDTH:
                x, y = 0, y + row_height
                row_height = 0
            panels.append(_panel(panel, G.GridPos(h=panel.height, w=panel.width, x=x, y=y)))
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
            instant=q.instant,
            datasource=DATASOURCE,
            intervalFactor=1,
        )
        for i, q in enumerate(panel.queries)
    ]


def _panel(panel: Panel, pos: G.GridPos) -> Any:
    common = dict(
        title=panel.title,
        description=panel.description,
        dataSource=DATASOURCE,
        targets=_targets(panel),
        gridPos=pos,
    )
    if panel.kind == "stat":
        return G.Stat(
            **common,
            format=panel.unit,
            thresholds=_thresholds(panel),
            reduceCalc="lastNotNull",
            graphMode="area",
            colorMode="value",
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
    )
