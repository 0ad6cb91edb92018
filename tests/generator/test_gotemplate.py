"""The annotation renderer prints numbers the way Prometheus' template functions do. Expected strings
are what Prometheus 2.x prints (template_test.go, the Grafana/Prometheus docs); promtool checks the
rest end to end."""

from __future__ import annotations

import pytest
from vllm_obs.rules.gotemplate import go_float, humanize, humanize_duration, humanize_percentage, render


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
