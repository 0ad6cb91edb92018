"""The exporters' contract (contract.yaml): every family vllm-log-exporter and vllm-probe expose,
its labels and the closed set of values each label may take. The exporters build their families
from it and the generator queries them through it, so a family or value exists for both or neither.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

LOG_EXPORTER = "vllm-log-exporter"
PROBE = "vllm-probe"


class ContractError(ValueError):
    """The code and the exporters' contract disagree; the message says where."""


_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    help: str
    labels: dict[str, tuple[str, ...] | None]  # label -> closed set of values, or None when open
    when: str = ""  # when the family has samples, if not always
    buckets: tuple[float, ...] = ()  # a histogram's upper bounds, +Inf left out

    @property
    def label_names(self) -> list[str]:
        return list(self.labels)

    @property
    def samples(self) -> tuple[str, ...]:
        """The sample names the family is exposed and queried under."""
        return tuple(self.name + suffix for suffix in _SUFFIXES[self.type])

    @property
    def series(self) -> str:
        """The sample name of a counter or gauge (what a query selects)."""
        if self.type == "histogram":
            raise ValueError(f"{self.name} is a histogram: query one of {', '.join(self.samples)}")
        return self.samples[0]

    def values(self, label: str) -> tuple[str, ...]:
        """The closed set of values of `label`, in exposition order."""
        values = self.labels[label]
        if values is None:
            raise ValueError(f"label {label} of {self.name} is open: it has no fixed set of values")
        return values


@dataclass(frozen=True)
class Exporter:
    name: str
    families: dict[str, Family]

    def __getitem__(self, name: str) -> Family:
        if name not in self.families:
            raise KeyError(f"{name} is not a family of {self.name} in the exporters' contract")
        return self.families[name]

    def family(self, kind: Any, name: str, **values: Any) -> Any:
        """Family `name` built as a prometheus_client `kind` (CounterMetricFamily, ...) with the
        contract's HELP text and label names; `values` go to the class (`value=` gives an
        unlabelled family its sample). A family the contract lacks cannot be built."""
        spec = self[name]
        built = kind(spec.name, spec.help, labels=spec.label_names or None, **values)
        if built.type != spec.type:
            raise ContractError(f"{name} is a {spec.type} in the exporters' contract, not a {built.type}")
        return built

    def closed_values(self, label: str, *families: str, named: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The values the contract gives `label` in `families` (one set, in exposition order),
        after checking that every value the code names (`named`) is one of them."""
        values = self[families[0]].values(label)
        for other in families[1:]:
            if self[other].values(label) != values:
                raise ContractError(
                    f"label {label} has other values in {other} than in {families[0]} in the "
                    f"exporters' contract, but {self.name} gives both the same"
                )
        missing = [value for value in named if value not in values]
        if missing:
            raise ContractError(
                f"label {label} of {families[0]} has no value {', '.join(missing)} in the exporters' "
                f"contract ({', '.join(values)}), but {self.name} uses it"
            )
        return values


@functools.lru_cache(maxsize=1)
def load() -> dict[str, Exporter]:
    text = resources.files(__package__).joinpath("contract.yaml").read_text("utf-8")
    data = yaml.safe_load(text)
    out = {}
    for exporter, spec in data["exporters"].items():
        families = {}
        for f in spec["families"]:
            labels = {
                label: tuple(values) if isinstance(values, list) else None
                for label, values in (f.get("labels") or {}).items()
            }
            families[f["name"]] = Family(
                f["name"],
                f["type"],
                f["help"],
                labels,
                f.get("when", ""),
                tuple(map(float, f.get("buckets", ()))),
            )
        out[exporter] = Exporter(exporter, families)
    return out


def log_exporter() -> Exporter:
    return load()[LOG_EXPORTER]


def probe() -> Exporter:
    return load()[PROBE]
