"""/ready, which a Kubernetes readiness probe asks instead of vLLM's /health: the rule on the probe's
state (failed canaries, progress counters), counters from real expositions, a real probe against the
stand-in; the real SIGSTOP is in test_live_vllm.py, the overload in test_live_overload.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_obs.catalog import Catalog
from vllm_probe.cli import build_parser
from vllm_probe.metrics import ProbeMetrics
from vllm_probe.outcome import HTTP_4XX, HTTP_5XX, REFUSED, TIMEOUT, Outcome
from vllm_probe.progress import GROUPS, engine_progress

from tests.support.vllm_server import http_get

from .helpers import Reply, StandIn, completion_reply, hang_bound, running_probe, series

FAST = ("--interval", "0.5", "--timeout", "0.45")
OK = Outcome.success(0.1, 200)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
README = Path(__file__).resolve().parents[2] / "exporters" / "vllm_probe" / "README.md"


def fail(reason: str) -> Outcome:
    return Outcome.failure(reason, "test")


def replay(steps: list, n: int = 3) -> list[bool]:
    """Each (outcome, progress read after it) recorded in turn; readiness after each."""
    metrics = ProbeMetrics({"a": "m"}, lambda: 0.0)
    out = []
    for outcome, progress in steps:
        metrics.record_probe("a", "m", outcome, health_up=True, progress=progress)
        out.append(metrics.readiness("a", n)[0])
    return out


def test_without_progress_counters_readiness_follows_the_canary_alone() -> None:
    metrics = ProbeMetrics({"a": "m"}, lambda: 0.0)
    steps = [
        (fail(REFUSED), False),  # still loading: not before the first success
        (OK, True),
        (fail(TIMEOUT), True),
        (fail(HTTP_5XX), True),
        (fail(TIMEOUT), False),  # the third in a row
        (fail(TIMEOUT), False),
        (OK, True),  # back at the next success
        (fail(TIMEOUT), True),
        (fail(HTTP_4XX), True),  # turned away: the probe's problem, not the server's
        (fail(HTTP_4XX), True),
        (fail(HTTP_4XX), True),
        (fail(TIMEOUT), True),  # two server failures in a row, the 4xx between them not counted
        (fail(TIMEOUT), False),
    ]
    for i, (outcome, ready) in enumerate(steps):
        metrics.record_probe("a", "m", outcome, health_up=True)
        assert metrics.readiness("a", 3)[0] is ready, (i, metrics.readiness("a", 3))
    assert metrics.readiness("a", 3)[1] == (
        "3 probes in a row failed, the last 3 with no engine progress (not ready after 3)"
    )
    assert metrics.readiness("a", 4)[0] is True


def test_a_queue_keeps_the_target_ready_however_long_the_canary_times_out() -> None:
    # The first failure after a success has no reading to compare with: it counts as no progress.
    steps = [(OK, None), *((fail(TIMEOUT), 100.0 * k) for k in range(1, 40))]
    assert replay(steps) == [True] * 40
    metrics = ProbeMetrics({"a": "m"}, lambda: 0.0)
    for outcome, progress in steps:
        metrics.record_probe("a", "m", outcome, health_up=True, progress=progress)
    assert metrics.readiness("a", 3) == (
        True,
        "ready (39 probes in a row failed, the last 0 with no engine progress; not ready after 3)",
    )


def test_a_hang_makes_it_not_ready_at_the_nth_failure_with_the_counters_standing_still() -> None:
    # After a success: the first failure compares with nothing, then the counters stand at 500.
    assert replay([(OK, None), *[(fail(TIMEOUT), 500.0)] * 4]) == [True, True, True, False, False]
    # Queued, then hung: the failure that spans the hang's start still saw progress (N + 1 in all).
    queued_then_hung = [(OK, None), (fail(TIMEOUT), 100.0), (fail(TIMEOUT), 200.0)]
    hung = [(fail(TIMEOUT), 300.0)] * 4
    assert replay(queued_then_hung + hung) == [True] * 6 + [False]
    # Back at the next success, and at the first failure that shows progress.
    assert replay([(OK, None), *hung, (OK, None)])[-1] is True
    assert replay([(OK, None), *hung, (fail(TIMEOUT), 301.0)])[-2:] == [False, True]
    # N = 1: one failure after a success compares with nothing, as the canary alone.
    assert replay([(OK, None), (fail(TIMEOUT), 300.0)], n=1) == [True, False]


def test_counters_that_cannot_be_read_or_went_back_show_no_progress() -> None:
    # A failed read (None) counts as no progress; the next read compares with the last one made.
    assert replay([(OK, None), (fail(TIMEOUT), 100.0), (fail(TIMEOUT), None), (fail(TIMEOUT), 150.0)]) == [
        True
    ] * 4
    unread = [(OK, None), (fail(TIMEOUT), 100.0), (fail(TIMEOUT), None), (fail(TIMEOUT), None)]
    assert replay(unread) == [True, True, True, False]
    # Counters that went back: a new process, not an engine at work.
    assert replay([(OK, None), (fail(REFUSED), 900.0), (fail(TIMEOUT), 3.0), (fail(TIMEOUT), 3.0)]) == [
        True,
        True,
        True,
        False,
    ]


def test_a_4xx_neither_counts_nor_resets_and_loading_is_not_ready_whatever_the_counters() -> None:
    steps = [(OK, None), (fail(TIMEOUT), 10.0), (fail(HTTP_4XX), None), (fail(TIMEOUT), 10.0)]
    assert replay([*steps, (fail(TIMEOUT), 10.0)]) == [True, True, True, True, False]
    assert replay([(fail(TIMEOUT), 1.0), (fail(TIMEOUT), 50.0), (fail(TIMEOUT), 99.0)]) == [False] * 3


def test_the_help_and_the_readme_state_the_bound_of_the_defaults() -> None:
    parser = build_parser()
    defaults = (parser.get_default(k) for k in ("not_ready_after", "interval", "jitter", "timeout"))
    stated = f"{hang_bound(*defaults):g} s with the defaults"
    assert stated in " ".join(parser.format_help().split())
    assert stated in " ".join(README.read_text().replace("**", "").split())


# -- the counters, from real expositions ------------------------------------------------------


def exposition_sum(text: str, names: tuple[str, ...]) -> float:
    """The samples of `names` (after `vllm:` or `vllm_`, any platform prefix before), added up."""
    ends = tuple(f"vllm{sep}{name}" for name in names for sep in ":_")
    total = 0.0
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if not line.startswith("#") and name.endswith(ends):
            total += float(line.rsplit("}", 1)[-1].split()[0])
    return total


@pytest.mark.parametrize(
    "fixture",
    [
        "vllm-0.32.0-cpu-traffic.prom",
        "reference/vllm-0.9.0-v0.prom",
        "reference/vllm-0.34.0-v1.prom",
        "platforms/vllm-0.32.0-cpu-traffic-ray.prom",
        "platforms/vllm-0.32.0-cpu-traffic-ray-colon.prom",
        "platforms/vllm-0.32.0-cpu-traffic-kserve.prom",
    ],
)
def test_progress_is_prompt_plus_generated_tokens_of_every_label_set(fixture: str) -> None:
    text = (FIXTURES / fixture).read_text()
    expected = exposition_sum(text, GROUPS[0])
    assert expected > 0
    assert engine_progress(text) == expected


def test_without_token_counters_progress_falls_back_to_engine_steps_then_finished_requests() -> None:
    text = (FIXTURES / "vllm-0.32.0-cpu-traffic.prom").read_text()
    kept = [ln for ln in text.splitlines() if not any(n in ln for n in GROUPS[0])]
    steps = exposition_sum("\n".join(kept), GROUPS[1])
    assert steps > 0 and engine_progress("\n".join(kept)) == steps
    kept = [ln for ln in kept if GROUPS[1][0] not in ln]
    finished = exposition_sum("\n".join(kept), GROUPS[2])
    assert finished > 0 and engine_progress("\n".join(kept)) == finished
    assert engine_progress("\n".join(ln for ln in kept if GROUPS[2][0] not in ln)) is None
    assert engine_progress("<html>not found</html>") is None


def test_label_values_with_spaces_and_braces_do_not_hide_the_value() -> None:
    text = (
        'vllm:prompt_tokens_total{model_name="a } b",engine="0"} 12.0 1700000000000\n'
        "vllm:generation_tokens_total 30\n"
        "vllm:prompt_tokens_total_created 1.7e9\n"  # not a counter sample of its own
        'vllm:prompt_tokens_cached_total{engine="0"} 999\n'
    )
    assert engine_progress(text) == 42.0


def test_every_release_of_the_catalog_exposes_the_token_counters_from_the_start() -> None:
    catalog = Catalog.load()
    for release in catalog.releases:
        for engine in release.engines:
            families = catalog.families(release.version, engine, before_first_request=True)
            missing = {f"vllm:{name}" for name in GROUPS[0]} - set(families)
            assert not missing, (release.text, engine, missing)


# -- the endpoint: a real probe process -------------------------------------------------------


def ready(port: int, query: str = "") -> tuple[int, str]:
    return http_get(f"http://127.0.0.1:{port}/ready{query}")


@pytest.mark.slow
def test_the_endpoint_answers_503_for_a_failing_target_and_200_for_a_serving_one() -> None:
    failing = [completion_reply(), Reply(500, b"<html>oops</html>", "text/html")]
    with StandIn() as good, StandIn(script=failing) as bad:
        targets = ("--target", "good=" + good.url, "--target", "bad=" + bad.url, "--model", "standin")
        with running_probe(*targets, *FAST) as probe:
            bad_requests = series("vllm_probe_requests_total", target="bad", model_name="standin")
            probe.wait_for(lambda v: v.get(bad_requests, 0) >= 5, what="five probes of the failing target")
            assert ready(probe.port, "?target=good") == (200, "good: ready\n")
            status, text = ready(probe.port, "?target=bad")
            assert status == 503 and text.startswith("bad: ") and "probes in a row failed" in text
            status, text = ready(probe.port)
            assert status == 400 and "name a target" in text and "good" in text
            assert ready(probe.port, "?target=nope")[0] == 404
            assert http_get(f"http://127.0.0.1:{probe.port}/elsewhere")[0] == 404
            assert http_get(probe.url)[0] == 200


@pytest.mark.slow
def test_one_target_needs_no_name_and_is_not_ready_before_its_first_success() -> None:
    with StandIn(script=[Reply(500, b"starting", "text/plain")]) as loading:
        with running_probe("--target", loading.url, "--model", "standin", *FAST) as probe:
            requests = series(
                "vllm_probe_requests_total", target=f"127.0.0.1:{loading.port}", model_name="standin"
            )
            probe.wait_for(lambda v: v.get(requests, 0) >= 1, what="a first probe")
            status, text = ready(probe.port)
            assert status == 503 and "no probe has succeeded yet" in text


def exposition(tokens: int) -> Reply:
    body = f'vllm:prompt_tokens_total{{model_name="standin"}} 2\nvllm:generation_tokens_total {tokens}\n'
    return Reply(body=body.encode(), content_type="text/plain; version=0.0.4")


@pytest.mark.slow
def test_failing_canaries_leave_a_busy_target_ready_and_take_a_still_one_out() -> None:
    # Both answer the canary once, then 504 (a proxy giving up on a queued request); the busy
    # one's counters move between reads, the still one's stand at 7.
    failing = [completion_reply(), Reply(504, b"{}")]
    moving = [exposition(10 * k) for k in range(1, 200)]
    still_counters = [exposition(7)]
    with (
        StandIn(script=list(failing), metrics=moving) as busy,
        StandIn(script=list(failing), metrics=still_counters) as still,
    ):
        targets = ("--target", "busy=" + busy.url, "--target", "still=" + still.url, "--model", "standin")
        with running_probe(*targets, *FAST) as probe:
            for name in ("busy", "still"):
                requests = series("vllm_probe_requests_total", target=name, model_name="standin")
                probe.wait_for(lambda v, r=requests: v.get(r, 0) >= 6, what=f"six probes of {name}")
            status, text = ready(probe.port, "?target=busy")
            assert status == 200 and "probes in a row failed, the last 0 with no engine progress" in text
            status, text = ready(probe.port, "?target=still")
            assert status == 503 and "with no engine progress (not ready after 3)" in text
    # /metrics is read after each failed canary, not after the success (the last may be cut short).
    paths = [seen.path for seen in busy.seen]
    canaries = paths.count("/v1/completions")
    assert canaries - 2 <= paths.count("/metrics") <= canaries - 1, paths
