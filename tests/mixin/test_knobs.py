"""A knob added to any section an alert's knobs go in (DEVELOPERS.md, "A new alert") becomes a
mixin `_config` value from its config field alone, unless the field says it shapes the rules or is
a bucket bound; mixin/knobs.py names no knob of these sections."""

from __future__ import annotations

import dataclasses

import pytest
from vllm_obs.config import knob
from vllm_obs.mixin import knobs


def with_fields(monkeypatch, section: str, *fields: tuple) -> None:
    """The section's class, with more fields, in place of its own."""
    sections = [
        (name, dataclasses.make_dataclass(cls.__name__, fields, bases=(cls,), frozen=True), prefix)
        if name == section
        else (name, cls, prefix)
        for name, cls, prefix in knobs.VALUE_SECTIONS
    ]
    monkeypatch.setattr(knobs, "VALUE_SECTIONS", tuple(sections))


@pytest.mark.parametrize(
    ("section", "prefix"), (("alerts", ""), ("slo", "slo"), ("paging", ""), ("gpu", "gpu"))
)
def test_a_new_knob_of_an_alert_section_is_a_config_value(monkeypatch, section, prefix):
    before = knobs.value_knobs()
    with_fields(
        monkeypatch,
        section,
        ("toy_threshold", float, knob(3.0, "a toy threshold")),
        ("toy_for", str, knob("3m", "a toy duration")),
        ("toy_bound", float, knob(0.5, "a toy bucket bound", bucket_bound=True)),
        ("toy_switch", float, knob(1.0, "a toy that turns a clause off", shapes_rules=True)),
        ("toy_models", list[str], knob([], "a toy structure")),
    )
    after = knobs.value_knobs()
    assert [k for k in after if k.section != section] == [k for k in before if k.section != section]
    added = [(k.name, k.key, k.kind) for k in after if k.section == section and k.key.startswith("toy_")]
    assert added == [
        (knobs.camel(f"{prefix}_toy_threshold" if prefix else "toy_threshold"), "toy_threshold", "number"),
        (knobs.camel(f"{prefix}_toy_for" if prefix else "toy_for"), "toy_for", "duration"),
    ]


def test_a_new_objective_keeps_its_own_name(monkeypatch):
    with_fields(monkeypatch, "slo", ("toy_objective", float, knob(0.99, "a toy objective")))
    (toy,) = [k for k in knobs.value_knobs() if k.key == "toy_objective"]
    assert (toy.name, toy.kind) == ("toyObjective", "objective")
