"""What a dashboard shows, independent of how it is rendered."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    instant: bool = False
    format: str = "time_series"  # time_series | heatmap (cumulative buckets by le) | table


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # timeseries | stat | bars | heatmap | table
    # (value, colour) steps above the base colour; they match the alert thresholds.
    thresholds: tuple[tuple[float, str], ...] = ()
    base_color: str = "green"
    min: float | None = None
    max: float | None = None
    width: int = 12
    height: int = 8
    stack: bool = False
    # Why this panel may legitimately show nothing (e.g. a feature that is off).
    may_be_empty: str = ""
    # Stat panels: "name" shows the legend (a label such as a version) instead of the value.
    text_mode: str = "auto"
    # Tables: (field, header, unit) in display order; a field is a label name or "Value #<refId>".
    columns: tuple[tuple[str, str, str], ...] = ()
    # A dashboard key: clicking a series opens that dashboard on the series' own replica and model.
    drill: str | None = None


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str  # label_values(...) against the datasource variable; empty for ad hoc filters
    all_value: str = ".*"  # what "All" expands to
    # False: no All option, the dashboard opens on the first value (a one-replica dashboard,
    # cheap at any fleet size); several may still be ticked.
    include_all: bool = True
    kind: str = "query"  # query | adhoc


@dataclass(frozen=True)
class Annotation:
    """Events drawn on every time series: a Prometheus query whose series mark the time."""

    name: str
    expr: str
    title: str  # legend-style format of the event's title
    text: str
    color: str = "red"


@dataclass(frozen=True)
class Dashboard:
    key: str
    title: str
    description: str
    rows: tuple[Row, ...]
    variables: tuple[Variable, ...] = field(default_factory=tuple)
    annotations: tuple[Annotation, ...] = field(default_factory=tuple)
    # (key, title) of every dashboard of the bundle, in navigation order: the links bar.
    siblings: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def panels(self) -> list[Panel]:
        return [p for row in self.rows for p in row.panels]
