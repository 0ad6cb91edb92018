"""The Azure traces as the alert-quality benchmark reads them (skipped where ../shared is absent)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.alert_quality import traces
from tests.support.shared import shared_file


@pytest.fixture(scope="module", params=["conv", "code"])
def trace(request) -> traces.Trace:
    shared_file(f"traces/{traces.FILE.format(name=request.param)}")
    return traces.load(request.param)


def test_every_request_is_read_in_order(trace):
    rows = {"conv": 19_366, "code": 8_819}[trace.name]
    assert len(trace.arrival) == len(trace.prompt) == len(trace.output) == rows
    assert trace.arrival[0] == 0 and np.all(np.diff(trace.arrival) >= 0)
    assert 3_400 < trace.span < 3_600  # one hour, less its first and last minutes
    assert trace.prompt.min() >= 1 and trace.output.min() >= 1


def test_the_two_services_differ_as_their_traffic_does(trace):
    """Conversation: steady (a peak minute 1.5x the mean), long answers; code: bursty (idle
    minutes, a peak 4x the mean), a few tokens out."""
    per_minute = trace.per_minute()
    if trace.name == "conv":
        assert 5 < trace.mean_rate < 6 and per_minute.max() / trace.mean_rate < 2
        assert np.median(trace.output) > 100
    else:
        assert 2 < trace.mean_rate < 3 and per_minute.max() / trace.mean_rate > 3
        assert (per_minute == 0).any() and np.median(trace.output) < 20


def test_lengths_scaled_to_a_small_model_fit_its_context(trace):
    small = trace.scaled_lengths(8, max_model_len=1024)
    assert np.all(small.prompt + small.output <= 1024) and small.prompt.min() >= 1
    assert np.array_equal(small.arrival, trace.arrival)
    assert np.median(small.prompt) == pytest.approx(np.median(trace.prompt) / 8, rel=0.02)


def test_an_unknown_or_absent_trace_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="no trace 'chat'"):
        traces.load("chat")
    monkeypatch.setenv("VLLM_OBS_SHARED", str(tmp_path))
    with pytest.raises(traces.TraceMissing, match="is absent"):
        traces.load("conv")


@pytest.mark.parametrize("rate", [0.7, 40.0])
def test_arrivals_at_any_rate_keep_the_traces_lengths_and_cover_the_duration(trace, rate):
    """Below the trace's rate it is thinned, above it copies are laid over each other; the mean
    rate is the one asked for and the lengths are the trace's."""
    made = traces.arrivals(trace, rate=rate, duration=2 * 3600, seed=1)
    assert np.all(np.diff(made.time) >= 0) and made.time[0] >= 0 and made.time[-1] < 2 * 3600
    assert len(made.time) / (2 * 3600) == pytest.approx(rate, rel=0.1)
    assert np.median(made.prompt) == pytest.approx(np.median(trace.prompt), rel=0.1)
    assert np.median(made.output) == pytest.approx(np.median(trace.output), rel=0.25)
    again = traces.arrivals(trace, rate=rate, duration=2 * 3600, seed=1)
    assert np.array_equal(made.time, again.time)  # the seed decides


def test_the_code_traces_lulls_survive_thinning():
    """Code's idle minutes are part of its character (a model with no traffic must not alert)."""
    shared_file(f"traces/{traces.FILE.format(name='code')}")
    trace = traces.load("code")
    made = traces.arrivals(trace, rate=trace.mean_rate / 2, duration=3000, seed=2)
    per_minute = np.bincount((made.time // 60).astype(int), minlength=50)[:50]
    assert (per_minute == 0).sum() >= 3
