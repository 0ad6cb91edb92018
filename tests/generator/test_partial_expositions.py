"""The generator never crashes on an exposition and never queries a series the input lacks: real
expositions with random parts removed (hypothesis) give a bundle of what is left or one BundleError
sentence; the public field pastes, through the CLI, give a bundle or one sentence and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from vllm_obs import bundle
from vllm_obs.catalog import Catalog
from vllm_obs.cli import main as vllm_obs
from vllm_obs.config import load_config
from vllm_obs.errors import BundleError
from vllm_obs.rules.model import Recording
from vllm_obs.source import from_exposition

from tests.support.bundles import selected_names, substitute
from tests.support.exposed import PROMETHEUS_OWN, exporter_series, exposition_names
from tests.support.shared import shared_file

pytestmark = pytest.mark.slow

METRICS = Path(__file__).parent.parent / "fixtures" / "metrics"
FIELD = METRICS / "field"
SHARED_GPU = "reference/field/vllm-nvidia-25.09-gpu.prom"  # a real GPU server, under ../shared
CATALOG = Catalog.load()
CONFIG = load_config(None)
REAL = sorted(
    [p for p in METRICS.glob("vllm-*.prom")]
    + sorted((METRICS / "reference").glob("*.prom"))
    + sorted((METRICS / "platforms").glob("*.prom"))
)


def compose(text: str) -> tuple[dict[str, str], set[str]]:
    """Every part of a bundle that reads the source, in memory (the text rendering is left out:
    it reads nothing more): (where -> PromQL, recorded names)."""
    parts = bundle.compose(from_exposition(text, "the exposition", CATALOG), CATALOG, CONFIG)
    exprs: dict[str, str] = {}
    recorded: set[str] = set()
    for group in (*parts.recording, *parts.assembled.groups):
        for i, rule in enumerate(group.rules):
            exprs[f"{group.name}:{i}"] = rule.expr
            if isinstance(rule, Recording):
                recorded.add(rule.record)
    for dash in parts.dashboards:
        values = {f"${var.name}": var.all_value for var in dash.variables if var.kind == "query"}
        for row in dash.rows:
            for panel in row.panels:
                for i, query in enumerate(panel.queries):
                    exprs[f"{dash.title} / {panel.title} / {i}"] = substitute(query.expr, values)
        for note in dash.annotations:
            exprs[f"{dash.title} / {note.name}"] = substitute(note.expr, values)
    return exprs, recorded


def sample_name(line: str) -> str:
    return line.split("{", 1)[0].split(" ", 1)[0]


class Exposition:
    """A real exposition as lines, and which family each line belongs to."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        owner = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                owner[sample.name] = family.name
        self.families = sorted(set(owner.values()))
        self.samples = [i for i, line in enumerate(self.lines) if line and not line.startswith("#")]
        self.owner = owner

    def family_of(self, line: str) -> str | None:
        if line.startswith("# "):
            parts = line.split(" ")
            name = parts[2] if len(parts) > 2 else ""
            return next((f for f in (name, name.removesuffix("_total")) if f in self.families), None)
        return self.owner.get(sample_name(line))

    def without(self, families: set[str], samples: set[int]) -> str:
        kept = [
            line
            for i, line in enumerate(self.lines)
            if i not in samples and self.family_of(line) not in families
        ]
        return "\n".join(kept) + "\n"


@pytest.fixture(scope="module")
def exporter(tmp_path_factory) -> set[str]:
    return exporter_series(tmp_path_factory.mktemp("exporter"))


def sources() -> list:
    out = [pytest.param(p, id=p.name) for p in REAL]
    out.append(pytest.param(None, id="shared-field-gpu"))
    return out


@pytest.mark.parametrize("path", sources())
def test_any_part_of_a_real_exposition_gives_a_bundle_of_what_is_there_or_one_sentence(path, exporter):
    path = path or shared_file(SHARED_GPU)
    exposition = Exposition(path.read_text())

    @settings(
        max_examples=6,
        derandomize=True,  # the same examples on every run: CI fails on a red test, never on luck
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(
        families=st.sets(st.sampled_from(exposition.families)),
        samples=st.sets(st.sampled_from(exposition.samples), max_size=4),
    )
    def check(families: set[str], samples: set[int]) -> None:
        text = exposition.without(families, samples)
        try:
            exprs, recorded = compose(text)
        except BundleError as exc:
            sentence = exc.message
            assert "\n" not in sentence and sentence.endswith("."), sentence
            return
        allowed = exposition_names(text) | recorded | exporter | PROMETHEUS_OWN
        unexposed = {
            where: names for where, expr in exprs.items() if (names := selected_names(expr) - allowed)
        }
        assert not unexposed, unexposed

    check()


def test_the_check_sees_a_query_for_a_dropped_series(exporter):
    """Guard against a check that cannot fail: the bundle of the whole capture selects the KV-cache
    usage, which the capture without that family lacks."""
    whole = (METRICS / "vllm-0.32.0-cpu-traffic.prom").read_text()
    exprs, recorded = compose(whole)
    lacking = Exposition(whole).without({"vllm:kv_cache_usage_perc"}, set())
    allowed = exposition_names(lacking) | recorded | exporter | PROMETHEUS_OWN
    assert any("vllm:kv_cache_usage_perc" in selected_names(expr) - allowed for expr in exprs.values())


@pytest.mark.parametrize("path", sorted(FIELD.glob("*.prom")), ids=lambda p: p.name)
def test_a_public_paste_gives_a_bundle_or_one_sentence(path, tmp_path, capsys):
    out = tmp_path / "bundle"
    code = vllm_obs(["generate", "--out", str(out), "--metrics-file", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    if code == 0:
        assert (out / "alerts" / "vllm-alerts.rules.yml").exists()
        return
    assert code == 2
    assert len(err) == 1 and err[0].startswith("vllm-obs: error: ") and err[0].endswith("."), err
    assert not out.exists(), "a refused source wrote nothing"
