"""The doctor's PromQL reading against a real PromQL parser on real bundles: for every rule, panel
and variable query, the doctor's small tokenizer and the parser agree on metric names, label
matchers and range windows, and the canonical form survives being printed again."""

from __future__ import annotations

from pathlib import Path

import promql_parser
import pytest
from vllm_obs.catalog import Catalog
from vllm_obs.doctor.bundle_view import all_selectors, label_values_expr
from vllm_obs.doctor.bundle_view import load as load_bundle
from vllm_obs.doctor.grafana_vars import builtins, expand
from vllm_obs.doctor.selectors import PromQLSyntaxError, canonical, duration_seconds, selectors

from tests.support.bundles import generate, rule_exprs

VARIANTS = {
    "default": ((), None),
    "0.9.1": (("--vllm-version", "0.9.1"), None),
    "v0": (("--vllm-version", "0.6.3"), None),
    "multi-cluster": ((), {"prometheus": {"multi_cluster": True, "extra_selector": 'namespace="llm"'}}),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def bundle(request, tmp_path_factory) -> Path:
    args, config = VARIANTS[request.param]
    return generate(tmp_path_factory.mktemp(request.param) / "bundle", *args, config=config)


def _expressions(bundle: Path) -> list[str]:
    view = load_bundle(bundle, Catalog.load())
    placeholders = builtins("now-1h", "15s")
    out = list(rule_exprs(bundle).values())
    for dash in view.dashboards:
        out += [expand(q.expr, placeholders) for q in dash.queries]
        out += [e for e in (label_values_expr(v.query) for v in dash.variables) if e]
    return out


def _parsed(expr: str) -> list[tuple[str | None, frozenset, str | None]]:
    found = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.MatrixSelector):
            vs = node.vector_selector
            found.append((vs.name, _matchers(vs), promql_parser.display_duration(node.range)))
        elif isinstance(node, promql_parser.VectorSelector):
            found.append((node.name, _matchers(node), None))

    promql_parser.walk(promql_parser.parse(expr), pre_visit=visit)
    return found


def _matchers(vs) -> frozenset:
    ops = {"=": "=", "!=": "!=", "=~": "=~", "!~": "!~"}
    return frozenset(
        (m.name, ops[str(m.op).split(".")[-1]] if str(m.op) in ops else _op(m.op), m.value)
        for m in vs.matchers.matchers
        if m.name != "__name__"
    )


def _op(op: object) -> str:
    text = str(op)
    for name, symbol in (("NotRe", "!~"), ("Re", "=~"), ("NotEqual", "!="), ("Equal", "=")):
        if name in text:
            return symbol
    raise AssertionError(f"unknown matcher op {text}")


def test_selectors_agree_with_a_real_parser(bundle):
    exprs = _expressions(bundle)
    assert len(exprs) > 100
    for expr in exprs:
        theirs = _parsed(expr)
        # A matrix selector is visited as a matrix and again as its vector selector: drop the second.
        for name, matchers, _window in [t for t in theirs if t[2]]:
            theirs.remove((name, matchers, None))
        mine = [
            (
                s.name,
                frozenset((m.label, m.op, m.value) for m in s.matchers if m.label != "__name__"),
                s.window,
            )
            for s in selectors(expr)
        ]
        assert sorted(mine, key=repr) == sorted(theirs, key=repr), expr


def test_windows_are_read_in_seconds(bundle):
    for expr in _expressions(bundle):
        for sel in selectors(expr):
            if sel.window:
                assert duration_seconds(sel.window) > 0, (expr, sel.window)


def test_canonical_form_survives_reprinting(bundle):
    """What a printer changes (spacing, `x{}`, layout) must not make two expressions differ."""
    for expr in rule_exprs(bundle).values():
        printed = promql_parser.parse(expr).prettify()
        assert canonical(printed) == canonical(expr), (expr, printed)


def test_canonical_form_tells_a_changed_threshold_or_window():
    base = 'job_instance_model:x:p95_5m{job="vllm"} > 2 and on (job) rate(y{job="vllm"}[5m]) > 0.01'
    assert canonical(base) == canonical(base.replace(" > 2", ">2.0").replace("[5m]", "[300s]"))
    assert canonical(base) != canonical(base.replace("> 2", "> 3"))
    assert canonical(base) != canonical(base.replace("[5m]", "[10m]"))
    assert canonical(base) != canonical(base.replace('job="vllm"}[5m]', 'job="other"}[5m]'))
    # Matchers compare as a set, in any order.
    assert canonical('a{x="1", y="2"}') == canonical('a{y="2",x="1"}')


def test_aggregations_and_label_lists_are_not_series():
    expr = (
        "sum by (job, instance) (rate(a[5m])) / ignoring (le) group_left (model_name) count without (x) (b)"
    )
    assert [(s.name, s.window, s.function) for s in selectors(expr)] == [
        ("a", "5m", "rate"),
        ("b", None, None),
    ]


def test_broken_promql_is_refused():
    with pytest.raises(PromQLSyntaxError):
        selectors('a{job="x"')
    with pytest.raises(PromQLSyntaxError):
        selectors("a ? b")


def test_every_bundle_selector_is_read(bundle):
    view = load_bundle(bundle, Catalog.load())
    found = all_selectors(view)
    assert {where.split(" ", 1)[0] for where, _ in found} == {"rule", "panel", "variable"}
