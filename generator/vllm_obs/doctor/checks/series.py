"""Check 2: every series the bundle's rules and panels read exists for the job it reads it from; a
missing one is explained, most specific cause first (docs/design.md). The vLLM job's catalog series
also tell the server's engine and release range, as `vllm-obs generate` does.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ... import __version__
from ...catalog import Catalog
from ...releases import release_text
from ...source import EngineGuess, Family, guess_engine
from ..bundle_view import BUILD_INFO, JobReads, base_name
from ..clients import ApiError
from ..context import Cause, Context, Presence
from ..findings import FAIL, INFO, OK, SKIP, WARN
from .presence import present

FAMILY = "names"
METADATA_LOOKUPS = 25  # missing names whose declaration is looked up; the rest stay unexplained


def run(ctx: Context) -> None:
    for scope in ctx.view.job_reads.values():
        if ctx.job_is_down(scope.job):
            for name in scope.names:
                ctx.causes.setdefault(name, ctx.job_down(scope.job))
            ctx.add(FAMILY, SKIP, scope.title, f"not checked: {ctx.job_down(scope.job).text}")
            continue
        _check_scope(ctx, scope)


def _check_scope(ctx: Context, scope: JobReads) -> None:
    catalog = ctx.catalog
    is_vllm = scope.role == "vLLM"
    asked = set(scope.names) | {n.removesuffix("_total") for n in scope.names if n.endswith("_total")}
    if is_vllm:
        for name in scope.names:
            base = base_name(name, catalog)
            asked |= {alt + name[len(base) :] for alt in _alternatives(catalog, base)}
        asked |= {n + "_count" if m.type == "histogram" else n for n, m in catalog.metrics.items()}
    try:
        found = present(ctx.prom, scope.selector, asked)
    except ApiError as exc:
        ctx.unchecked(FAMILY, scope.title, "ask Prometheus which series exist", exc)
        return
    for name, presence in found.items():
        ctx.presence[(scope.job, name)] = presence
    guess = _server_release(found, catalog) if is_vllm else None
    if is_vllm:
        _release_line(ctx, scope, guess)
    missing = sorted(n for n in scope.names if n not in found)
    declared = _declared(ctx, scope, missing)
    up = len(ctx.up_targets(scope.job)) if ctx.targets is not None else 0
    lines = []
    versions: list[set[str]] = []  # the job's build versions, asked once if needed

    def build_versions() -> set[str]:
        if not versions:
            versions.append(_build_versions(ctx, scope))
        return versions[0]

    for name in missing:
        status, message, action = _explain(ctx, scope, name, found, guess, declared, build_versions)
        ctx.causes[name] = Cause(status, f"{name} {message}")
        lines.append((status, name, message, action))
    partial = sorted(n for n in scope.names if n in found and up and found[n].instances < up)
    for name in partial:
        lines.append(
            (
                WARN,
                name,
                f"only on {found[name].instances} of {up} up targets (servers of another release, or no traffic "
                "on the others yet)",
                "check the release of the servers without it; regenerate the bundle if they differ",
            )
        )
    have = len(scope.names) - len(missing)
    # The summary only counts; the lines below it carry the warnings and failures.
    ctx.add(
        FAMILY,
        OK if not lines else INFO,
        scope.title,
        f"{have} of {len(scope.names)} series the bundle reads exist",
    )
    for status, name, message, action in lines:
        ctx.add(FAMILY, status, name, message, action)


def _explain(
    ctx: Context,
    scope: JobReads,
    name: str,
    found: dict[str, Presence],
    guess: EngineGuess | None,
    declared: set[str],
    build_versions: Callable[[], set[str]],
) -> tuple[str, str, str]:
    catalog = ctx.catalog
    stripped = name.removesuffix("_total")
    if stripped != name and stripped in found:
        return (
            FAIL,
            f"is missing but {stripped} exists: the counter is stored without its _total suffix",
            "keep counters' _total suffix on the way into Prometheus (an OpenTelemetry or remote-write "
            "translation, or a relabel rule, strips it); the bundle asks for the name vLLM exposes",
        )
    if scope.role == "vLLM":
        base = base_name(name, catalog)
        suffix = name[len(base) :]
        for alt in _alternatives(catalog, base):
            if alt + suffix in found:
                return (
                    FAIL,
                    f"is missing: the server has {alt + suffix} instead (vLLM renamed it: {base} is the name of "
                    f"{_span(catalog, base)}, {alt} of {_span(catalog, alt)})",
                    ctx.regenerate_advice(),
                )
        condition = _condition(catalog, base, guess)
        if condition and condition.startswith("feature:"):
            feature = condition.removeprefix("feature:")
            return (
                WARN,
                f"is missing: vLLM exports it only with the {feature} feature on, which this server does not use",
                "nothing is broken; what reads it stays empty until the feature is on",
            )
        if condition == "first_request":
            return (
                WARN,
                "is missing: vLLM registers it when the server handles its first request (no traffic yet)",
                "nothing is broken; send a request, then what reads it fills in",
            )
        if condition == "hidden":
            return (
                WARN,
                "is missing: this release hides it (only --show-hidden-metrics-for-version shows it)",
                f"{ctx.regenerate_advice()}, so the bundle reads the current name",
            )
        if guess and guess.releases and base in catalog.metrics and not _exposed_by(catalog, base, guess):
            return (
                FAIL,
                f"is missing: the server ({_describe(guess)}) does not have it; it is a series of "
                f"{_span(catalog, base)}",
                ctx.regenerate_advice(),
            )
    if name in declared:
        return (
            WARN,
            "has no sample yet: the server declares it, so it appears with the first request (no traffic yet)",
            "nothing is broken; send traffic, then what reads it fills in",
        )
    if scope.role in BUILD_INFO:  # one of the exporters that ship with vllm-obs
        versions = build_versions()
        if versions == {__version__}:
            return (
                WARN,
                f"is not exported yet: this {scope.role} (version {__version__}, the doctor's) exports it once "
                "it has something to report (a line of the log, a probe outcome)",
                "nothing is broken; it appears when that happens",
            )
        running = f" (it runs version {', '.join(sorted(versions))})" if versions else ""
        return (
            FAIL,
            f"is missing: the {scope.role} does not export it, so it is older (or newer) than the bundle{running}",
            f"run the {scope.role} of vllm-obs {__version__}, the version that checks this bundle",
        )
    what = "vLLM's /metrics" if scope.role == "vLLM" else f"the {scope.role}"
    return (
        FAIL,
        f"is missing: no target of job {scope.job} has it",
        f"check that the job scrapes {what}, that it is configured to export this series, and that no "
        "metric_relabel_configs drop it",
    )


def _build_versions(ctx: Context, scope: JobReads) -> set[str]:
    name = BUILD_INFO.get(scope.role)
    if name is None:
        return set()
    try:
        result = ctx.prom.query(f'group by (version) ({{__name__="{name}", {scope.selector}}})')
    except ApiError:
        return set()
    return {s["metric"].get("version", "") for s in result}


def _alternatives(catalog: Catalog, base: str) -> list[str]:
    """Other names of the signals the series carries (renames across releases)."""
    out: list[str] = []
    for signal in catalog.signals.values():
        if base in signal.series:
            out += [s for s in signal.series if s != base and s not in out]
    return out


def _span(catalog: Catalog, name: str) -> str:
    metric = catalog.metrics.get(name)
    if metric is None:
        return "no release in the catalog"
    variants = [v for v in metric.variants if v.when != "never"] or list(metric.variants)
    first = min(v.first for v in variants)
    last = max(v.last for v in variants)
    engines = "/".join(sorted({v.engine for v in variants}))
    return f"vLLM {release_text(first)} to {release_text(last)} ({engines})"


def _covering(catalog: Catalog, name: str, guess: EngineGuess | None) -> list:
    metric = catalog.metrics.get(name)
    if metric is None:
        return []
    if guess is None or not guess.releases:
        return list(metric.variants)
    return [
        v
        for v in metric.variants
        if v.engine == guess.engine and any(v.covers(r.version) for r in guess.releases)
    ]


def _condition(catalog: Catalog, name: str, guess: EngineGuess | None) -> str | None:
    """The catalog's `when` for the series on the server's release, unless it is always there."""
    variants = _covering(catalog, name, guess)
    if not variants or any(v.when == "always" for v in variants):
        return None
    return variants[0].when


def _exposed_by(catalog: Catalog, name: str, guess: EngineGuess) -> bool:
    return any(v.when != "never" for v in _covering(catalog, name, guess))


def _server_release(found: dict[str, Presence], catalog: Catalog) -> EngineGuess | None:
    families = {}
    for name, metric in catalog.metrics.items():
        sample = name + "_count" if metric.type == "histogram" else name
        if sample in found:
            labels = frozenset({"engine"}) if found[sample].engine_label else frozenset()
            families[name] = Family(name, metric.type, labels, None, {})
    if not any(n.startswith("vllm:") for n in families):
        return None
    return guess_engine(families, catalog)


def _release_line(ctx: Context, scope: JobReads, guess: EngineGuess | None) -> None:
    if guess is None:
        return
    bundle = ctx.view.release
    server = _describe(guess)
    if not guess.releases:
        ctx.add(
            FAMILY,
            WARN,
            "vLLM release",
            f"the servers' series are those of {server}; the bundle was generated for "
            f"{bundle.describe() if bundle else ctx.view.source}",
            "upgrade vllm-obs so its catalog knows the release, then regenerate the bundle against the server",
        )
        return
    if bundle is None:
        ctx.add(
            FAMILY,
            OK,
            "vLLM release",
            f"the servers' series are those of {server}; the bundle is for a newer one",
        )
        return
    overlap = bundle.engine == guess.engine and set(bundle.versions) & {r.text for r in guess.releases}
    if overlap:
        ctx.add(
            FAMILY,
            OK,
            "vLLM release",
            f"the servers' series are those of {server}, which the bundle was generated for",
        )
    else:
        ctx.add(
            FAMILY,
            WARN,
            "vLLM release",
            f"the servers' series are those of {server}, but the bundle was generated for {bundle.describe()}",
            ctx.regenerate_advice(),
        )


def _describe(guess: EngineGuess) -> str:
    if not guess.releases:
        return f"a vLLM release newer than the catalog ({guess.engine} engine)"
    first, last = guess.releases[0].text, guess.releases[-1].text
    return f"vLLM {first if first == last else f'{first} to {last}'} ({guess.engine} engine)"


def _declared(ctx: Context, scope: JobReads, names: list[str]) -> set[str]:
    """Names the job's targets declare (HELP/TYPE) without any sample: Prometheus keeps their metadata."""
    if not names:
        return set()
    match_target = "{" + scope.selector + "}"

    def declared(name: str) -> bool:
        base = base_name(name, ctx.catalog)
        for candidate in dict.fromkeys((base, name, name.removesuffix("_total"))):
            try:
                data = ctx.prom.get(
                    "/api/v1/targets/metadata",
                    {"match_target": match_target, "metric": candidate, "limit": "1"},
                )
            except ApiError:
                return False
            if data:
                return True
        return False

    asked = names[:METADATA_LOOKUPS]
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(declared, asked))
    return {n for n, yes in zip(asked, answers, strict=True) if yes}
