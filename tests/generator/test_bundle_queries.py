"""A bundle never queries a series its source does not expose: each selector of its rules and
dashboards, parsed by a real PromQL parser, names a source series, a recorded one of the bundle, a
log exporter's, Prometheus' own (up, ALERTS), or for a GPU bundle a declared DCGM series."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_obs.catalog import Catalog

from tests.support.bundles import (
    dashboard_exprs,
    distinct_catalog_sources,
    generate,
    recorded_names,
    rule_exprs,
    selected_names,
)
from tests.support.exposed import PROMETHEUS_OWN, exporter_series, exposition_names

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"
CATALOG = Catalog.load()
# dcgm-exporter's pages are no vLLM source: the GPU layer's tests (test_gpu.py) serve them.
EXPOSITIONS = (
    sorted(p for p in FIXTURES.glob("*.prom") if not p.name.startswith("dcgm-exporter-"))
    + sorted((FIXTURES / "reference").glob("*.prom"))
    + sorted((FIXTURES / "platforms").glob("*.prom"))
)


def catalog_names(release: tuple[int, ...], engine: str) -> set[str]:
    out = set()
    for name, spec in CATALOG.families(release, engine).items():
        out |= {name + s for s in ("_bucket", "_sum", "_count")} if spec.type == "histogram" else {name}
    return out


def unexposed(
    bundle: Path, exposed: set[str], exporter: set[str], dcgm: frozenset[str] = frozenset()
) -> dict[str, set[str]]:
    """`dcgm`: the DCGM series a GPU bundle may read, those catalog/dcgm.yaml declares (none otherwise)."""
    allowed = exposed | recorded_names(bundle) | exporter | PROMETHEUS_OWN | dcgm
    problems = {}
    for where, expr in {**rule_exprs(bundle), **dashboard_exprs(bundle)}.items():
        missing = selected_names(expr) - allowed
        if missing:
            problems[where] = missing
    return problems


@pytest.fixture(scope="module")
def exporter(tmp_path_factory) -> set[str]:
    names = exporter_series(tmp_path_factory.mktemp("exporter"))
    assert "vllm_log_events_total" in names
    return names


@pytest.mark.parametrize("fixture", EXPOSITIONS, ids=lambda p: p.name)
def test_bundle_from_an_exposition_queries_only_what_it_exposes(fixture, tmp_path, exporter):
    bundle = generate(tmp_path / "bundle", "--metrics-file", str(fixture))
    assert unexposed(bundle, exposition_names(fixture.read_text()), exporter) == {}


@pytest.mark.parametrize("release, engine", distinct_catalog_sources(CATALOG))
def test_bundle_from_the_catalog_queries_only_what_the_release_exposes(release, engine, tmp_path, exporter):
    """Each release and engine whose families differ from every earlier one's."""
    bundle = generate(tmp_path / "bundle", "--vllm-version", release, "--engine", engine)
    version = tuple(int(p) for p in release.split("."))
    assert unexposed(bundle, catalog_names(version, engine), exporter) == {}


def test_releases_of_one_family_set_get_the_same_queries(tmp_path):
    """What lets the catalog tests run one release per family set: 0.20.0 and 0.22.0 expose the
    same families, and their bundles select the same series in every rule and panel."""
    assert ("0.20.0", "v1") in distinct_catalog_sources(CATALOG)
    assert ("0.22.0", "v1") not in distinct_catalog_sources(CATALOG)
    selected = []
    for release in ("0.20.0", "0.22.0"):
        bundle = generate(tmp_path / release, "--vllm-version", release, "--engine", "v1")
        exprs = {**rule_exprs(bundle), **dashboard_exprs(bundle)}
        selected.append({where: selected_names(expr) for where, expr in exprs.items()})
    assert len(selected[0]) > 100 and selected[0] == selected[1]


def test_the_check_itself_catches_a_renamed_series(tmp_path, exporter):
    """Guard against a check that cannot fail: a V1 0.13 bundle does not fit a 0.11 server."""
    bundle = generate(tmp_path / "bundle", "--vllm-version", "0.33.0")
    problems = unexposed(bundle, catalog_names((0, 9, 1), "v1"), exporter)
    missing = set().union(*problems.values())
    assert "vllm:kv_cache_usage_perc" in missing and "vllm:inter_token_latency_seconds_bucket" in missing
