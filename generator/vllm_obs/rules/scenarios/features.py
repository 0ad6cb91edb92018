"""promtool cases of the engine features: draft acceptance and engine spread either side of their
thresholds, rejected requests, and KV-connector failures held for their window."""

from __future__ import annotations

from ..model import Alert
from ..scenario_kit import (
    Case,
    Check,
    Expect,
    Inputs,
    boundary,
    held_checks,
    held_event,
    minutes,
    series_text,
)

# Minutes a case runs past its alert's `for`, so its last checks come after that has elapsed.
PAST_FOR = 5


def spec_decode_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    limit = rule.threshold
    span = minutes(rule.for_) + PAST_FOR
    res = inputs.res
    cases = []
    # Just below and just above the threshold, so a moved threshold fails one of them.
    for title, share in (("fires", round(limit * 0.9, 6)), ("stays silent", min(1.0, round(limit * 1.1, 6)))):
        case = Case(f"VllmSpecDecodeAcceptanceLow {title} at {share:g} of draft tokens accepted")
        if "spec_decode_acceptance_rate" in res.signals and "spec_decode_accepted_tokens" not in res.signals:
            inputs.gauge(case, res["spec_decode_acceptance_rate"], share, span)
            start = 0
        else:
            inputs.counter(case, res["spec_decode_draft_tokens"], 300, span)
            inputs.counter(case, res["spec_decode_accepted_tokens"], round(300 * share, 6), span)
            if "spec_decode_drafts" in res.signals:
                inputs.counter(case, res["spec_decode_drafts"], 100, span)
            start = 1  # rate() needs two samples
        if share < limit:
            case.checks = boundary(rule.name, start, rule.for_, [Expect(rule, inputs.result(), share)])
        else:
            case.checks = [Check(span - 1, rule.name, [])]
        cases.append(case)
    return cases


def rejected_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    sig = inputs.res["admission_rejections"]
    span = minutes(rule.for_) + PAST_FOR
    fire = Case(f"VllmRequestsRejected fires after {rule.for_} of rejections, naming the reason")
    inputs.counter(fire, sig, 60, span, reason="max_num_queued_reqs")
    inputs.counter(fire, sig, 0, span, reason="max_num_queued_tokens")
    # rate() divides what the window saw by the whole window: short of a full window, less.
    fire_at, window = 1 + minutes(rule.for_), minutes(inputs.cfg.alerts.rate_window)
    value = round(60 * min(fire_at, window) / (window * 60), 10)
    fire.checks = boundary(
        rule.name, 1, rule.for_, [Expect(rule, {**inputs.result(), "reason": "max_num_queued_reqs"}, value)]
    )
    quiet = Case("VllmRequestsRejected stays silent while nothing is rejected")
    inputs.counter(quiet, sig, 0, span, reason="max_num_queued_reqs")
    quiet.checks = [Check(span - 1, rule.name, [])]
    return [fire, quiet]


def kv_transfer_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    keys = {"nixl": "nixl_failed_transfers", "offload": "kv_offload_allocation_failures"}
    cases = []
    for rule in rules:
        connector = rule.labels["connector"]
        sig = inputs.res[keys[connector]]
        window = minutes(inputs.cfg.alerts.kv_transfer_window)
        fire = Case(
            f"VllmKVTransferFailures ({connector}) fires on the first failure, without waiting, "
            "and stays for alerts.kv_transfer_window"
        )
        labels = inputs.labels(signal=sig)
        fire.add(series_text(sig.name, labels), held_event(window))
        fire.checks = held_checks(rule.name, window, [Expect(rule, inputs.result(), 1)])
        quiet = Case(f"VllmKVTransferFailures ({connector}) stays silent without failures")
        quiet.add(series_text(sig.name, labels), "0+0x7")
        quiet.checks = [Check(5, rule.name, [])]
        cases += [fire, quiet]
    return cases


def imbalance_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    keys = {"kv": "kv_cache_usage", "queue": "requests_waiting"}
    cases = []
    for rule in rules:
        signal = rule.labels["signal"]
        sig = inputs.res[keys[signal]]
        limit = rule.threshold
        span = minutes(rule.for_) + PAST_FOR
        # Spreads just above and just below the threshold, so a moved threshold fails one of them.
        hot = 1.0 if signal == "kv" else limit * 2
        wide, narrow = round(limit * 1.1, 6), round(limit * 0.9, 6)
        fire = Case(f"VllmEngineImbalance ({signal}) fires when one engine is {wide:g} from its sibling")
        inputs.gauge(fire, sig, hot, span, engine="0")
        inputs.gauge(fire, sig, round(hot - wide, 6), span, engine="1")
        fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, inputs.result(), wide)])
        even = Case(f"VllmEngineImbalance ({signal}) stays silent {narrow:g} apart")
        inputs.gauge(even, sig, hot, span, engine="0")
        inputs.gauge(even, sig, round(hot - narrow, 6), span, engine="1")
        even.checks = [Check(span - 1, rule.name, [])]
        alone = Case(f"VllmEngineImbalance ({signal}) stays silent on a single engine")
        inputs.gauge(alone, sig, hot, span, engine="0")
        alone.checks = [Check(span - 1, rule.name, [])]
        cases += [fire, even, alone]
    return cases
