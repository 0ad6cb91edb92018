"""The generator refuses an alert declared without what every alert must have: a runbook
section, a panel its link opens, a promtool scenario where it fires and one where it stays
silent; and an inhibition that names no alert."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from vllm_obs.catalog import Catalog
from vllm_obs.config import load_config
from vllm_obs.rules.areas import latency
from vllm_obs.rules.assembly import AREAS, DeclarationError, assemble, scenarios
from vllm_obs.rules.declaration import Declared, Inhibition
from vllm_obs.signals import resolve
from vllm_obs.source import from_catalog
from vllm_obs.vocabulary import vocabulary

CATALOG = Catalog.load()


@pytest.fixture(scope="module")
def v():
    release = CATALOG.newest
    return vocabulary(resolve(from_catalog(CATALOG, release), CATALOG), load_config(None))


def area_with(declared: Declared) -> SimpleNamespace:
    """An area of one alert, as an area module looks to the assembler."""
    return SimpleNamespace(GROUP="vllm-obs.test", declarations=lambda v: [declared])


def ttft(v) -> Declared:
    return latency.declarations(v)[0]


def test_a_complete_declaration_is_assembled(v) -> None:
    assembled = assemble(v, (area_with(ttft(v)),))
    assert [d.name for d in assembled.alerts] == ["VllmHighTimeToFirstToken"]
    assert scenarios(assembled, v)["VllmHighTimeToFirstToken"]
    assert [g.name for g in assembled.groups] == ["vllm-obs.test"]
    rules = assembled.groups[0].rules
    assert {r.panel for r in rules} == {"Time to first token"}  # the declaration's panel, on every rule


@pytest.mark.parametrize(
    ("field", "said"),
    (
        ("runbook", "lacks a runbook section"),
        ("panel", "lacks a panel"),
        ("scenarios", "lacks promtool scenarios"),
    ),
)
def test_an_alert_without_its_parts_is_refused(v, field, said) -> None:
    broken = dataclasses.replace(ttft(v), **{field: None})
    with pytest.raises(DeclarationError, match=f"alert VllmHighTimeToFirstToken {said}"):
        assemble(v, (area_with(broken),))


def test_an_alert_whose_scenarios_never_stay_silent_is_refused(v) -> None:
    declared = ttft(v)

    def firing_only(rules, io):
        return [c for c in declared.scenarios(rules, io) if any(check.expected for check in c.checks)]

    assembled = assemble(v, (area_with(dataclasses.replace(declared, scenarios=firing_only)),))
    with pytest.raises(DeclarationError, match="fires and one where it stays silent"):
        scenarios(assembled, v)


def test_an_alert_whose_scenarios_never_fire_is_refused(v) -> None:
    declared = ttft(v)

    def silent_only(rules, io):
        cases = declared.scenarios(rules, io)
        for case in cases:
            case.checks = [check for check in case.checks if not check.expected]
        return cases

    assembled = assemble(v, (area_with(dataclasses.replace(declared, scenarios=silent_only)),))
    with pytest.raises(DeclarationError, match="fires and one where it stays silent"):
        scenarios(assembled, v)


def test_an_inhibition_of_an_unknown_alert_is_refused(v) -> None:
    broken = dataclasses.replace(ttft(v), inhibits=(Inhibition(alerts=("VllmNoSuchAlert",)),))
    with pytest.raises(DeclarationError, match="inhibits VllmNoSuchAlert: no such alert"):
        assemble(v, (area_with(broken),))


def test_an_alert_declared_twice_is_refused(v) -> None:
    with pytest.raises(DeclarationError, match="declared twice"):
        assemble(
            v, (area_with(ttft(v)), SimpleNamespace(GROUP="vllm-obs.other", declarations=lambda v: [ttft(v)]))
        )


def test_every_area_declares_what_it_builds(v) -> None:
    """The real areas pass the same checks: every alert of the default bundle is declared once."""
    assembled = assemble(v, AREAS)
    names = [d.name for d in assembled.alerts]
    assert len(names) == len(set(names)) and "WatchdogVllmObs" in names
    built = {r.name for g in assembled.groups for r in g.rules}
    assert built == set(names)
