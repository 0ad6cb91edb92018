"""The step-time fit recovers known coefficients, and the committed calibration of the real
vLLM CPU server is a usable, well-fitting engine for the replica model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks.alert_quality.calibrate import fit
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
