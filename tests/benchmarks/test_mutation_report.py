"""docs/mutation.md (written by `make mutation`) is the report of the rules and tests in this
checkout, and a fixed sample of its verdicts holds when judged again here."""

from __future__ import annotations

import re

import pytest

from benchmarks.mutation.bundles import DEFAULT, EVERYTHING, REPO, digest, generate_everything
from benchmarks.mutation.run import Bundle, run

pytestmark = pytest.mark.prometheus

REPORT = REPO / "docs" / "mutation.md"
SAMPLE = 4  # mutants of the default bundle, spread evenly over its rules (up to a minute each)


def reported() -> tuple[dict[str, str], set[str]]:
    """(bundle -> digest from the report's table, ids the report lists as survivors)."""
    text = REPORT.read_text("utf-8")
    digests = dict(re.findall(r"^\| ([^|]+?) \| `([0-9a-f]{16})` \|", text, re.M))
    # An id may hold backticks itself ("drop the left operand of `and`").
    survivors = set(re.findall(r"^- `(.+)`: (?:equivalent|\*\*survives)", text, re.M))
    return digests, survivors


def test_the_report_is_of_these_rules_and_tests(tmp_path):
    digests, _ = reported()
    assert DEFAULT in digests
    current = {DEFAULT: lambda: digest(REPO), EVERYTHING: lambda: digest(generate_everything(tmp_path))}
    for bundle, written in digests.items():
        assert written == current[bundle](), "docs/mutation.md is stale: run `make mutation` and commit it"


@pytest.mark.matrix
def test_a_fixed_sample_of_verdicts_holds():
    _, survivors = reported()
    bundle = Bundle(REPO)
    mutants = bundle.mutants()
    sample = mutants[:: max(1, len(mutants) // SAMPLE)][:SAMPLE]
    # A mutant promtool cannot load is in no count of the report; an untested one is a survivor.
    # The bundle's own tests pass (tests/generator/test_rules.py): no baseline run here.
    outcomes = [o for o in run(bundle, sample, workers=2, baseline=False) if o.verdict != "invalid"]
    assert len(outcomes) >= SAMPLE // 2
    judged = {o.mutant.id: "survived" if o.verdict == "untested" else o.verdict for o in outcomes}
    expected = {o.mutant.id: "survived" if o.mutant.id in survivors else "killed" for o in outcomes}
    assert judged == expected
