"""promtool cases of the lifecycle alerts, from the log exporter's series: a slow start, a restart
loop against a crash or a slow but working start, and a release the bundle was not made for."""

from __future__ import annotations

from ..model import Alert
from ..scenario_kit import Case, Check, Expect, Inputs, minutes, series_text


def startup_slow_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    assert rule.threshold is not None
    labels = inputs.exporter_labels()
    labels.pop("job"), labels.pop("exporter_address")
    began = 60  # the start marker is read at t=60 s
    # No `for`: the first minute whose time() - 60 exceeds the limit fires.
    at = int((began + rule.threshold) // 60) + 1
    span = at + 3
    slow = Case("VllmStartupSlow warns past the expected start-up time")
    inputs.server_state(slow, span, f"0 {began}", ["unknown", "starting", "starting", "loading"])
    inputs.event_times(slow, span, startup_begin=f"0 {began}")
    slow.checks = [
        Check(at - 1, rule.name, []),
        Check(at, rule.name, [Expect(rule, labels, at * 60 - began)]),
    ]
    ready = Case("VllmStartupSlow stays silent once the server is ready")
    inputs.server_state(ready, span, f"0 {began} {began} 180", ["unknown", "starting", "loading", "ready"])
    inputs.event_times(ready, span, startup_begin=f"0 {began}")
    ready.checks = [Check(span - 1, rule.name, [])]
    return [slow, ready]


def restart_loop_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    starts = int(rule.threshold)
    labels = inputs.exporter_labels()
    labels.pop("job"), labels.pop("exporter_address")
    span = 2 * starts + 6
    # One start every two minutes, each failing; the n-th start lands at minute 2n - 1.
    counts = [min(starts, (m + 1) // 2) for m in range(span)]
    states = ["unknown"] + ["starting" if m % 2 else "failed_start" for m in range(1, span)]
    loop = Case(f"VllmRestartLoop fires at start number {starts} without a ready period")
    loop.add(
        series_text("vllm_log_events_total", {**inputs.exporter_labels(), "event": "startup_begin"}),
        " ".join(str(c) for c in counts),
    )
    inputs.server_state(loop, span, "0", states)
    at = 2 * starts - 1
    loop.checks = [Check(at - 1, rule.name, []), Check(at, rule.name, [Expect(rule, labels, starts)])]
    healed = Case("VllmRestartLoop stays silent when a start in the window became ready")
    healed.add(
        series_text("vllm_log_events_total", {**inputs.exporter_labels(), "event": "startup_begin"}),
        " ".join(str(c) for c in counts),
    )
    inputs.server_state(healed, span, "0", [*states[:2], "ready", *states[3:]])
    healed.checks = [Check(at, rule.name, [])]
    # The exporter restarts (its counter starts again at 0) just before the last start.
    reset = Case(f"VllmRestartLoop counts the {starts} starts across a restart of the log exporter")
    across = [*counts[: at - 1], 0, *(c - counts[at - 2] for c in counts[at:])]
    reset.add(
        series_text("vllm_log_events_total", {**inputs.exporter_labels(), "event": "startup_begin"}),
        " ".join(str(c) for c in across),
    )
    inputs.server_state(reset, span, "0", states)
    reset.checks = [Check(at - 1, rule.name, []), Check(at, rule.name, [Expect(rule, labels, starts)])]
    return [loop, healed, reset, *_restart_loop_windows(rule, inputs, labels)]


def _restart_loop_windows(rule: Alert, inputs: Inputs, labels: dict[str, str]) -> list[Case]:
    """The window from both ends, and a count that is not a whole number: slow starts spread
    over most of the window still make a loop; a ready period early in it still clears it; and
    the exporter's first scrape, already counting the start it read, extrapolates a little."""
    starts = int(rule.threshold or 0)
    window = minutes(inputs.cfg.alerts.restart_loop_window)
    begun = series_text("vllm_log_events_total", {**inputs.exporter_labels(), "event": "startup_begin"})
    # A large model that fails after loading: one start every `gap` minutes, the n-th at
    # 1 + (n - 1) * gap, the last of them more than half a window after the first.
    gap = window // (2 * (starts - 1)) + 1
    span = 1 + (starts - 1) * gap + 3
    counts = [0] + [min(starts, 1 + (m - 1) // gap) for m in range(1, span)]
    slow = Case(f"VllmRestartLoop fires on {starts} slow starts, one every {gap} minutes")
    slow.add(begun, " ".join(str(c) for c in counts))
    inputs.server_state(slow, span, "0", ["unknown"] + ["starting"] * (span - 1))
    at = 1 + (starts - 1) * gap
    slow.checks = [Check(at - 1, rule.name, []), Check(at, rule.name, [Expect(rule, labels, starts)])]
    # Ready until minute `up`, then `starts` failed starts two minutes apart, the last more than
    # half a window after the ready period ended.
    up = 3
    first = max(up + 1, up + window // 2 - 2 * (starts - 1) + 1)
    span = first + 2 * (starts - 1) + 3
    counts = [1] * first + [min(1 + starts, 2 + (m - first) // 2) for m in range(first, span)]
    crashed = Case(
        f"VllmRestartLoop stays silent on {starts} failed starts within alerts.restart_loop_window "
        "of a ready period: a crash, not a start that never works"
    )
    crashed.add(begun, " ".join(str(c) for c in counts))
    states = ["starting"] + ["ready"] * (up - 1) + ["dead"] * (first - up) + ["starting"] * (span - first)
    inputs.server_state(crashed, span, "0", states)
    crashed.checks = [Check(span - 1, rule.name, [])]
    # The exporter read the first start from the log before its first scrape.
    early = Case(
        f"VllmRestartLoop stays silent on {starts - 1} starts after the one the exporter's first scrape counts"
    )
    counts = [min(starts, 1 + m // 2) for m in range(2 * starts + 2)]
    early.add(begun, " ".join(str(c) for c in counts))
    inputs.server_state(early, len(counts), "0", ["starting"] * len(counts))
    early.checks = [Check(2 * (starts - 1) + 1, rule.name, [])]
    return [slow, crashed, early]


def version_drift_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    newest = inputs.res.source.release_versions[-1]
    major, minor = (int(p) for p in newest.split(".")[:2])
    other = f"{major}.{minor + 1}.0"
    drift = Case(f"VllmVersionDrift fires when the log announces vLLM {other}")
    drift.add(
        series_text("vllm_log_vllm_version_info", {**inputs.exporter_labels(), "version": other}), "1+0x3"
    )
    labels = inputs.exporter_labels()
    labels.pop("job"), labels.pop("exporter_address")
    drift.checks = [Check(1, rule.name, [Expect(rule, {**labels, "version": other}, 1)])]
    same = Case(f"VllmVersionDrift stays silent on a patch release of {newest}")
    same.add(
        series_text("vllm_log_vllm_version_info", {**inputs.exporter_labels(), "version": f"{newest}.9"}),
        "1+0x3",
    )
    same.checks = [Check(1, rule.name, [])]
    return [drift, same]
