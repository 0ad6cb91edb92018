"""Every alert of a bundle, assembled from its areas' declarations: groups, resolved inhibitions and
promtool scenarios, from which runbooks, tests, the alert table, routing and warnings are rendered.
It refuses a declaration without a runbook section, a panel, or a firing and a silent scenario.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import ModuleType

from ..vocabulary import Vocabulary
from .areas import (
    availability,
    capacity,
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
    capacity,
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
    equal: str  # "replica", "target" or "model"
    matchers: tuple[str, ...]  # more matchers of the sources


@dataclass(frozen=True)
class Assembled:
    groups: list[Group]  # the alert groups that have rules, in AREAS order
    alerts: list[Declared]  # declarations with rules in this bundle, in group order
    skipped: list[Declared]  # declarations whose `needs` this source lacks
    built: list[Declared]  # declarations whose rules were built (some build none on this source)
    inhibitions: list[InhibitRule]

    def declared(self, name: str) -> Declared:
        return next(d for d in self.alerts if d.name == name)


def assemble(v: Vocabulary, areas: tuple[ModuleType, ...] = AREAS) -> Assembled:
    groups, alerts, skipped, built_any, everything = [], [], [], [], []
    for area in areas:
        rules: list[Alert] = []
        for d in area.declarations(v):
            _check_declaration(d)
            _check_knobs(d, v)
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
            if any(r.severity == "critical" for r in built) and not (d.runbook.why and d.runbook.first):
                raise DeclarationError(
                    f"{d.name} pages: its runbook needs `why` (the queries) and `first` (the first moves)."
                )
            alerts.append(d)
            rules += built
        if rules:
            groups.append(Group(area.GROUP, tuple(rules)))
    _check_names(alerts)
    return Assembled(groups, alerts, skipped, built_any, _inhibitions(alerts, everything))


def scenarios(assembled: Assembled, v: Vocabulary) -> dict[str, list[Case]]:
    """Every alert's promtool cases (alert name -> cases), for the bundle's test files."""
    inputs = Inputs(v)
    out = {}
    for d in assembled.alerts:
        rules = [r for g in assembled.groups for r in g.rules if isinstance(r, Alert) and r.name == d.name]
        out[d.name] = _scenarios(d, rules, inputs)
    return out


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
        raise DeclarationError(f"alert {d.name} lacks {' and '.join(missing)}; add it in its area module.")


def _check_knobs(d: Declared, v: Vocabulary) -> None:
    for knob in d.knobs:
        section, _, key = knob.partition(".")
        if not hasattr(getattr(v.cfg, section, None), key):
            raise DeclarationError(f"alert {d.name} names the knob {knob}, which the config does not have.")


def _scenarios(d: Declared, rules: list[Alert], inputs: Inputs) -> list[Case]:
    """The alert's cases; refused unless one expects it to fire and another expects silence
    throughout (a check before `for` has elapsed is not a silent scenario)."""
    assert d.scenarios is not None
    built = d.scenarios(rules, inputs)
    own = [[check for check in case.checks if check.alertname == d.name] for case in built]
    fires = any(check.expected for checks in own for check in checks)
    silent = d.always_fires or any(checks and not any(c.expected for c in checks) for checks in own)
    if not (fires and silent):
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
    """One rule per distinct (targets, equal, matchers), its sources the bundle's alerts that
    inhibit so; a symptom tag stands for every alert of the bundle's configuration that carries
    it (off parts, such as a GPU layer not enabled, name nothing)."""
    known = {d.name for d in everything}
    configured = [d for d in everything if d.on]
    merged: dict[tuple, list[str]] = {}
    for d in alerts:
        for inhibition in d.inhibits:
            unknown = [t for t in inhibition.alerts if t not in known]
            if unknown:
                raise DeclarationError(f"{d.name} inhibits {', '.join(unknown)}: no such alert.")
            targets = _targets(inhibition, configured)
            if not targets:
                continue  # every alert it would silence is off in this bundle
            merged.setdefault((targets, inhibition.equal, inhibition.matchers), []).append(d.name)
    return [
        InhibitRule(tuple(sorted(sources)), targets, equal, matchers)
        for (targets, equal, matchers), sources in merged.items()
    ]


def _targets(inhibition: Inhibition, everything: list[Declared]) -> tuple[str, ...]:
    tagged = [d.name for d in everything if set(d.symptoms) & set(inhibition.symptoms)]
    return tuple(dict.fromkeys([*tagged, *inhibition.alerts]))
