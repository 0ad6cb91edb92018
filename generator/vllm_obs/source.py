"""What a metrics source exposes: the series, their types, labels and histogram bounds. Built from a
text exposition or from a release's catalog entry, a `MetricSource` takes both kinds of bundle
through the same code downstream.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from .catalog import Catalog, ReleaseInfo
from .errors import BundleError
from .platforms import Naming, Platform, recognise
from .releases import minor_of, release_text

# Families that matter to the bundle. process_* vanish in multiprocess mode
# (--api-server-count > 1), so only panels use them, and only when the source has them.
_INTERESTING_PREFIXES = ("vllm:", "http_requests_total", "process_")


# A whole line of the text format: a comment, or a sample (name, optional label set, value,
# optional timestamp). A sample cut inside its value cannot be told from a shorter value; a
# histogram cut short is caught by its missing +Inf bucket, _sum or _count.
_COMPLETE_LINE = re.compile(
    r"#.*|[a-zA-Z_:][a-zA-Z0-9_:]*"
    r'(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?\s*)*\})?'
    r"\s+(?:[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)|[-+]?Inf|NaN)(?:\s+-?\d+)?\s*"
)


@dataclass(frozen=True)
class Family:
    name: str  # as PromQL names it: counters with _total, histograms by base name
    type: str  # counter | gauge | histogram
    labels: frozenset[str]  # without le
    buckets: tuple[float, ...] | None  # finite upper bounds, histograms only
    label_values: dict[str, frozenset[str]]


@dataclass(frozen=True)
class EngineGuess:
    engine: str
    releases: tuple[ReleaseInfo, ...]  # catalog releases consistent with what was seen

    def describe(self) -> str:
        if not self.releases:
            return f"engine {self.engine}, a release newer than the catalog"
        first, last = self.releases[0].text, self.releases[-1].text
        span = first if first == last else f"{first} to {last}"
        return f"engine {self.engine}, looks like vLLM {span}"


@dataclass(frozen=True)
class MetricSource:
    origin: str  # for messages and the generated files' headers
    families: dict[str, Family]
    engine: str
    summary: str  # one line: what the source is and what it looks like
    releases: tuple[ReleaseInfo, ...] = ()  # catalog releases the source matches (none: newer)
    platform: str | None = None  # key in catalog/platforms.yaml of the platform that serves vLLM
    identity: tuple[str, ...] = ()  # labels telling servers apart behind one target (Ray: ReplicaId)

    def has(self, name: str) -> bool:
        return name in self.families

    @property
    def release_versions(self) -> tuple[str, ...]:
        """The minor releases ("0.32") the source matches; their patches share the metric set."""
        minors = dict.fromkeys(release_text(minor_of(r.version)) for r in self.releases)
        return tuple(minors)


def from_catalog(
    catalog: Catalog, release: ReleaseInfo, engine: str | None = None, features: tuple[str, ...] = ()
) -> MetricSource:
    """The series a release exposes with default flags, plus those of the features named."""
    engine = engine or release.engines[0]
    unknown = sorted(set(features) - catalog.features)
    if unknown:
        raise BundleError(
            f"--feature {unknown[0]} is not a feature the catalog knows; pick from: "
            f"{', '.join(sorted(catalog.features))}."
        )
    if engine not in release.engines:
        raise BundleError(
            f"vLLM {release.text} has no {engine} engine (it runs {', '.join(release.engines)}); "
            "drop --engine or pick one of those."
        )
    specs = catalog.families(release.version, engine, features=features)
    families = {
        name: Family(
            name=name,
            type=spec.type,
            labels=frozenset(label for label in spec.labels if label != "*"),
            buckets=spec.buckets,
            label_values={k: frozenset(v) for k, v in spec.label_values.items()},
        )
        for name, spec in specs.items()
    }
    with_features = f", with {', '.join(sorted(features))}" if features else ""
    origin = f"the embedded catalog for vLLM {release.text} ({engine} engine{with_features})"
    return MetricSource(origin=origin, families=families, engine=engine, summary=origin, releases=(release,))


def from_exposition(text: str, origin: str, catalog: Catalog) -> MetricSource:
    """Parse a text exposition with prometheus_client's parser and check it is whole."""
    if not text.strip():
        raise BundleError(
            f"{origin} is empty; check that it is the vLLM /metrics page and that the server "
            "finished starting."
        )
    head = text.lstrip()[:200].lower()
    if head.startswith("<") or "<html" in head:
        raise BundleError(
            f"{origin} is an HTML page, not a Prometheus exposition; point at vLLM's /metrics "
            "path itself, not a proxy's login or error page."
        )
    if not text.endswith("\n"):
        # Editors and copy-paste often drop the final newline: a last line that is a whole
        # sample or comment is kept; one cut inside its label set or before its value is not.
        if not _COMPLETE_LINE.fullmatch(text.rsplit("\n", 1)[-1]):
            raise BundleError(
                f"{origin} ends in the middle of a line, so the exposition is truncated; "
                "save or fetch it again in full."
            )
        text += "\n"
    try:
        parsed = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise BundleError(
            f"{origin} is not valid Prometheus text format ({_first_line(exc)}); save or fetch "
            "the vLLM /metrics page again unmodified."
        ) from None

    naming = recognise(
        (_query_name(m) for m in parsed),
        {key for m in parsed for sample in m.samples for key in sample.labels},
        catalog.metrics,
        origin,
    )
    families, declared_only = _families(parsed, origin, naming)
    if not any(name.startswith("vllm:") for name in families):
        raise BundleError(
            f"{origin} has no vllm: series; point at a vLLM server's /metrics after it has started."
        )
    guess = guess_engine(families, catalog)
    families.update(_populated_later(declared_only, guess, catalog, naming))
    platform = naming.platform
    summary = f"{origin} ({platform.title + ', ' if platform else ''}{guess.describe()})"
    return MetricSource(
        origin=origin,
        families=families,
        engine=guess.engine,
        summary=summary,
        releases=guess.releases,
        platform=platform.key if platform else None,
        identity=_identity(platform, families),
    )


def _identity(platform: Platform | None, families: dict[str, Family]) -> tuple[str, ...]:
    """The first of the platform's identity labels that the vLLM series carry."""
    if platform is None:
        return ()
    seen = {label for name, f in families.items() if name.startswith("vllm:") for label in f.labels}
    first = next(((label,) for label in platform.identity if label in seen), ())
    return first + tuple(label for label in platform.keep if label in seen)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    detail = text[0] if text else type(exc).__name__
    return detail[:120]


def _query_name(metric) -> str:
    # The parser strips _total from counter family names; queries need it back.
    return metric.name + "_total" if metric.type == "counter" else metric.name


def _families(parsed: list, origin: str, naming: Naming) -> tuple[dict[str, Family], set[str]]:
    """The interesting families with samples, and those declared without any yet, keyed by vLLM's own
    name; each Family keeps the exposed name queries use. On a renaming platform (Ray) only recognised
    vLLM series count: its process_* series belong to the platform's agent.
    """
    families: dict[str, Family] = {}
    declared_only: set[str] = set()
    renaming = naming.platform is not None and naming.platform.renames
    for metric in parsed:
        exposed = _query_name(metric)
        name = naming.to_native.get(exposed) if renaming else exposed
        if name is None or not name.startswith(_INTERESTING_PREFIXES) or name.endswith("_created"):
            continue
        if not metric.samples:
            declared_only.add(name)
            continue
        labels: set[str] = set()
        values: dict[str, set[str]] = defaultdict(set)
        for sample in metric.samples:
            for key, value in sample.labels.items():
                if key != "le":
                    labels.add(key)
                    values[key].add(value)
        buckets = None
        if metric.type == "histogram":
            buckets = _histogram_bounds(metric, origin)
        families[name] = Family(
            name=exposed,
            type=metric.type if metric.type in ("counter", "gauge", "histogram") else "gauge",
            labels=frozenset(labels),
            buckets=buckets,
            label_values={k: frozenset(v) for k, v in values.items()},
        )
    return families, declared_only


def _populated_later(
    declared_only: set[str], guess: EngineGuess, catalog: Catalog, naming: Naming
) -> dict[str, Family]:
    """Declared-but-empty families the server fills as traffic arrives (http_requests_total until the
    first request), counted only when the catalog says this engine always exposes them: V0 also
    declares speculative-decoding series it fills only with that feature on.
    """
    out = {}
    for release in reversed(guess.releases or catalog.releases):
        specs = catalog.families(release.version, guess.engine)
        for name in declared_only & specs.keys():
            spec = specs[name]
            out.setdefault(
                name,
                Family(
                    name=naming.exposed(name),
                    type=spec.type,
                    labels=frozenset(label for label in spec.labels if label != "*"),
                    buckets=spec.buckets,
                    label_values={k: frozenset(v) for k, v in spec.label_values.items()},
                ),
            )
    return out


def _histogram_bounds(metric, origin: str) -> tuple[float, ...]:
    """Finite bucket bounds, after checking every child histogram is complete: an exposition has no end
    marker, so a file cut at a line boundary parses, and a missing +Inf bucket, _sum or _count shows it.
    """
    children: dict[tuple, dict[str, object]] = defaultdict(lambda: {"le": set()})
    for sample in metric.samples:
        key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        suffix = sample.name[len(metric.name) :]
        if suffix == "_bucket":
            children[key]["le"].add(float(sample.labels["le"]))  # type: ignore[union-attr]
        elif suffix in ("_sum", "_count"):
            children[key][suffix] = True
    bounds: set[float] = set()
    for child in children.values():
        le = child["le"]
        if math.inf not in le or "_sum" not in child or "_count" not in child:  # type: ignore[operator]
            raise BundleError(
                f"{origin} has an incomplete histogram {metric.name} (no +Inf bucket, _sum or "
                "_count), so the exposition is truncated; save or fetch it again in full."
            )
        bounds |= {b for b in le if math.isfinite(b)}  # type: ignore[union-attr]
    return tuple(sorted(bounds))


def guess_engine(families: dict[str, Family], catalog: Catalog) -> EngineGuess:
    """Tell the engine family (and a release range) from the series present: each catalog release and
    engine scores the known series it cannot expose plus the always-present ones it lacks; the best
    wins. A reported version is ignored: the family decides the names (0.8-0.10 run either).
    """
    observed = {n for n in families if n.startswith("vllm:") or n == "http_requests_total"}
    has_engine_label = any("engine" in f.labels for n, f in families.items() if n.startswith("vllm:"))
    scored = []
    for release in catalog.releases:
        for engine in release.engines:
            possible = catalog.families(
                release.version, engine, include_conditional=True, include_hidden=True
            )
            # A series the first request registers tells nothing when absent: an idle server.
            always = catalog.families(release.version, engine, before_first_request=True)
            known = {n for n in observed if n in catalog.metrics and catalog.metrics[n].variants}
            unexplained = len(known - possible.keys())
            missing = len(always.keys() - observed)
            label_clash = sum(
                1
                for n in known & possible.keys()
                if ("engine" in possible[n].labels) != ("engine" in families[n].labels)
                and "*" not in possible[n].labels
            )
            scored.append(((unexplained * 4 + label_clash * 4 + missing), release, engine))
    best = min(score for score, _, _ in scored)
    winners = [(r, e) for score, r, e in scored if score == best]
    engines = {e for _, e in winners}
    if len(engines) == 1:
        engine = engines.pop()
    else:
        # Only when the exposition is too sparse to tell: the engine label exists on V1 only.
        engine = "v1" if has_engine_label else winners[-1][1]
    releases = tuple(r for r, e in winners if e == engine)
    released = {n for n, spec in catalog.metrics.items() if spec.variants}
    if best > 0 and observed - released:
        # Series no release of the catalog has: a release newer than the catalog.
        newest = catalog.releases[-1]
        if newest in releases:
            releases = ()
    return EngineGuess(engine=engine, releases=releases)
