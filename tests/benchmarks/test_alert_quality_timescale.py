"""The bundle on a fast clock means what it does on the real one: the generator's promtool tests,
every time divided by the factor and input values unchanged, pass on the rewritten rules, and
fail when one part of the rewrite is left out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from vllm_obs.promql import seconds

from benchmarks.alert_quality import timescale
from tests.support.rule_slices import promtool_each_file_on_its_slice

REPO = Path(__file__).resolve().parents[2]
FACTOR = 10


def test_durations_are_divided_into_whole_milliseconds():
    assert timescale.duration("5m", 10) == "30s"
    assert timescale.duration("15s", 10) == "1s500ms"
    assert timescale.duration("3d", 30) == "2h24m"
    assert timescale.duration("1h30m", 2) == "45m"
    assert timescale.duration("0s", 10) == "0s"


def test_an_expression_reads_simulated_seconds_on_the_virtual_clock():
    expr = (
        "sum(rate(a_total[5m])) / sum(irate(b_total[1h:1m] offset 2m)) > 0.5 "
        "and time() - max(since) > 600 and timestamp(up) < since and deriv(g[10m]) > 0 "
        "and predict_linear(kv[15m], 900) >= 1 and increase(c_total[1h]) > 3"
    )
    assert timescale.expression(expr, 10, 100) == (
        "sum((rate(a_total[30s]) / 10)) / sum((irate(b_total[6m:6s] offset 12s) / 10)) > 0.5 "
        "and (100 + (time() - 100) * 10) - max(since) > 600 and (100 + (timestamp(up) - 100) * 10) < since "
        "and (deriv(g[1m]) / 10) > 0 and predict_linear(kv[1m30s], 90) >= 1 and increase(c_total[6m]) > 3"
    )


def test_any_spelling_is_rewritten_and_strings_are_left_alone():
    assert timescale.expression("rate (x[5m]) + time () + predict_linear (kv[15m], 900)", 10, 0) == (
        "(rate (x[30s]) / 10) + (0 + (time () - 0) * 10) + predict_linear(kv[1m30s], 90)"
    )
    assert timescale.expression("x OFFSET 5m", 10, 0) == "x offset 30s"
    for untouched in ('x{m=~"v[5m]", a="a@b"}', 'label_replace(x, "a", "(", "b", "")', "clock:offset and y"):
        assert timescale.expression(untouched, 10, 0) == untouched


@pytest.mark.parametrize("expr", ["hour() > 3", "x @ 100", "predict_linear(kv[15m], 60 * 15) > 1"])
def test_a_clock_the_rewrite_does_not_know_is_refused(expr):
    with pytest.raises(timescale.TimeScaleError):
        timescale.expression(expr, 10, 0)


def test_every_window_and_for_of_the_bundle_is_divided():
    for path in sorted((REPO / "alerts").glob("*.rules.yml")):
        original = yaml.safe_load(path.read_text())
        scaled = timescale.rules(yaml.safe_load(path.read_text()), FACTOR, 0)
        for before, after in zip(_rules(original), _rules(scaled), strict=True):
            windows = [seconds(w) for w in re.findall(r"\[([0-9a-z]+)\]", before["expr"])]
            assert [seconds(w) for w in re.findall(r"\[([0-9a-z]+)\]", after["expr"])] == [
                w / FACTOR for w in windows
            ]
            if "for" in before:
                assert seconds(after["for"]) == seconds(before["for"]) / FACTOR


def _rules(data: dict) -> list[dict]:
    return [r for g in data["groups"] for r in g["rules"]]


def scaled_rule_tests(folder: Path, factor: float) -> list[Path]:
    """The bundle's rules and its promtool tests on the fast clock, in `folder` (the virtual
    clock anchored at promtool's time 0, so the tests' timestamps are virtual stamps)."""
    (folder / "alerts").mkdir(parents=True)
    (folder / "tests" / "rules").mkdir(parents=True)
    for path in (REPO / "alerts").glob("*.rules.yml"):
        data = timescale.rules(yaml.safe_load(path.read_text()), factor, 0)
        (folder / "alerts" / path.name).write_text(yaml.safe_dump(data, sort_keys=False))
    out = []
    for path in sorted((REPO / "tests" / "rules").glob("*.test.yml")):
        data = yaml.safe_load(path.read_text())
        data["evaluation_interval"] = timescale.duration(data.get("evaluation_interval", "1m"), factor)
        for test in data["tests"]:
            test["interval"] = timescale.duration(test.get("interval", "1m"), factor)
            for case in test.get("alert_rule_test", []) + test.get("promql_expr_test", []):
                case["eval_time"] = timescale.duration(case["eval_time"], factor)
        target = folder / "tests" / "rules" / path.name
        target.write_text(yaml.safe_dump(data, sort_keys=False))
        out.append(target)
    return out


@pytest.mark.prometheus
@pytest.mark.matrix
def test_the_bundles_own_promtool_tests_pass_on_the_fast_clock(tmp_path):
    assert len(scaled_rule_tests(tmp_path, FACTOR)) >= 10
    failures = promtool_each_file_on_its_slice(tmp_path)
    assert not failures, "\n".join(failures)


@pytest.mark.prometheus
@pytest.mark.parametrize(
    "left_out, pattern, tests",
    [
        ("rates per wall second", "_PER_SECOND", "errors.test.yml"),
        ("time() and timestamp() on the wall clock", "_CLOCK", "lifecycle.test.yml"),
        ("range windows undivided", "_RANGE", "errors.test.yml"),
    ],
)
def test_the_promtool_tests_fail_without_each_part_of_the_rewrite(
    tmp_path, monkeypatch, left_out, pattern, tests
):
    monkeypatch.setattr(timescale, pattern, re.compile(r"(?!x)x"))  # matches nothing
    scaled_rule_tests(tmp_path, FACTOR)
    assert promtool_each_file_on_its_slice(tmp_path, only=(tests,), first_failure=True), (
        f"{tests} passed with {left_out}"
    )
