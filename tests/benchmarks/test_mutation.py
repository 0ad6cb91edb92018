"""The mutation run of the alert rules (benchmarks/mutation/): the mutants it makes."""

from __future__ import annotations

from benchmarks.mutation.bundles import REPO, generate_everything
from benchmarks.mutation.mutants import mutants_of
from benchmarks.mutation.run import Bundle

RULE = {
    "alert": "Demo",
    "expr": (
        'sum by (instance) (rate(x_total{job="a>1"}[5m])) > (6 * 0.01)\n'
        "and on (instance)\n"
        "y < 1\n"
        "unless on (instance)\n"
        "max_over_time(z[1h:1m]) >= 20"
    ),
    "for": "10m",
    "labels": {"severity": "warning"},
}


def expressions(kind: str) -> dict[str, str]:
    return {m.change: m.rule["expr"] for m in mutants_of(RULE) if m.kind == kind}


def test_thresholds_are_scaled_both_ways_and_0_or_1_become_a_half():
    changes = expressions("threshold")
    assert sorted(c.split(" (at")[0] for c in changes) == [
        "< 1 -> < 0.5",
        "> 6 -> > 4.02",
        "> 6 -> > 9",
        ">= 20 -> >= 13.4",
        ">= 20 -> >= 30",
    ]
    # The burn factor inside the parenthesis is what changes; the label value "a>1" never does.
    assert any("> (9 * 0.01)" in e for e in changes.values())
    assert all('job="a>1"' in e for e in changes.values())


def test_an_equality_is_a_match_not_a_threshold():
    """`== 79` (an XID code) or `== 0` (a target down): no threshold mutants."""
    rule = {"alert": "Demo", "expr": "xid == 79\nor\nup == 0", "labels": {"severity": "warning"}}
    assert [m for m in mutants_of(rule) if m.kind == "threshold"] == []


def test_for_is_halved_and_doubled():
    assert sorted(m.rule["for"] for m in mutants_of(RULE) if m.kind == "for") == ["20m", "5m"]


def test_keep_firing_for_is_halved_and_doubled_and_only_when_written():
    kept = {**RULE, "keep_firing_for": "10m"}
    mutants = [m for m in mutants_of(kept) if m.kind == "keep_firing_for"]
    assert sorted(m.rule["keep_firing_for"] for m in mutants) == ["20m", "5m"]
    assert all(m.rule["for"] == "10m" for m in mutants)
    assert not [m for m in mutants_of(RULE) if m.kind == "keep_firing_for"]


def test_each_operand_of_and_and_unless_is_dropped_with_its_modifier():
    dropped = sorted(expressions("operand").values())
    assert len(dropped) == 4
    assert (
        'sum by (instance) (rate(x_total{job="a>1"}[5m])) > (6 * 0.01)\n'
        "unless on (instance)\n"
        "max_over_time(z[1h:1m]) >= 20"
    ) in dropped  # the right operand of `and`
    assert "y < 1\nunless on (instance)\nmax_over_time(z[1h:1m]) >= 20" in dropped  # its left operand
    assert all("on (instance)\nand" not in e and not e.startswith("and") for e in dropped)


def test_each_range_is_halved_but_not_a_subquery_step():
    windows = sorted(expressions("window").values())
    assert any("[150s]" in e for e in windows)
    assert any("[30m:1m]" in e for e in windows)
    assert len(windows) == 2


def test_mutant_ids_are_unique_in_both_bundles(tmp_path):
    for root in (REPO, generate_everything(tmp_path)):
        ids = [m.id for m in Bundle(root).mutants()]
        assert len(ids) == len(set(ids))
