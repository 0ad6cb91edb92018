"""What a dashboard shows, independent of how it is rendered."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # timeseries | stat | bars
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


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str  # label_values(...) against the datasource variable
    all_value: str = ".*"  # what "All" expands to


@dataclass(frozen=True)
class Dashboard:
    key: str
    title: str
    description: str
    rows: tuple[Row, ...]
    variables: tuple[Variable, ...] = field(default_factory=tuple)

    @property
    def panels(self) -> list[Panel]:
        return [p for row in self.rows for p in row.panels]
