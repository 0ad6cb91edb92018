"""Ready for Prometheus 3 (only 2 runs here): its left-open ranges can leave one sample in a range of
one interval, and rate() nothing, so every range of a rule or panel spans at least four scrape
intervals (evaluation intervals over recorded series, steps in a subquery). See docs/prometheus-3.md."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import promql_parser
import pytest
import yaml
from vllm_obs.promql import seconds

from benchmarks.mutation.bundles import generate_everything
from tests.support.bundles import dashboard_exprs, generate, recorded_names, rule_exprs

REPO = Path(__file__).parents[2]
INTERVALS = 4


def short_ranges(expr: str, scrape: float, evaluation: float, recorded: set[str]) -> list[str]:
    """Each range or subquery of `expr` shorter than four of the intervals its points come at."""
    found: list[str] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.MatrixSelector):
            name = node.vector_selector.name or ""
            interval = evaluation if name in recorded else scrape
            if node.range.total_seconds() < INTERVALS * interval:
                found.append(f"{name}[{node.range}] over {interval:g}s points")
        elif isinstance(node, promql_parser.SubqueryExpr):
            step = (node.step or timedelta(seconds=evaluation)).total_seconds()
            if node.range.total_seconds() < INTERVALS * step:
                found.append(f"subquery [{node.range}:{step:g}s]")

    promql_parser.walk(promql_parser.parse(expr), pre_visit=visit)
    return found


@pytest.fixture(scope="module", params=["default", "everything", "drill-clock"])
def bundle(request, tmp_path_factory) -> Path:
    if request.param == "default":
        return REPO
    if request.param == "everything":
        return generate_everything(tmp_path_factory.mktemp("everything"))
    # The drills' clock: 2s scrapes and evaluations with one-minute rate windows.
    config = yaml.safe_load((REPO / "tests" / "drills" / "drill-config.yml").read_text())
    return generate(tmp_path_factory.mktemp("drill") / "bundle", config=config)


def _intervals(bundle: Path) -> tuple[float, float]:
    prometheus = yaml.safe_load((bundle / "prometheus" / "prometheus.yml").read_text())["global"]
    return seconds(prometheus["scrape_interval"]), seconds(prometheus["evaluation_interval"])


def test_every_range_in_rules_and_panels_spans_four_intervals(bundle):
    scrape, evaluation = _intervals(bundle)
    recorded = recorded_names(bundle)
    exprs = {**rule_exprs(bundle), **dashboard_exprs(bundle)}
    assert len(exprs) > 100
    short = {
        where: found
        for where, expr in exprs.items()
        if (found := short_ranges(expr, scrape, evaluation, recorded))
    }
    assert not short, f"ranges under {INTERVALS} intervals (empty under Prometheus 3): {short}"


@pytest.mark.parametrize(
    "expr, short",
    [
        ("rate(x_total[30s])", True),  # two 15s scrapes
        ("rate(x_total[1m])", False),
        ("max_over_time(job:x:rate5m[45s])", True),  # a recorded series, 15s evaluations
        ("max_over_time(x[10m:5m])", True),  # two subquery steps
        ("max_over_time(x[1h:1m])", False),
    ],
)
def test_the_check_finds_a_short_range(expr, short):
    assert bool(short_ranges(expr, 15, 15, {"job:x:rate5m"})) is short
