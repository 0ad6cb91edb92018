"""The probe against the exporters' contract, both ways, with the real program: one
`vllm-probe` scraped after it probed a stand-in server through every kind of failure and a
success, and a port where nothing listens. The comparison is tests/exporter/contract_check.py.
"""

from __future__ import annotations

import pytest
import vllm_obs_contract
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from vllm_probe.contract import ContractError, closed_values, family

from tests.exporter.contract_check import parse, series, undeclared, unseen, with_value, without_value
from tests.support.vllm_server import free_port

from .helpers import Reply, StandIn, completion_reply, running_probe
from .helpers import series as sample

pytestmark = pytest.mark.slow

CONTRACT = vllm_obs_contract.probe()

UNREACHABLE: dict[str, str] = {}
"""Closed values no real run can show non-zero -> why, in one line. There are none: a new
one fails the test until someone decides it belongs here."""

# Short cycles, with a timeout a loopback answer meets even on a loaded machine.
FAST = ("--interval", "0.5", "--timeout", "0.45")

# One answer per failure reason the stand-in can give, in order, then a success.
SCRIPT = [
    Reply(500, b'{"error": "internal"}'),  # http_5xx
    Reply(401, b'{"error": "Unauthorized"}'),  # http_4xx
    Reply(body=b"<html><body>Bad gateway</body></html>", content_type="text/html"),  # bad_body
    Reply(reset=True),  # error
    Reply(delay=1.0, body=completion_reply().body),  # timeout
    completion_reply(),
]


def test_the_probe_serves_what_the_contract_declares_and_all_of_it() -> None:
    refused = f"http://127.0.0.1:{free_port()}"  # refused: nothing listens there
    with StandIn(script=list(SCRIPT)) as standin:
        with running_probe(
            "--target", "s=" + standin.url, "--target", "gone=" + refused, "--model", "m", *FAST
        ) as probe:
            succeeded = sample("vllm_probe_success", target="s", model_name="m")
            refusals = sample("vllm_probe_failures_total", target="gone", model_name="m", reason="refused")
            probe.wait_for(
                lambda v: v.get(succeeded) == 1 and v.get(refusals, 0) >= 1,
                what="every scripted failure, then a success, and a refused connection",
            )
            scrapes = [parse("vllm-probe", probe.text())]
    assert undeclared(CONTRACT, scrapes) == {}
    assert unseen(CONTRACT, scrapes) == set(UNREACHABLE)

    # The same scrape against doctored copies of the contract: each disagreement shows.
    bogus = with_value(CONTRACT, "vllm_probe_failures", "reason", "bogus")
    assert unseen(bogus, scrapes) == {series("vllm_probe_failures", "reason", "bogus"), *UNREACHABLE}
    lacking = without_value(CONTRACT, "vllm_probe_failures", "reason", "refused")
    assert set(undeclared(lacking, scrapes)) == {
        'vllm_probe_failures{reason="refused"} is not in the contract'
    }


# -- the probe's reading of the contract -----------------------------------------------------


def test_families_are_built_from_the_contract_and_only_from_it() -> None:
    built = family(CounterMetricFamily, "vllm_probe_failures")
    spec = CONTRACT["vllm_probe_failures"]
    assert (built.name, built.documentation, built.type) == (spec.name, spec.help, "counter")
    built.add_metric(["t", "m", "timeout"], 1)  # the contract's label names, in its order
    assert [s.labels for s in built.samples] == [{"target": "t", "model_name": "m", "reason": "timeout"}]
    with pytest.raises(KeyError, match="vllm_probe_bogus is not a family of vllm-probe"):
        family(GaugeMetricFamily, "vllm_probe_bogus")
    with pytest.raises(
        ContractError, match="vllm_probe_success is a gauge in the exporters' contract, not a counter"
    ):
        family(CounterMetricFamily, "vllm_probe_success")


def test_a_value_the_probe_names_must_be_in_the_contract() -> None:
    assert closed_values("reason", "vllm_probe_failures", named=("timeout",)) == CONTRACT[
        "vllm_probe_failures"
    ].values("reason")
    with pytest.raises(ContractError, match="has no value slow in the exporters' contract"):
        closed_values("reason", "vllm_probe_failures", named=("timeout", "slow"))
