"""lib/format.libsonnet writes numbers and durations exactly as the generator's Python does. Jsonnet's
std.format rounds in floating point, so these cases hold values where that shows (17-digit products
like 0.07 * 100, ties like 381.755 just below in binary, exponents)."""

from __future__ import annotations

import json
import random

import _jsonnet
import pytest
from vllm_obs.dashboards.panels.queries import regex_literal
from vllm_obs.mixin.format_lib import FORMAT_LIBSONNET
from vllm_obs.promql import number, seconds
from vllm_obs.rules.expressions import human_seconds, percent


def evaluate(expr: str) -> object:
    snippet = f"local f = import 'format.libsonnet'; {expr}"
    text = _jsonnet.evaluate_snippet(
        "test.jsonnet", snippet, import_callback=lambda _dir, rel: (rel, FORMAT_LIBSONNET.encode())
    )
    return json.loads(text)


EDGES = [
    0.05, 0.2, 0.5, 0.9, 0.99, 0.999, 0.9995, 0.99995, 20.0, 2.0, 3.0, 0.01, 0.07, 0.57, 0.955, 0.125,
    0.375, 2.5, 1.0, 1e-5, 0.0001, 1e-7, 1e15, 1e16, 123456789012345678.0, 0.1 + 0.2, 3.81755, 999999.5,
    9.9999995, 0.1234565, 0.1234575, 1234565.0, 0.7881164487252263, 999.9995, 5e-05, 0.0125, 913.1257,
]  # fmt: skip


def _values() -> list[float]:
    rng = random.Random(7)
    out = list(EDGES)
    for _ in range(60):
        out.append(round(rng.uniform(0, 10 ** rng.randint(-5, 7)), rng.randint(1, 9)))  # typed thresholds
        out.append(rng.uniform(0, 1))  # 16-17 significant digits
        out.append(rng.randint(1, 10**6) / 10 ** rng.randint(0, 8))
    return out


RENDERINGS = {
    "f.number(x)": number,
    "f.g(x)": lambda x: f"{x:g}",
    "f.humanSeconds(x)": human_seconds,
    "f.percent(x)": percent,
    "f.number(x * 100)": lambda x: number(x * 100),
    "f.fixedPercent(x, 0)": lambda x: f"{x:.0%}",
    "f.fixedPercent(x, 2)": lambda x: f"{x:.2%}",
    "f.number(f.budget(x))": lambda x: number(round(1 - x, 10)),
    "f.g(f.budget(x))": lambda x: f"{round(1 - x, 10):g}",
    "f.fixedPercent(f.budget(x), 2)": lambda x: f"{round(1 - x, 10):.2%}",
    "f.round(x, 10)": lambda x: round(x, 10),
}


@pytest.mark.parametrize("rendering", RENDERINGS, ids=str)
def test_numbers_read_as_the_generator_writes_them(rendering):
    values = _values()
    got = evaluate(f"[{rendering} for x in {json.dumps(values)}]")
    wrong = [
        (x, g, RENDERINGS[rendering](x))
        for x, g in zip(values, got, strict=True)
        if g != RENDERINGS[rendering](x)
    ]
    assert wrong == [], wrong[:5]


def test_std_format_alone_would_get_them_wrong():
    """Why the library exists: jsonnet's %.16g of 56.99999999999999 says 57."""
    assert evaluate("std.format('%.16g', 0.57 * 100)") != repr(0.57 * 100)
    assert evaluate("f.number(0.57 * 100)") == number(0.57 * 100) == "56.99999999999999"


def test_durations_read_in_seconds_as_promql_seconds_does():
    durations = ["5m", "1h30m", "2h8m37s", "500ms", "1d", "1w", "1y", "90s", "1m500ms", "115d17h46m40s"]
    assert evaluate(f"[f.seconds(d) for d in {json.dumps(durations)}]") == [
        int(seconds(d)) for d in durations
    ]


@pytest.mark.parametrize("bad", ["", "5", "m", "5x", "1h-2m"])
def test_a_duration_prometheus_would_refuse_is_an_error_that_names_it(bad):
    with pytest.raises(RuntimeError, match="is not a Prometheus duration like 5m"):
        evaluate(f"f.seconds({json.dumps(bad)})")


def test_job_names_become_the_regex_literals_the_dashboards_use():
    names = ["vllm", "vllm.prod", "llm/probe+canary", "a*b?(c)|[d]{e}^$\\f", "ns/vllm-0"]
    assert evaluate(f"[f.regexLiteral(n) for n in {json.dumps(names)}]") == [regex_literal(n) for n in names]


def test_extra_matchers_follow_the_job_matcher_or_vanish():
    assert evaluate(
        "[f.extraMatchers(''), f.extraMatchers('  '), f.extraMatchers(' namespace=\"llm\" ')]"
    ) == [
        "",
        "",
        ', namespace="llm"',
    ]
