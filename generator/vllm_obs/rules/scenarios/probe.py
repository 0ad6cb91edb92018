"""promtool cases of the canary: a hung engine against a dead, saturated, sleeping or refusing one,
a probe down or turned away, and the failures' window from both ends."""

from __future__ import annotations

from ..model import Alert
from ..scenario_kit import (
    NEIGHBOUR,
    PROBE_ADDRESS,
    REPLICA,
    SPARSE_EVERY,
    Case,
    Check,
    Expect,
    Inputs,
    boundary,
    minutes,
    series_text,
    sparse_counter,
)


def hung_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    a = inputs.cfg.alerts
    span = minutes(rule.for_) + minutes(a.hung_window) + 5
    labels = inputs.probe_labels()
    labels.pop("job"), labels.pop("probe_address")
    hung = Case(f"VllmEngineHung fires when probes time out for {rule.for_} while /health answers 200")
    inputs.probe(hung, span, failing="timeout")
    inputs.probe_health(hung, span, 1)
    inputs.probe(hung, span, who=NEIGHBOUR)
    inputs.probe_health(hung, span, 1, who=NEIGHBOUR)
    # increase() needs two samples: the failures show from the second minute.
    hung.checks = boundary(rule.name, 1, rule.for_, [Expect(rule, labels, 0)])
    dead = Case("VllmEngineHung stays silent when /health fails too: the engine is dead, not hung")
    inputs.probe(dead, span, failing="timeout")
    inputs.probe_health(dead, span, 0)
    dead.checks = [Check(span - 1, rule.name, [])]
    refused = Case("VllmEngineHung stays silent when the probe is turned away (4xx), not hung")
    inputs.probe(refused, span, failing="http_4xx")
    inputs.probe_health(refused, span, 1)
    refused.checks = [Check(span - 1, rule.name, [])]
    fine = Case("VllmEngineHung stays silent while probes succeed")
    inputs.probe(fine, span)
    inputs.probe_health(fine, span, 1)
    fine.checks = [Check(span - 1, rule.name, [])]
    windowed = _sparse_and_recovered(rule, inputs, "timeout", labels)
    cases = [hung, dead, refused, fine, *windowed]
    if inputs.res.has("generation_tokens"):
        tokens = inputs.res["generation_tokens"]
        # A hung engine's counters freeze where they stood.
        for case in (hung, *windowed):
            inputs.tokens(case, span)
        saturated = Case(
            "VllmEngineHung stays silent on a saturated server: the probe times out in the queue "
            "while tokens keep coming"
        )
        inputs.probe(saturated, span, failing="timeout")
        inputs.probe_health(saturated, span, 1)
        inputs.counter(saturated, tokens, 600, span)
        saturated.checks = [Check(span - 1, rule.name, [])]
        cases.append(saturated)
    if inputs.res.has("prompt_tokens") and inputs.res.has("generation_tokens"):
        pooling = Case(
            "VllmEngineHung stays silent on a saturated embedding server: no token is generated, "
            "but prompts keep being processed"
        )
        inputs.probe(pooling, span, failing="timeout")
        inputs.probe_health(pooling, span, 1)
        inputs.tokens(pooling, span, prompt=6000)
        pooling.checks = [Check(span - 1, rule.name, [])]
        cases.append(pooling)
    if inputs.sleep_state(hung, span, awake=1):
        asleep = Case(
            "VllmEngineHung stays silent while the engine sleeps (sleep mode): its canary fails by design"
        )
        inputs.probe(asleep, span, failing="timeout")
        inputs.probe_health(asleep, span, 1)
        inputs.tokens(asleep, span)
        inputs.sleep_state(asleep, span, awake=0)
        asleep.checks = [Check(span - 1, rule.name, [])]
        cases.append(asleep)
    return cases


def probe_down_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    by_cause = {r.labels["cause"]: r for r in rules}
    down_rule, rejected_rule = by_cause["down"], by_cause["rejected"]
    span = minutes(down_rule.for_) + minutes(inputs.cfg.alerts.hung_window) + 5
    up = {"job": inputs.cfg.prometheus.probe_job, "instance": PROBE_ADDRESS, "probe_address": PROBE_ADDRESS}
    # The probe's own target: in the replica's cluster (and, as its sidecar, namespace and pod).
    up.update({k: v for k, v in inputs.at_target(REPLICA).items() if k != "instance"})
    down = Case(f"VllmProbeDown fires after {down_rule.for_} of failed scrapes of the probe")
    down.add(series_text("up", up), f"0+0x{span}")
    down.checks = boundary(down_rule.name, 0, down_rule.for_, [Expect(down_rule, up, 0)])
    rejected = Case(f"VllmProbeDown fires when vLLM answers the probe with 4xx for {rejected_rule.for_}")
    rejected.add(series_text("up", up), f"1+0x{span}")
    inputs.probe(rejected, span, failing="http_4xx")
    inputs.probe_health(rejected, span, 1)
    labels = inputs.probe_labels()
    labels.pop("job"), labels.pop("probe_address")
    rejected.checks = boundary(rejected_rule.name, 1, rejected_rule.for_, [Expect(rejected_rule, labels, 0)])
    fine = Case("VllmProbeDown stays silent while the probe is scraped and answered")
    fine.add(series_text("up", up), f"1+0x{span}")
    inputs.probe(fine, span)
    fine.checks = [Check(span - 1, down_rule.name, [])]
    windowed = _sparse_and_recovered(rejected_rule, inputs, "http_4xx", labels)
    for case in windowed:
        case.add(series_text("up", up), f"1+0x{span}")
    return [down, rejected, fine, *windowed]


def _sparse_and_recovered(rule: Alert, inputs: Inputs, failing: str, labels: dict[str, str]) -> list[Case]:
    """The failures' window from both ends: a probe every few minutes still fires (each failure
    stays in alerts.hung_window until the next), and a probe that answers again resolves at once
    though its failures are still in the window."""
    a = inputs.cfg.alerts
    hold, window = minutes(rule.for_), minutes(a.hung_window)
    span = hold + window + 5
    failures = series_text("vllm_probe_failures_total", {**inputs.probe_labels(), "reason": failing})
    success = series_text("vllm_probe_success", inputs.probe_labels())
    sparse = Case(f"{rule.name} fires when a probe every {SPARSE_EVERY} minutes fails each time")
    inputs.probe(sparse, span, failing=failing)
    inputs.probe_health(sparse, span, 1)
    sparse.add(failures, sparse_counter(span))
    # The first failure is counted at minute SPARSE_EVERY.
    sparse.checks = boundary(rule.name, SPARSE_EVERY, rule.for_, [Expect(rule, labels, 0)])
    back = hold + 2
    recovered = Case(
        f"{rule.name} resolves as soon as the probe succeeds again, its failures still in the window"
    )
    inputs.probe(recovered, span, failing=failing)
    inputs.probe_health(recovered, span, 1)
    recovered.add(success, f"0+0x{back - 1} 1+0x{span - back}")
    recovered.add(failures, f"0+4x{back - 1} {4 * (back - 1)}+0x{span - back}")
    recovered.checks = [
        Check(back - 1, rule.name, [Expect(rule, labels, 0)]),
        Check(back + 1, rule.name, []),
    ]
    # A window shorter than the sparse probe's interval (a fast test clock) has no such case.
    return [sparse, recovered] if window > SPARSE_EVERY else [recovered]
