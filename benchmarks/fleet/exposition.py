"""The real vLLM 0.32 exposition as a template: families, labels and bucket layouts kept, values
filled in per engine. The capture is tests/fixtures/metrics/vllm-0.32.0-cpu-traffic.prom; its
`_created` gauges stay, since vLLM serves the classic text format and Prometheus stores them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
CAPTURE = REPO / "tests" / "fixtures" / "metrics" / "vllm-0.32.0-cpu-traffic.prom"
CAPTURED_MODEL = "tiny-llama"

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


@dataclass(frozen=True)
class Sample:
    index: int
    family: str
    name: str
    labels: dict[str, str]
    captured: float


@dataclass(frozen=True)
class Histogram:
    """Where one histogram (one label set) lives in an engine's value vector."""

    bounds: tuple[float, ...]  # finite upper bounds, +Inf excluded
    buckets: slice  # cumulative buckets, +Inf included (contiguous in the exposition)
    count: int
    sum: int


class Template:
    def __init__(self, text: str) -> None:
        self.samples: list[Sample] = []
        self.types: dict[str, str] = {}
        self._chunks: list[str] = []
        pending: list[str] = []
        family = ""
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
                family = name
            if line.startswith("#") or not line:
                pending.append(line + "\n")
                continue
            match = _SAMPLE.match(line)
            if match is None:
                raise ValueError(f"{CAPTURE.name}: cannot parse line {line!r}")
            name, labels, value = match.groups()
            labels_text = labels or ""
            pending.append(f"{name}{labels_text} ")
            self._chunks.append("".join(pending))
            pending = ["\n"]
            self.samples.append(
                Sample(
                    index=len(self.samples),
                    family=family if _belongs(name, family) else name,
                    name=name,
                    labels=dict(_LABEL.findall(labels_text)),
                    captured=float(value),
                )
            )
        self._tail = "".join(pending)

    def __len__(self) -> int:
        return len(self.samples)

    def find(self, name: str, **labels: str) -> int:
        """Index of the sample with this name whose labels include `labels`."""
        for sample in self.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.index
        raise KeyError(f"{name}{labels} is not in the captured exposition")

    def histogram(self, family: str, **labels: str) -> Histogram:
        def ours(s: Sample) -> bool:
            return all(s.labels.get(k) == v for k, v in labels.items())

        buckets = [s for s in self.samples if s.name == family + "_bucket" and ours(s)]
        if not buckets:
            raise KeyError(f"{family}{labels} has no buckets in the captured exposition")
        first, last = buckets[0].index, buckets[-1].index
        if last - first + 1 != len(buckets) or buckets[-1].labels["le"] != "+Inf":
            raise ValueError(f"{family}{labels}: buckets are not contiguous or lack +Inf")
        return Histogram(
            bounds=tuple(float(s.labels["le"]) for s in buckets[:-1]),
            buckets=slice(first, last + 1),
            count=self.find(family + "_count", **labels),
            sum=self.find(family + "_sum", **labels),
        )

    def families(self, kind: str) -> list[str]:
        return [name for name, t in self.types.items() if t == kind]

    def renderer(self, model: str) -> Renderer:
        swap = f'model_name="{model}"'
        chunks = [c.replace(f'model_name="{CAPTURED_MODEL}"', swap) for c in self._chunks]
        return Renderer(chunks, self._tail)


def _belongs(name: str, family: str) -> bool:
    return name == family or any(name == family + s for s in _SUFFIXES)


class Renderer:
    """One engine's exposition text: fixed chunks around the values."""

    def __init__(self, chunks: list[str], tail: str) -> None:
        self._chunks = chunks
        self._tail = tail

    def render(self, values: np.ndarray) -> str:
        text = "".join(chain.from_iterable(zip(self._chunks, map(repr, values.tolist()), strict=True)))
        return text + self._tail


def load_template(path: Path = CAPTURE) -> Template:
    return Template(path.read_text())
