"""Every alert of a bundle, assembled from the declarations of its areas.

The areas (areas/) are peers, each declaring its alerts in one place (declaration.py). This
module lists them, builds the alert groups, runs every alert's promtool scenarios, resolves
the inhibitions, and refuses a declaration that lacks a runbook section, a panel, or a
scenario that fires and one that stays silent. The runbooks, the promtool files, the
alert table, the routing and the warnings are all rendered from what it returns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import ModuleType

from ..vocabulary import Vocabulary
from .areas import (
    availability,
    errors,
    features,
    gpu,
    latency,
    lifecycle,
    log_events,
    meta,
    probe,
    saturation,
    slo_burn,
)
from .declaration import Declared, Inhibition
from .model import Alert, Group
from .scenario_kit import Case, Inputs

# The areas in the order their groups are written.
AREAS: tuple[ModuleType, ...] = (
    latency,
    saturation,
    errors,
    availability,
    log_events,
    probe,
    lifecycle,
    slo_burn,
    features,
    gpu,
    meta,
)


class DeclarationError(Exception):
    """A declaration the generator cannot build a complete bundle from (a bug, not bad input)."""


@dataclass(frozen=True)
class InhibitRule:
    sources: tuple[str, ...]
    targets: tuple[str, ...]
    equal: str  # "replica" or "target"
    severity: str | None


@dataclass(frozen=True)
class Assembled:
    groups: list[Group]  # the alert groups that have rules, in AREAS order
    alerts: list[Declared]  # declarations with rules in this bundle, in group order
    skipped: list[Declared]  # declarations whose `needs` this source lacks
    built: list[Declared]  # declarations whose rules were built (some build none on this source)
    cases: dict[str, list[Case]]  # alert name -> its promtool cases
    inhibitions: list[InhibitRule]

    def declared(self, name: str) -> Declared:
        return next(d for d in self.alerts if d.name == name)


def assemble(v: Vocabulary, areas: tuple[ModuleType, ...] = AREAS) -> Assembled:
    groups, alerts, skipped, built_any, everything = [], [], [], [], []
    cases: dict[str, list[Case]] = {}
    io = Inputs(v)
    for area in areas:
        rules: list[Alert] = []
        for d in area.declarations(v):
            _check_declaration(d)
            everything.append(d)
            if not d.on:
                continue  # as configured: no warning
            if not v.res.has(*d.needs):
                skipped.append(d)
                continue
            built_any.append(d)
            built = [dataclasses.replace(rule, panel=d.panel) for rule in d.build(v)]
            if not built:
                continue  # off in this bundle (no log exporter, no probe, no GPU layer...)
            if any(rule.name != d.name for rule in built):
                raise DeclarationError(f"the declaration of {d.name} builds rules of another name")
            cases[d.name] = _scenarios(d, built, io)
            alerts.append(d)
            rules += built
        if rules:
            groups.append(Group(area.GROUP, tuple(rules)))
    _check_names(alerts)
    return Assembled(groups, alerts, skipped, built_any, cases, _inhibitions(alerts, everything))


def _check_declaration(d: Declared) -> None:
    missing = [
        what
        for what, present in (
            ("a runbook section", d.runbook is not None),
            ("a panel (NO_PANEL if it explains itself)", d.panel is not None),
            ("promtool scenarios", d.scenarios is not None),
        )
        if not present
    ]
    if missing:
        raise DeclarationError(
            f"alert {d.name} declares no {' and no '.join(missing)}; add it in its area module."
        )


def _scenarios(d: Declared, rules: list[Alert], io: Inputs) -> list[Case]:
    """The alert's cases; refused unless one expects it to fire and one expects silence."""
    assert d.scenarios is not None
    built = d.scenarios(rules, io)
    checks = [check for case in built for check in case.checks if check.alertname == d.name]
    silent = d.always_fires or any(not check.expected for check in checks)
    if not any(check.expected for check in checks) or not silent:
        raise DeclarationError(
            f"alert {d.name} needs a promtool scenario where it fires and one where it stays silent."
        )
    return built


def _check_names(alerts: list[Declared]) -> None:
    seen: set[str] = set()
    for d in alerts:
        if d.name in seen:
            raise DeclarationError(f"alert {d.name} is declared twice; declare it in one area.")
        seen.add(d.name)


def _inhibitions(alerts: list[Declared], everything: list[Declared]) -> list[InhibitRule]:
    """One rule per distinct (targets, equal, severity), its sources the bundle's alerts that
    inhibit so; a symptom tag stands for every declared alert that carries it."""
    known = {d.name for d in everything}
    merged: dict[tuple, list[str]] = {}
    for d in alerts:
        for inhibition in d.inhibits:
            targets = _targets(inhibition, everything)
            unknown = [t for t in targets if t not in known]
            if unknown or not targets:
                raise DeclarationError(f"{d.name} inhibits {', '.join(unknown) or 'nothing'}: no such alert.")
            merged.setdefault((targets, inhibition.equal, inhibition.severity), []).append(d.name)
    return [
        InhibitRule(tuple(sorted(sources)), targets, equal, severity)
        for (targets, equal, severity), sources in merged.items()
    ]


def _targets(inhibition: Inhibition, everything: list[Declared]) -> tuple[str, ...]:
    tagged = [d.name for d in everything if set(d.symptoms) & set(inhibition.symptoms)]
    return tuple(dict.fromkeys([*tagged, *inhibition.alerts]))
