"""Expressions and phrases several areas' alerts share."""

from __future__ import annotations

from ..config import AlertsSection
from ..errors import BundleError
from ..exporter_series import LOG, select
from ..promql import le_matcher, number, seconds, selector
from ..vocabulary import QUANTILES, SLO_WINDOWS, BurnTier, SloTarget, Vocabulary, by

# With alerts.max_num_seqs 0, running requests at their peak of this window stand for the limit.
PEAK_WINDOW = "1h"


def slots_full(v: Vocabulary) -> tuple[str, str]:
    """Running requests at the server's limit (alerts.max_num_seqs, or with 0 their peak of the
    last PEAK_WINDOW), and how a description names that limit."""
    running, limit = v.names.requests_running, v.cfg.alerts.max_num_seqs
    if limit > 0:
        return f"{running} >= {number(limit)}", f"--max-num-seqs ({number(limit)})"
    return (
        f"{running} > 0\nand\n{running} >= max_over_time({running}[{PEAK_WINDOW}])",
        f"their peak of the last {PEAK_WINDOW}",
    )


def queue_threshold(a: AlertsSection) -> tuple[float, str]:
    """VllmQueueDepthHigh's bound on requests waiting, and how a description names it: relative
    to the servers' slots where alerts.max_num_seqs says how many there are (vLLM's exposition does
    not: `cache_config_info` holds only the cache's settings), else the absolute threshold."""
    if a.max_num_seqs > 0:
        bound = round(a.queue_waiting_per_slot * a.max_num_seqs, 6)
        return (
            bound,
            f"{number(a.queue_waiting_per_slot)} per slot of --max-num-seqs {number(a.max_num_seqs)}",
        )
    return a.queue_waiting_threshold, ""


def human_seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:g}ms"
    return f"{value:g}s"


def percent(value: float) -> str:
    return f"{value * 100:g}%"


def traffic(v: Vocabulary, served: str | None = None) -> str:
    """A replica finished enough requests within rate_window to be judged (the traffic floor):
    `alerts.min_requests`, the canary's left out, counted on `served` (requests finished)."""
    window = int(seconds(v.cfg.alerts.rate_window))
    return f"{served or v.names.requests_finished} * {window} >= {number(v.cfg.alerts.min_requests)}"


def floor_per_minute(v: Vocabulary) -> float:
    """The traffic floor as requests a minute, for scenarios."""
    return v.cfg.alerts.min_requests / (seconds(v.cfg.alerts.rate_window) / 60)


def floor_judged_from(v: Vocabulary) -> int:
    """The first minute a scenario's traffic, starting at minute 0, fills the rate window the
    floor counts over: before it a steady rate above the floor still counts under it."""
    return int(seconds(v.cfg.alerts.rate_window) // 60)


def server_state(v: Vocabulary, states: str) -> str:
    """The log exporter's state gauge, for the states of `states` (alternatives: a|b)."""
    return select(LOG, "vllm_log_server_state", v.exporter, state=f"~{states}")


def since_start(v: Vocabulary) -> str:
    """Seconds since the current start began, per server, from the log."""
    begun = select(LOG, "vllm_log_last_event_timestamp_seconds", v.exporter, event="startup_begin")
    return f"time() - max by ({by(v.targets.target)}) ({begun})"


def _event_time(v: Vocabulary, event: str) -> str:
    target = by(v.targets.target)
    return (
        f"max by ({target}) ({select(LOG, 'vllm_log_last_event_timestamp_seconds', v.exporter, event=event)})"
    )


def planned(v: Vocabulary) -> str:
    """Servers whose log says they were stopped on purpose (within the grace), or are starting again after
    such a stop, or for the first time. Not a start after a crash: no shutdown logged since last ready,
    or an engine death, out-of-memory (vLLM logs a shutdown after those) or failed start since."""
    target = by(v.targets.target)
    since = select(LOG, "vllm_log_server_state_since_timestamp_seconds", v.exporter)
    grace = int(seconds(v.cfg.alerts.planned_stop_grace))
    ready_at, stopped_at = _event_time(v, "startup_complete"), _event_time(v, "shutdown")
    died_at = f"max by ({target}) ({select(LOG, 'vllm_log_last_event_timestamp_seconds', v.exporter, event='~engine_dead|oom|startup_failed')})"
    return (
        f"(\n  max by ({target}) ({server_state(v, 'stopping|stopped')}) == 1\n"
        f"  and on ({target})\n"
        f"  time() - max by ({target}) ({since}) < {grace}\n"
        f"  or\n"
        f"  max by ({target}) ({server_state(v, 'starting|loading')}) == 1\n"
        f"  and on ({target})\n"
        f"  (\n    {stopped_at} > on ({target}) {ready_at}\n"
        f"    and on ({target})\n    {died_at} < on ({target}) {ready_at}\n"
        f"    or\n    {ready_at} == 0\n  )\n)"
    )


def _tagged(parts: list[str]) -> str:
    """The parts, each under its own `part` label so `or` keeps them all."""
    if len(parts) == 1:
        return parts[0]
    return "\n  or\n  ".join(f'label_replace({p}, "part", "{i}", "", "")' for i, p in enumerate(parts))


def sum_of(parts: list[str], keep: str) -> str:
    """The sum of `parts` by `keep`, where any part may have no series (it then adds nothing)."""
    return f"sum by ({keep}) (\n  {_tagged(parts)}\n)"


def max_of(parts: list[str], keep: str) -> str:
    """The larger of `parts` by `keep`, where any part may have no series."""
    return f"max by ({keep}) (\n  {_tagged(parts)}\n)"


def minus(left: str, right: str, on: str) -> str:
    """`left` less `right` where `right` has a series to match (never below 0), else `left`."""
    return f"clamp_min(\n  {left}\n  - on ({on}) group_left ()\n  {right},\n  0\n)\nor\n{left}"


def check_bucket_bound(setting: str, buckets: tuple[float, ...], threshold: float, origin: str) -> None:
    """A latency threshold a histogram answers must be one of its bucket bounds: between two bounds an
    SLO's good-event count is a guess, and histogram_quantile interpolates within a bucket, so a
    threshold inside one fires on a guess."""
    if buckets and not any(abs(b - threshold) < 1e-12 for b in buckets):
        valid = ", ".join(f"{b:g}" for b in buckets)
        raise BundleError(
            f"{setting} = {threshold:g} is not a histogram bucket bound of {origin}; pick one of: {valid}."
        )


def unless_asleep(v: Vocabulary, keep: str, indent: str = "") -> str:
    """The clause that leaves out servers (by `keep`) with an engine put to sleep (sleep mode,
    `vllm:engine_sleep_state` awake = 0): it processes nothing and its canary fails by design, so
    it is neither hung nor stalled. Empty when the source has no sleep state (before 0.11.1)."""
    if not v.res.has("engine_sleep_state"):
        return ""
    awake = selector(v.res["engine_sleep_state"].name, v.vllm, 'sleep_state="awake"')
    return f"\n{indent}unless on ({keep})\n{indent}min by ({keep}) ({awake}) == 0"


def processed_tokens(v: Vocabulary, window: str, keep: str) -> str | None:
    """Tokens the engine processed within `window`, by `keep`: prompt tokens (all a pooling model such as
    an embedding server processes) plus generated ones, so any busy engine shows progress and a hung
    one shows none. None when the source has neither counter."""
    # One increase() per counter: increase() drops the name, so over a __name__ regex the two
    # results of one engine would collide.
    parts = [
        f"sum by ({keep}) (increase({selector(v.res[k].name, v.vllm)}[{window}]))"
        for k in ("prompt_tokens", "generation_tokens")
        if v.res.has(k)
    ]
    if not parts:
        return None
    return sum_of(parts, keep) if len(parts) > 1 else parts[0]


def replica_statistic(v: Vocabulary, key: str, stat: str) -> str:
    """The expression of a histogram's statistic per replica and model (a quantile of QUANTILES,
    or "mean") from its raw series: what a rule records where HISTOGRAMS asks, and what a
    runbook quotes where it does not."""
    by_replica = by(v.scope.instance_model)
    sig, rate = v.res[key], vllm_rates(v)
    if stat == "mean":
        return f"sum by ({by_replica}) ({rate(sig.sum)})\n/\nsum by ({by_replica}) ({rate(sig.count)})"
    return f"histogram_quantile({QUANTILES[stat]}, sum by ({by_replica}, le) ({rate(sig.bucket)}))"


def vllm_rates(v: Vocabulary):
    """rate(name{the vLLM selector, extra matchers}[the alerts' rate window]), for vLLM's series."""
    w, s = v.cfg.alerts.rate_window, v.vllm

    def rate_of(name: str, *extra: str) -> str:
        return f"rate({selector(name, s, *extra)}[{w}])"

    return rate_of


MODEL = "$model"  # where a looked-up query puts the alert's model matchers


def _model_query(v: Vocabulary, expr: str) -> str:
    """A printf that builds `expr` with the alert's model (its fleet labels, from $labels) at each
    MODEL; a bare series name gets them appended."""
    if MODEL not in expr:
        expr += "{" + MODEL + "}"
    labels = v.scope.fleet_model
    matchers = ", ".join(f"{label}=%q" for label in labels)
    text = expr.replace("%", "%%").replace(MODEL, matchers)
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    args = " ".join(f"$labels.{label}" for _ in range(expr.count(MODEL)) for label in labels)
    return f'printf "{text}" {args}'


def looked_up(v: Vocabulary, expr: str, fmt: str = "") -> str:
    """A description's template: `expr` queried for the alert's model, its first value piped
    through `fmt` (" | humanize", ' | printf "%.1f"'); empty when it has no result."""
    return f"{{{{ with {_model_query(v, expr)} | query }}}}{{{{ . | first | value{fmt} }}}}{{{{ end }}}}"


def listed(v: Vocabulary, expr: str, label: str, shown: str, before: str = "", sort: str = "") -> str:
    """Each result of `expr` for the alert's model as "label (shown)", comma-separated, after
    `before`; nothing at all when it has none. `shown`: a label's name, or "value" (a share)."""
    item = f"$r.Labels.{shown}" if shown != "value" else "$r.Value | humanizePercentage"
    order = f' | sortByLabel "{sort}"' if sort else ""
    return (
        f"{{{{ with {_model_query(v, expr)} | query{order} }}}}{before}"
        f"{{{{ range $i, $r := . }}}}{{{{ if $i }}}}, {{{{ end }}}}{{{{ $r.Labels.{label} }}}} ({{{{ {item} }}}})"
        "{{ end }}{{ end }}"
    )


def burn_lookups(v: Vocabulary, target: SloTarget, tier: BurnTier) -> dict[str, str]:
    """What a burn page's description queries (with MODEL): each window's burn as a multiple of the
    budget, the events a second over the long window, and (where every era feeds it) each
    replica's miss ratio now, the worst three."""
    slo, budget = target.slo, number(target.budget)
    model = "{" + MODEL + "}"
    out = {
        "long": f"{slo.miss(tier.long)}{model} / {budget}",
        "short": f"{slo.miss(tier.short)}{model} / {budget}",
        "rate": f"avg_over_time({slo.total_rate}{model}[{tier.long}])",
    }
    if slo.name == "availability" and v.res.reports_engine_errors:
        out["worst"] = f"sort_desc(topk(3, {v.names.request_failures}{model} > 0))"
    elif slo.signal is not None and target.threshold is not None and v.res.has(slo.signal):
        sig, inst, w = v.res[slo.signal], by(v.scope.instance_model), SLO_WINDOWS[0]
        matchers = MODEL  # the alert's job and model: the raw series of its replicas
        total = f"sum by ({inst}) (rate({sig.count}{{{matchers}}}[{w}]))"
        good = f"sum by ({inst}) (rate({sig.bucket}{{{matchers}, {le_matcher(target.threshold)}}}[{w}]))"
        out["worst"] = f"sort_desc(topk(3, ({total} - {good}) / {total} > 0))"
    return out


def capacity_lookups(v: Vocabulary) -> dict[str, str]:
    """What the capacity page's description queries (with MODEL): the model's replicas, how many
    it should run, and its floor (the fewest ready that do not page)."""
    n, p = v.names, v.cfg.paging
    model = "{" + MODEL + "}"
    return {
        "replicas": f"count({n.served_model}{model})",
        "expected": f"{n.replicas_expected}{model}",
        "floor": f"clamp_min({number(p.capacity_fraction)} * {n.replicas_expected}{model}, "
        f"{number(p.min_ready_replicas)})",
    }
