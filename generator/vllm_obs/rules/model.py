"""The shapes rules are built in before they are written out."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Recording:
    record: str
    expr: str


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    severity: str
    summary: str
    description: str
    dashboard: str  # key of the dashboard its link opens
    for_: str | None = None
    keep_firing_for: str | None = None  # how long it stays firing once its condition ends
    labels: dict[str, str] = field(default_factory=dict)
    threshold: float | None = None  # the number the expression compares against, for the tests
    panel: str | None = None  # title of the panel its link opens; set from its declaration


@dataclass(frozen=True)
class Group:
    name: str
    rules: tuple[Recording | Alert, ...]
    interval: str | None = None
