"""The step-time fit recovers known coefficients, and the committed calibration of the real
vLLM CPU server is a usable, well-fitting engine for the replica model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks.alert_quality.calibrate import bucket_quantile, fit, observed_buckets
from benchmarks.alert_quality.replica import EngineParams, Replica, Request

CALIBRATION = Path(__file__).resolve().parents[2] / "benchmarks" / "alert_quality" / "calibration.yaml"


def test_the_fit_recovers_the_coefficients_of_exact_step_times():
    truth = {"step_base": 0.003, "per_prefill_token": 3e-5, "per_decode_seq": 2e-4, "per_context_token": 5e-7}
    runs = [
        {"prefill_tokens": p, "decoding": d, "context": c}
        for p, d, c in [
            (16, 0, 0),
            (256, 0, 0),
            (512, 0, 0),
            (0, 1, 100),
            (0, 4, 1600),
            (0, 8, 800),
            (0, 8, 3200),
        ]
    ]
    for run in runs:
        run["step_seconds"] = (
            truth["step_base"]
            + truth["per_prefill_token"] * run["prefill_tokens"]
            + truth["per_decode_seq"] * run["decoding"]
            + truth["per_context_token"] * run["context"]
        )
    theta, r2 = fit(runs)
    assert theta == pytest.approx(truth, rel=1e-6) and r2 == pytest.approx(1.0)
    assert all(run["fitted_seconds"] == pytest.approx(run["step_seconds"]) for run in runs)


def test_the_committed_calibration_fits_and_drives_the_replica_model():
    calibration = yaml.safe_load(CALIBRATION.read_text())
    assert calibration["r_squared"] >= 0.9
    assert {r["kind"] for r in calibration["runs"]} == {"prefill", "decode"}
    engine = EngineParams(**calibration["engine"])
    assert engine.step_base > 0 and engine.per_prefill_token > 0
    replica = Replica(engine)
    replica.submit(Request(arrival=0.0, prompt=512, output=1))
    replica.run_until(1)
    # A lone 512-token prefill as the server measured it, within the fit's error.
    measured = next(r for r in calibration["runs"] if r["kind"] == "prefill" and r["prompt"] == 512)
    assert replica.seen.time_to_first_token[0] == pytest.approx(measured["step_seconds"], rel=0.15)


def test_a_cost_the_noise_makes_negative_is_left_out_not_negative():
    """Steps that got cheaper with more sequences (noise): plain least squares gives a negative
    cost per decoding sequence; the fit leaves it at zero and refits the others."""
    rows = [
        (100, 0, 0, 0.004),
        (400, 0, 0, 0.013),
        (0, 1, 100, 0.0050),
        (0, 8, 100, 0.0030),
        (0, 4, 800, 0.0060),
    ]
    runs = [{"prefill_tokens": p, "decoding": d, "context": c, "step_seconds": t} for p, d, c, t in rows]
    theta, _ = fit(runs)
    assert theta["per_decode_seq"] == 0 and min(theta.values()) >= 0
    assert theta["per_context_token"] > 0 and theta["per_prefill_token"] == pytest.approx(2.4e-5, rel=0.05)


def test_quantiles_are_read_from_buckets_as_histogram_quantile_reads_them():
    cumulative = {0.1: 10.0, 0.5: 30.0, 1.0: 40.0, float("inf"): 40.0}
    assert bucket_quantile(0.5, cumulative) == pytest.approx(0.1 + 0.4 * (20 - 10) / 20)
    assert bucket_quantile(0.25, cumulative) == pytest.approx(0.1)
    assert bucket_quantile(0.95, cumulative) == pytest.approx(0.5 + 0.5 * (38 - 30) / 10)
    assert observed_buckets([0.1, 0.2, 2.0], [0.1, 0.5, float("inf")]) == {
        0.1: 1.0,
        0.5: 2.0,
        float("inf"): 3.0,
    }


def test_the_committed_replay_compares_the_same_traffic_three_ways():
    calibration = yaml.safe_load(CALIBRATION.read_text())
    loads = [r["load"] for r in calibration["replays"]]
    assert loads == sorted(loads) and loads[-1] > 1
    for r in calibration["replays"]:
        assert (
            r["locust"]["ttft"]["requests"] >= 0.95 * r["requests"] and r["locust"]["ttft"]["failures"] == 0
        )
        assert set(r["time_to_first_token"]["p95"]) == {"server", "model"}
    # Past the knee users wait seconds, in the model as under locust.
    past = calibration["replays"][-1]
    assert past["locust"]["ttft"]["p50"] > 1 and past["time_to_first_token"]["p50"]["model"] > 1
