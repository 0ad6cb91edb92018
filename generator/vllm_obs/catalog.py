"""Load and query the metric catalog (catalog/vllm-metrics.yaml): read it, check its shape, and answer
which series release R with engine E exposes, and which series carry a logical signal.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from .errors import BundleError
from .releases import Release, minor_of, parse_release, release_text

ENGINES = ("v0", "v1")
TYPES = ("counter", "gauge", "histogram")


@dataclass(frozen=True)
class ReleaseInfo:
    version: Release
    engines: tuple[str, ...]  # the first one is the release's default engine

    @property
    def text(self) -> str:
        return release_text(self.version)


@dataclass(frozen=True)
class Variant:
    engine: str
    first: Release
    last: Release
    labels: tuple[str, ...]
    label_values: dict[str, tuple[str, ...]]
    buckets: str | None
    when: str  # always | first_request | hidden | never | feature:<name>

    def covers(self, release: Release) -> bool:
        return self.first <= release <= self.last


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: str
    variants: tuple[Variant, ...]
    unreleased: str = ""
    """Where a series no release of the catalog has yet was read (it has no variants): a live or
    saved exposition that shows it is understood; a bundle from the catalog never expects it."""


@dataclass(frozen=True)
class FamilySpec:
    """What one series looks like on one release and engine."""

    name: str
    type: str
    labels: frozenset[str]
    label_values: dict[str, tuple[str, ...]]
    buckets: tuple[float, ...] | None  # None: no fixed bounds (not a histogram, or config-dependent)
    when: str


@dataclass(frozen=True)
class SignalSpec:
    key: str
    title: str
    type: str
    unit: str
    series: tuple[str, ...]


@dataclass(frozen=True)
class Catalog:
    releases: tuple[ReleaseInfo, ...]
    default_release: Release
    bucket_sets: dict[str, tuple[float, ...] | None]
    metrics: dict[str, MetricSpec]
    signals: dict[str, SignalSpec]
    _by_release: dict[Release, ReleaseInfo] = field(repr=False, compare=False, default_factory=dict)

    @staticmethod
    @functools.cache
    def load() -> Catalog:
        text = resources.files("vllm_obs").joinpath("catalog/vllm-metrics.yaml").read_text("utf-8")
        return Catalog.from_data(yaml.safe_load(text))

    @staticmethod
    def from_data(data: dict[str, Any]) -> Catalog:
        return _build(data)

    # -- releases ---------------------------------------------------------------

    def release(self, text: str) -> tuple[ReleaseInfo, str | None]:
        """The catalog entry for a release number, and a note when a sibling stands in. An unlisted patch
        release takes the newest listed release of its minor not newer than it (metric sets change in
        minor releases); a release of an unknown minor is refused.
        """
        wanted = parse_release(text)
        if wanted in self._by_release:
            return self._by_release[wanted], None
        siblings = [r for r in self.releases if minor_of(r.version) == minor_of(wanted)]
        earlier = [r for r in siblings if r.version < wanted]
        stand_in = earlier[-1] if earlier else (siblings[0] if siblings else None)
        if stand_in is None:
            raise BundleError(
                f"vLLM {release_text(wanted)} is not in the catalog, which covers "
                f"{self.releases[0].text} to {self.releases[-1].text}; pass a release in that "
                "range or point --metrics-url at the running server instead."
            )
        note = (
            f"vLLM {release_text(wanted)} is not listed in the catalog; using {stand_in.text}, "
            "whose metric set is the same minor release's."
        )
        return stand_in, note

    @property
    def newest(self) -> ReleaseInfo:
        return self._by_release[self.default_release]

    # -- series -----------------------------------------------------------------

    def families(
        self,
        release: Release,
        engine: str,
        *,
        include_hidden: bool = False,
        features: Iterable[str] = (),
        include_conditional: bool = False,
        before_first_request: bool = False,
    ) -> dict[str, FamilySpec]:
        """Every series release/engine exposes with default flags (plus the features named) once
        it served a request; before_first_request leaves out those registered by the first one."""
        enabled = {f"feature:{name}" for name in features}
        out: dict[str, FamilySpec] = {}
        for metric in self.metrics.values():
            for variant in metric.variants:
                if variant.engine != engine or not variant.covers(release):
                    continue
                shown = (
                    variant.when == "always"
                    or (variant.when == "first_request" and not before_first_request)
                    or (variant.when == "hidden" and include_hidden)
                    or variant.when in enabled
                    or (include_conditional and variant.when != "never")
                )
                if shown:
                    out[metric.name] = FamilySpec(
                        name=metric.name,
                        type=metric.type,
                        labels=frozenset(variant.labels),
                        label_values=variant.label_values,
                        buckets=self.bucket_sets.get(variant.buckets) if variant.buckets else None,
                        when=variant.when,
                    )
        return out

    @property
    def features(self) -> frozenset[str]:
        """Every feature some series depends on (`when: feature:<name>`)."""
        return frozenset(
            v.when.removeprefix("feature:")
            for m in self.metrics.values()
            for v in m.variants
            if v.when.startswith("feature:")
        )

    def engine_names(self, engine: str) -> frozenset[str]:
        """Every series name the engine family has exposed in any release."""
        return frozenset(m.name for m in self.metrics.values() if any(v.engine == engine for v in m.variants))


def _build(data: dict[str, Any]) -> Catalog:
    def fail(where: str, problem: str) -> BundleError:
        return BundleError(f"The metric catalog is malformed at {where}: {problem}.")

    releases = []
    for i, entry in enumerate(data["releases"]):
        engines = tuple(entry["engines"])
        if not engines or any(e not in ENGINES for e in engines):
            raise fail(f"releases[{i}]", f"unknown engines {engines}")
        releases.append(ReleaseInfo(parse_release(str(entry["version"])), engines))
    if [r.version for r in releases] != sorted(r.version for r in releases):
        raise fail("releases", "releases are not listed oldest first")
    by_release = {r.version: r for r in releases}

    bucket_sets: dict[str, tuple[float, ...] | None] = {}
    for name, bounds in data["bucket_sets"].items():
        if isinstance(bounds, list):
            values = tuple(float(b) for b in bounds)
            if list(values) != sorted(set(values)):
                raise fail(f"bucket_sets.{name}", "bounds must be strictly increasing")
            bucket_sets[name] = values
        else:
            bucket_sets[name] = None  # bounds that depend on the server's configuration

    metrics: dict[str, MetricSpec] = {}
    for name, spec in data["metrics"].items():
        if spec["type"] not in TYPES:
            raise fail(f"metrics.{name}", f"unknown type {spec['type']!r}")
        unreleased = str(spec.get("unreleased", ""))
        if bool(unreleased) == bool(spec["variants"]):
            raise fail(
                f"metrics.{name}",
                "a series has variants, or (in no release yet) says where it was read in `unreleased`",
            )
        variants = []
        for j, v in enumerate(spec["variants"]):
            where = f"metrics.{name}.variants[{j}]"
            first_text, _, last_text = str(v["releases"]).partition("..")
            first, last = parse_release(first_text), parse_release(last_text)
            if first not in by_release or last not in by_release or first > last:
                raise fail(where, f"release range {v['releases']!r} is not a range of listed releases")
            if v["engine"] not in ENGINES:
                raise fail(where, f"unknown engine {v['engine']!r}")
            buckets = v.get("buckets")
            if (buckets is None) != (spec["type"] != "histogram") or (
                buckets is not None and buckets not in bucket_sets
            ):
                raise fail(where, "histograms, and only histograms, name a known bucket set")
            when = v.get("when", "always")
            if when not in ("always", "first_request", "hidden", "never") and not when.startswith("feature:"):
                raise fail(where, f"unknown condition {when!r}")
            variants.append(
                Variant(
                    engine=v["engine"],
                    first=first,
                    last=last,
                    labels=tuple(v["labels"]),
                    label_values={k: tuple(vals) for k, vals in v.get("label_values", {}).items()},
                    buckets=buckets,
                    when=when,
                )
            )
        metrics[name] = MetricSpec(name, spec["type"], tuple(variants), unreleased)

    signals = {}
    for key, s in data["signals"].items():
        series = tuple(s["series"])
        for name in series:
            if name not in metrics:
                raise fail(f"signals.{key}", f"series {name} is not in the metrics section")
            if metrics[name].type != s["type"]:
                raise fail(f"signals.{key}", f"series {name} is a {metrics[name].type}")
        signals[key] = SignalSpec(key, s["title"], s["type"], s["unit"], series)

    default = parse_release(str(data["default_release"]))
    if default not in by_release:
        raise fail("default_release", "it is not a listed release")
    return Catalog(
        releases=tuple(releases),
        default_release=default,
        bucket_sets=bucket_sets,
        metrics=metrics,
        signals=signals,
        _by_release=by_release,
    )
