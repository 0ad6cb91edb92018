"""The annotation renderer prints numbers the way Prometheus' template functions do. Expected strings
are what Prometheus 2.x prints (template_test.go, the Grafana/Prometheus docs); promtool checks the
rest end to end."""

from __future__ import annotations

import pytest
from vllm_obs.catalog import Catalog
from vllm_obs.config import load_config
from vllm_obs.rules.expressions import MODEL, listed, looked_up
from vllm_obs.rules.gotemplate import go_float, humanize, humanize_duration, humanize_percentage, render
from vllm_obs.signals import resolve
from vllm_obs.source import from_catalog
from vllm_obs.vocabulary import vocabulary


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, "0s"),
        (899.99, "14m 59s"),
        (1, "1s"),
        (2.425, "2.425s"),
        (0.2375, "237.5ms"),
        (90061, "1d 1h 1m 1s"),
    ],
)
def test_humanize_duration(value, expected):
    assert humanize_duration(value) == expected


@pytest.mark.parametrize("value, expected", [(1234567.0, "1.235M"), (0.0555, "55.5m"), (0, "0"), (12, "12")])
def test_humanize(value, expected):
    assert humanize(value) == expected


def test_humanize_percentage_and_plain_values():
    assert humanize_percentage(0.1234567) == "12.35%"
    assert go_float(21.0) == "21" and go_float(0.86) == "0.86"


def test_render_conditionals_and_urlquery():
    template = "{{ $labels.instance }}{{ if $labels.model_name }} m={{ $labels.model_name | urlquery }}{{ end }} {{ $value }}"
    assert render(template, {"instance": "a:1", "model_name": "org/model x"}, 3) == "a:1 m=org%2Fmodel+x 3"
    assert render(template, {"instance": "a:1"}, 0.5) == "a:1 0.5"
    with pytest.raises(ValueError):
        render("{{ $value | printf }}", {}, 1)


def test_render_queries_for_the_alert_s_model():
    """A description's lookups (expressions.looked_up / listed) render as Prometheus fills them: each
    query's result, by the expression it was built from, and nothing for one without results."""
    catalog = Catalog.load()
    v = vocabulary(resolve(from_catalog(catalog, catalog.newest), catalog), load_config(None))
    burn = f"x:miss_1h{{{MODEL}}} / 0.001"
    worst = f'topk(3, y{{{MODEL}, le="2.5"}} > 0)'
    one_decimal = ' | printf "%.1f"'
    template = f"{looked_up(v, burn, one_decimal)}x{listed(v, worst, 'instance', 'value', '; worst: ')}."
    assert '{job=%q, model_name=%q, le=\\"2.5\\"}' in template
    lookups = {burn: [({}, 21.349)], worst: [({"instance": "a:1"}, 0.25), ({"instance": "b:1"}, 0.125)]}
    assert render(template, {}, 0, lookups) == "21.3x; worst: a:1 (25%), b:1 (12.5%)."
    assert render(template, {}, 0, {burn: [({}, 1.0)]}) == "1.0x."
