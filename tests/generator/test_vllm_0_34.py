"""vLLM 0.34.0 in the catalog: its new series, what tells a 0.34 server apart, and its bundle. The
exposition is built from the 0.34.0 sdist's metric definitions (constructed); without the render
histogram, registered by the first request, it is what an idle 0.34 server shows."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_obs.catalog import Catalog
from vllm_obs.cli import main as vllm_obs
from vllm_obs.source import from_exposition

from tests.support.bundles import generate, rule_exprs

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"
REFERENCE = FIXTURES / "reference" / "vllm-0.34.0-v1.prom"
CATALOG = Catalog.load()
RENDER = "vllm:request_render_duration_seconds"
TIERING = {
    "vllm:kv_offload_tiering_deferred_release_chunks",
    "vllm:kv_offload_tiering_deferred_release_hold_seconds",
}


def idle(text: str) -> str:
    """The exposition before the first request: the render histogram is not even declared."""
    return "".join(line for line in text.splitlines(keepends=True) if RENDER not in line)


def releases(text: str) -> list[str]:
    return [r.text for r in from_exposition(text, "saved", CATALOG).releases]


def render_panels(bundle: Path) -> list[dict]:
    dash = json.loads((bundle / "dashboards" / "vllm-instance.json").read_text())
    return [p for p in dash["panels"] if p.get("title") == "Render time"]


def test_0_34_is_the_newest_release_with_its_two_new_families():
    assert CATALOG.newest.text == "0.34.0"
    served = CATALOG.families((0, 34, 0), "v1")
    render = served[RENDER]
    assert render.labels == {"model_name", "request_type"}  # the API server's: no engine label
    assert render.when == "first_request" and render.buckets[0] == 0.0001 and render.buckets[-1] == 10
    assert RENDER not in CATALOG.families((0, 34, 0), "v1", before_first_request=True)
    assert RENDER not in CATALOG.families((0, 33, 0), "v1")
    assert not TIERING & set(served)  # only with the offloading connector's tiering manager
    assert TIERING <= set(CATALOG.families((0, 34, 0), "v1", features=("kv_offload_tiering",)))
    assert not TIERING & set(CATALOG.families((0, 33, 0), "v1", features=("kv_offload_tiering",)))
    # No family was removed: everything 0.33 can show, 0.34 can.
    every = {"include_conditional": True, "include_hidden": True}
    assert set(CATALOG.families((0, 33, 0), "v1", **every)) <= set(
        CATALOG.families((0, 34, 0), "v1", **every)
    )


def test_releases_lists_0_34_as_the_default(capsys):
    assert vllm_obs(["releases"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if "(default)" in line] == ["0.34.0     engines: v1 (default)"]


def test_a_0_34_server_is_told_by_its_render_histogram_and_still_recognised_idle():
    text = REFERENCE.read_text()
    assert releases(text) == ["0.34.0"]
    # Before its first request it shows what 0.32 and 0.33 show: 0.34 stays among the candidates.
    assert releases(idle(text)) == ["0.32.0", "0.33.0", "0.34.0"]


def test_the_render_panel_is_drawn_where_the_series_exists_and_no_rule_reads_it(tmp_path):
    served = generate(tmp_path / "served", "--metrics-file", str(REFERENCE))
    idle_file = tmp_path / "idle.prom"
    idle_file.write_text(idle(REFERENCE.read_text()))
    before = generate(tmp_path / "idle", "--metrics-file", str(idle_file))
    catalog = generate(tmp_path / "catalog", "--vllm-version", "0.34.0")
    for bundle in (served, catalog):
        (panel,) = render_panels(bundle)
        exprs = [t["expr"] for t in panel["targets"]]
        assert all(f"{RENDER}_bucket" in e and "request_type" in e and "engine=" not in e for e in exprs)
    assert render_panels(before) == []
    # A series the first request registers: no alert or recording waits for it.
    for bundle in (served, catalog):
        assert not [k for k, expr in rule_exprs(bundle).items() if RENDER in expr]


def test_the_default_bundle_is_the_0_34_catalog_bundle(tmp_path):
    default = generate(tmp_path / "default")
    pinned = generate(tmp_path / "pinned", "--vllm-version", "0.34.0")
    files = sorted(p.relative_to(default) for p in default.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(pinned) for p in pinned.rglob("*") if p.is_file())
    assert [f for f in files if (default / f).read_bytes() != (pinned / f).read_bytes()] == []
