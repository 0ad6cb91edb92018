"""The packages' layers: no import loop anywhere under generator/ and exporters/, and no
module imports one of a higher layer, so each layer can be read, tested and changed without
the ones above it."""

from __future__ import annotations

import pytest

from tests.support.imports import cycles, import_graph

# vllm_obs, lowest first; a module's layer is that of the longest prefix listed.
LAYERS: tuple[tuple[str, ...], ...] = (
    # what everything may use: errors, PromQL text, YAML, release numbers, file names, the
    # exporters' series
    (
        "vllm_obs",
        "vllm_obs.errors",
        "vllm_obs.promql",
        "vllm_obs.yamlfmt",
        "vllm_obs.releases",
        "vllm_obs.layout",
        "vllm_obs.exporter_series",
    ),
    # the inputs: the catalogs, a source and its signals, the config
    (
        "vllm_obs.catalog",
        "vllm_obs.platforms",
        "vllm_obs.source",
        "vllm_obs.signals",
        "vllm_obs.fetch",
        "vllm_obs.config",
        "vllm_obs.dcgm",
    ),
    # the vocabulary every artefact speaks, and the links alerts carry
    ("vllm_obs.vocabulary", "vllm_obs.links"),
    # the kits: rule shapes, scenario and runbook kits, dashboard specs and panel groups
    (
        "vllm_obs.rules",
        "vllm_obs.rules.model",
        "vllm_obs.rules.declaration",
        "vllm_obs.rules.scenario_kit",
        "vllm_obs.rules.runbook_kit",
        "vllm_obs.rules.expressions",
        "vllm_obs.rules.gotemplate",
        "vllm_obs.rules.gpu_inputs",
        "vllm_obs.dashboards",
        "vllm_obs.dashboards.spec",
        "vllm_obs.dashboards.panels",
    ),
    # the areas (peers) and the dashboards
    (
        "vllm_obs.rules.areas",
        "vllm_obs.dashboards.overview",
        "vllm_obs.dashboards.instance",
        "vllm_obs.dashboards.kv_cache",
        "vllm_obs.dashboards.failures",
    ),
    # what assembles them and renders them
    (
        "vllm_obs.rules.assembly",
        "vllm_obs.rules.recording",
        "vllm_obs.rules.rule_files",
        "vllm_obs.rules.promtool_files",
        "vllm_obs.rules.runbook_file",
        "vllm_obs.rules.alert_table",
        "vllm_obs.dashboards.build",
        "vllm_obs.dashboards.render",
    ),
    # the other artefacts, built from those
    (
        "vllm_obs.alertmanager_config",
        "vllm_obs.prometheus_config",
        "vllm_obs.kubernetes_manifests",
        "vllm_obs.autoscaling",
        "vllm_obs.mixin",
    ),
    ("vllm_obs.bundle", "vllm_obs.writer"),
    ("vllm_obs.doctor",),
    ("vllm_obs.cli",),
)


def layer(module: str) -> int:
    matches = [
        (len(prefix), i)
        for i, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    if not matches:
        raise AssertionError(f"{module} has no layer in tests/test_imports.py: give it one")
    return max(matches)[1]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_graph_sees_the_imports(graph) -> None:
    """The reader finds relative, absolute and function-level imports."""
    assert "vllm_obs.rules.assembly" in graph["vllm_obs.bundle"]
    assert "vllm_obs.doctor.run" in graph["vllm_obs.doctor.command"]  # imported inside a function
    assert "vllm_obs_contract" in graph["vllm_log_exporter.contract"]
    assert "vllm_probe.outcome" in graph["vllm_probe.metrics"]


def test_a_loop_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others(graph) -> None:
    assert cycles(graph) == []


def test_no_generator_module_imports_a_higher_layer(graph) -> None:
    upward = [
        f"{module} (layer {layer(module)}) imports {imported} (layer {layer(imported)})"
        for module, imports in sorted(graph.items())
        if module.startswith("vllm_obs.") or module == "vllm_obs"
        for imported in sorted(imports)
        if imported.startswith("vllm_obs.") and layer(imported) > layer(module)
    ]
    assert upward == []


def test_an_upward_import_is_found() -> None:
    assert layer("vllm_obs.bundle") > layer("vllm_obs.vocabulary")
    assert layer("vllm_obs.rules.areas.latency") > layer("vllm_obs.rules.scenario_kit")
    assert layer("vllm_obs.rules.assembly") > layer("vllm_obs.rules.areas.gpu")


def test_the_areas_are_peers(graph) -> None:
    """An area never imports another: what two areas share lives in the kits below them."""
    crossing = [
        (module, imported)
        for module, imports in graph.items()
        if module.startswith("vllm_obs.rules.areas.")
        for imported in imports
        if imported.startswith("vllm_obs.rules.areas.")
    ]
    assert crossing == []


def test_the_exporters_do_not_import_the_generator(graph) -> None:
    """The exporters ship without the generator's dependencies: they share only the contract."""
    reaching = [
        (module, imported)
        for module, imports in graph.items()
        if module.startswith(("vllm_log_exporter", "vllm_probe", "vllm_obs_contract"))
        for imported in imports
        if imported == "vllm_obs" or imported.startswith("vllm_obs.")
    ]
    assert reaching == []
