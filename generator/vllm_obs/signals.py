"""Resolve logical signals (time to first token, KV-cache usage...) to the series a source has."""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import Catalog, SignalSpec
from .errors import BundleError
from .source import Family, MetricSource

# What every bundle is built on, as alternatives: a gauge every serving replica has (how a server
# is tied to its model and seen), and a count of finished requests (the traffic every rate and
# floor is judged against). Every other signal is optional.
FOUNDATIONS = (
    ("requests_running", "requests_waiting"),
    ("request_success", "e2e_request_latency", "time_to_first_token"),
)


@dataclass(frozen=True)
class Signal:
    key: str
    spec: SignalSpec
    family: Family

    @property
    def name(self) -> str:
        return self.family.name

    @property
    def buckets(self) -> tuple[float, ...]:
        return self.family.buckets or ()

    def has_label(self, label: str) -> bool:
        return label in self.family.labels

    def has_value(self, label: str, value: str) -> bool:
        return value in self.family.label_values.get(label, frozenset())

    # Sample names a query may use.
    @property
    def bucket(self) -> str:
        return self.name + "_bucket"

    @property
    def count(self) -> str:
        return self.name + "_count"

    @property
    def sum(self) -> str:
        return self.name + "_sum"


@dataclass(frozen=True)
class Resolution:
    source: MetricSource
    signals: dict[str, Signal]
    missing: tuple[str, ...]  # signal keys the source does not expose

    def has(self, *keys: str) -> bool:
        return all(key in self.signals for key in keys)

    @property
    def reports_engine_errors(self) -> bool:
        """finished_reason="error" exists from vLLM 0.13; older releases cannot count failures."""
        success = self.signals.get("request_success")
        return success is not None and success.has_value("finished_reason", "error")

    def __getitem__(self, key: str) -> Signal:
        return self.signals[key]


def resolve(source: MetricSource, catalog: Catalog) -> Resolution:
    found: dict[str, Signal] = {}
    missing = []
    for key, spec in catalog.signals.items():
        family = next(
            (
                source.families[n]
                for n in spec.series
                if n in source.families and source.families[n].type == spec.type
            ),
            None,
        )
        if family is None:
            missing.append(key)
        else:
            found[key] = Signal(key, spec, family)
    for keys in FOUNDATIONS:
        if not any(key in found for key in keys):
            names = " or ".join(catalog.signals[key].series[0] for key in keys)
            raise BundleError(
                f"{source.origin} has no {names}, which every bundle is built on; save the whole "
                "/metrics of a vLLM server (not a router's, nor a filtered copy) and try again."
            )
    return Resolution(source=source, signals=found, missing=tuple(missing))
