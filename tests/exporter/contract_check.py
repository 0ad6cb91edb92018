"""Compare what real exporters served with the exporters' contract, both ways: `undeclared` (what
the scrapes show that the contract lacks), `unseen` (what it declares that no scrape showed), and
doctored contracts (`with_value`, `without_value`) to show a disagreement is reported."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from vllm_obs_contract import Exporter, Family


@dataclass(frozen=True)
class Scrape:
    run: str  # what produced it, named in the reports
    families: tuple[Metric, ...]


def parse(run: str, exposition: str) -> Scrape:
    return Scrape(run, tuple(text_string_to_metric_families(exposition)))


def series(family: str, label: str, value: str) -> str:
    """How a closed label value is named in the reports."""
    return f'{family}{{{label}="{value}"}}'


def undeclared(contract: Exporter, scrapes: Iterable[Scrape]) -> dict[str, str]:
    """Each disagreement with the contract the scrapes show -> the first run that showed it."""
    found: dict[str, str] = {}
    for scrape in scrapes:
        with_samples = {family.name for family in scrape.families if family.samples}
        for name, spec in contract.families.items():
            if not spec.when and name not in with_samples:
                found.setdefault(f"{name} has no samples, yet the contract has no `when` for it", scrape.run)
        for family in scrape.families:
            for problem in _family_problems(contract, family):
                found.setdefault(problem, scrape.run)
    return found


def _family_problems(contract: Exporter, family: Metric) -> Iterator[str]:
    spec = contract.families.get(family.name)
    if spec is None:
        yield f"{family.name} is not in the contract"
        return
    if family.type != spec.type:
        yield f"{family.name} is a {family.type}, the contract says {spec.type}"
    if family.documentation != spec.help:
        yield f"{family.name} has HELP {family.documentation!r}, the contract {spec.help!r}"
    order: dict[str, list[str]] = {}  # closed label -> its values in the order first served
    for sample in family.samples:
        if sample.name not in spec.samples:
            yield f"{sample.name} is not a sample of {family.name} ({', '.join(spec.samples)})"
        labels = dict(sample.labels)
        if spec.type == "histogram" and sample.name.endswith("_bucket"):
            labels.pop("le", None)  # the bucket bound: part of every histogram
        if sorted(labels) != sorted(spec.label_names):  # the exposition sorts label names
            yield f"{family.name} has labels {sorted(labels)}, the contract {sorted(spec.label_names)}"
        for label, value in labels.items():
            closed = spec.labels.get(label)
            if closed is None:
                continue
            if value not in closed:
                yield f"{series(family.name, label, value)} is not in the contract"
            elif value not in order.setdefault(label, []):
                order[label].append(value)
    for label, served in order.items():
        expected = [value for value in spec.values(label) if value in served]
        if served != expected:
            yield f"{family.name} serves {label} in the order {served}, the contract {expected}"


def unseen(contract: Exporter, scrapes: Iterable[Scrape]) -> set[str]:
    """Families no scrape had samples of, and closed values no scrape showed non-zero."""
    emitted: set[str] = set()
    non_zero: set[str] = set()
    for scrape in scrapes:
        for family in scrape.families:
            if family.samples:
                emitted.add(family.name)
            for sample in family.samples:
                if sample.value != 0:
                    non_zero.update(series(family.name, k, v) for k, v in sample.labels.items())
    missing = set(contract.families) - emitted
    for name, spec in contract.families.items():
        for label, values in spec.labels.items():
            for value in values or ():  # an open label (None) has no values to see
                if series(name, label, value) not in non_zero:
                    missing.add(series(name, label, value))
    return missing


def _with_labels(contract: Exporter, family: str, label: str, values: tuple[str, ...]) -> Exporter:
    spec: Family = contract[family]
    doctored = replace(spec, labels={**spec.labels, label: values})
    return replace(contract, families={**contract.families, family: doctored})


def with_value(contract: Exporter, family: str, label: str, value: str) -> Exporter:
    """A copy of the contract whose closed `label` of `family` also has `value` (last)."""
    return _with_labels(contract, family, label, (*contract[family].values(label), value))


def without_value(contract: Exporter, family: str, label: str, value: str) -> Exporter:
    """A copy of the contract whose closed `label` of `family` lacks `value`."""
    values = tuple(v for v in contract[family].values(label) if v != value)
    return _with_labels(contract, family, label, values)
