"""Recording rules: percentiles, rates and ratios that alerts and dashboards share."""

from __future__ import annotations

from ..exporter_series import PROBE, select
from ..promql import quote, selector
from ..signals import FOUNDATIONS
from ..vocabulary import HISTOGRAMS, QUANTILES, RecordedHistogram, Vocabulary, by
from .areas import capacity, features, gpu, slo_burn
from .expressions import max_of, minus, replica_statistic, sum_of, vllm_rates
from .model import Group, Recording


def recording_groups(v: Vocabulary) -> list[Group]:
    # Small groups, one chain of dependent rules each, so Prometheus spreads a fleet's evaluation over
    # them; a histogram's fleet quantiles share a group with the per-model bucket rate they read, so
    # they see this evaluation's rate (docs/design.md).
    parts = []
    for spec in HISTOGRAMS:
        replica, fleet = _histogram_recordings(v, spec)
        if replica and fleet:
            parts += [
                (f"vllm-obs.recording-{spec.short}", replica),
                (f"vllm-obs.recording-{spec.short}-fleet", fleet),
            ]
        else:
            parts.append((f"vllm-obs.recording-{spec.short}", replica + fleet))
    # Traffic in three groups (at a thousand replicas one group of all twenty took a second an
    # evaluation). The failure records read the request records of the group before; side by
    # side in Prometheus, at worst those of its previous evaluation, one interval off a 5m rate.
    parts += [
        ("vllm-obs.recording-requests", _request_recordings(v)),
        ("vllm-obs.recording-tokens", _token_recordings(v)),
        ("vllm-obs.recording-http", _http_recordings(v) + _failure_recordings(v)),
        ("vllm-obs.recording-saturation", _saturation_recordings(v)),
        ("vllm-obs.recording-features", features.recordings(v) + _lora_recordings(v)),
    ]
    parts.append((capacity.RECORDING_GROUP, capacity.recordings(v)))
    groups = [Group(name, tuple(rules)) for name, rules in parts if rules]
    groups += slo_burn.recording_groups(v)
    groups += gpu.recording_groups(v)  # empty unless gpu.enabled
    return groups


def _histogram_recordings(v: Vocabulary, spec: RecordedHistogram) -> tuple[list[Recording], list[Recording]]:
    """Of one histogram: its statistics per replica; and, where the spec asks, the per-model
    bucket rate with p50/p95/p99 per model read from it."""
    res = v.res
    key = spec.key
    if key not in res.signals:
        return [], []
    n = v.names
    sc = v.scope
    rate_of = vllm_rates(v)
    sig = res[key]
    replica = [
        Recording(n.mean(key) if q == "mean" else n.quantile(key, q), replica_statistic(v, key, q))
        for q in spec.replica
    ]
    if not spec.fleet:
        return replica, []
    fleet_buckets = n.bucket_rate(key, "job_model")
    fleet = [Recording(fleet_buckets, f"sum by ({by(sc.fleet_model)}, le) ({rate_of(sig.bucket)})")]
    fleet += [
        Recording(n.quantile(key, q, "job_model"), f"histogram_quantile({value}, {fleet_buckets})")
        for q, value in QUANTILES.items()
    ]
    return replica, fleet


def _request_recordings(v: Vocabulary) -> list[Recording]:
    """Requests finished, good and failed, and preemptions: rates and the ratios built on them.
    The canary probe's own requests are left out of every one (and of the HTTP records): they
    are not traffic, and an idle replica the probe keeps busy is still idle."""
    res, cfg = v.res, v.cfg
    n = v.names
    sc = v.scope
    inst = by(sc.instance_model)
    rate_of = vllm_rates(v)
    out: list[Recording] = []

    # Requests finished: the success counter (all finished_reason values) where the release
    # has it, else the count of the end-to-end or TTFT histogram. Good ones finished `stop` or
    # `length` (a pooling request finishes `stop`); `abort` is the client's own cancel.
    if "request_success" in res.signals:
        success = res["request_success"].name
        finished = f"sum by ({inst}) ({rate_of(success)})"
        good_reasons = 'finished_reason=~"stop|length"'
        good = f"sum by ({inst}) ({rate_of(success, good_reasons)})"
    else:
        key = "e2e_request_latency" if "e2e_request_latency" in res.signals else "time_to_first_token"
        finished = good = f"sum by ({inst}) ({rate_of(res[key].count)})"
    if cfg.prometheus.probes:
        out.append(Recording(n.probe_answered, _probe_answered(v)))
        # group_left keeps the job label of the left side (a one-to-one `on` would drop it).
        finished = minus(finished, n.probe_answered, by(sc.target_model))
        good = minus(good, n.probe_answered, by(sc.target_model))
    out.append(Recording(n.requests_finished, finished))
    out.append(Recording(n.fleet_requests_finished, f"sum by ({by(sc.fleet_model)}) ({n.requests_finished})"))
    out.append(Recording(n.requests_good, good))

    if res.reports_engine_errors:
        failed = rate_of(res["request_success"].name, 'finished_reason="error"')
        out.append(Recording(n.requests_failed, f"sum by ({inst}) ({failed})"))
        # 0/0 stays empty (no traffic, no verdict); a replica with traffic and no
        # errors reads 0, never "no data".
        out.append(Recording(n.request_errors, f"{n.requests_failed}\n/\n({n.requests_finished} > 0)"))

    if "preemptions" in res.signals:
        out.append(Recording(n.preemptions, f"sum by ({inst}) ({rate_of(res['preemptions'].name)})"))
        out.append(Recording(n.preemptions_per_request, f"{n.preemptions}\n/\n({n.requests_finished} > 0)"))
    return out


def _token_recordings(v: Vocabulary) -> list[Recording]:
    """Prompt and generated tokens per replica and per model, and the prefix-cache hit rate."""
    res, n, sc = v.res, v.names, v.scope
    inst = by(sc.instance_model)
    rate_of = vllm_rates(v)
    out: list[Recording] = []
    for key, record, fleet in (
        ("prompt_tokens", n.prompt_tokens, n.fleet_prompt_tokens),
        ("generation_tokens", n.generation_tokens, n.fleet_generation_tokens),
    ):
        if key in res.signals:
            out.append(Recording(record, f"sum by ({inst}) ({rate_of(res[key].name)})"))
            out.append(Recording(fleet, f"sum by ({by(sc.fleet_model)}) ({record})"))
    if res.has("prefix_cache_hits", "prefix_cache_queries"):
        out.append(
            Recording(
                n.prefix_cache_hits,
                f"sum by ({inst}) ({rate_of(res['prefix_cache_hits'].name)})\n"
                f"/\n(sum by ({inst}) ({rate_of(res['prefix_cache_queries'].name)}) > 0)",
            )
        )
    return out


def _probe_answered(v: Vocabulary) -> str:
    w, keyed = v.cfg.alerts.rate_window, by(v.scope.target_model)
    requests = select(PROBE, "vllm_probe_requests", v.probe)
    failures = select(PROBE, "vllm_probe_failures", v.probe)
    return f"sum by ({keyed}) (rate({requests}[{w}]))\n-\nsum by ({keyed}) (rate({failures}[{w}]))"


def _http_recordings(v: Vocabulary) -> list[Recording]:
    """HTTP on the inference handlers only (load-balancer polls of /health or /v1/models are
    not requests), the canary's own left out: requests, 5xx, and their ratio."""
    if "http_requests" not in v.res.signals:
        return []
    n, sc = v.names, v.scope
    rate_of = vllm_rates(v)
    http = v.res["http_requests"].name
    handlers = f"handler=~{quote(v.cfg.slo.inference_handlers)}"
    server = by(sc.instance)
    requests = f"sum by ({server}) ({rate_of(http, handlers)})"
    five = 'status="5xx"'
    errors = f"sum by ({server}) ({rate_of(http, handlers, five)})"
    if v.cfg.prometheus.probes:
        target, w = by(sc.target), v.cfg.alerts.rate_window
        # Probes that got an HTTP answer (a success, 4xx, 5xx or an unusable body) and 5xx ones.
        sent = select(PROBE, "vllm_probe_requests", v.probe)
        unanswered = select(PROBE, "vllm_probe_failures", v.probe, reason="~timeout|refused|error")
        probe_5xx = select(PROBE, "vllm_probe_failures", v.probe, reason="http_5xx")
        answered = f"(sum by ({target}) (rate({sent}[{w}])) - sum by ({target}) (rate({unanswered}[{w}])))"
        requests = minus(requests, answered, target)
        errors = minus(errors, f"sum by ({target}) (rate({probe_5xx}[{w}]))", target)
    return [
        Recording(n.http_inference_requests, requests),
        # A server that has answered no 5xx has no 5xx series at all: 0, not no data.
        Recording(n.http_inference_errors, f"{errors}\nor\n0 * {n.http_inference_requests}"),
        Recording(
            n.http_errors,
            f"{n.http_inference_errors}\n/\n({n.http_inference_requests} > 0)",
        ),
    ]


def _with_model(v: Vocabulary, per_server: str) -> str:
    """A per-server series (HTTP counters have no model_name) under each model the server served
    within the rate window: a server that swapped models, or serves two names, never makes the
    join fail (group_right: one server's value for each of its models)."""
    res, inst, w = v.res, by(v.scope.instance_model), v.cfg.alerts.rate_window
    gauge = selector(res[next(k for k in FOUNDATIONS[0] if k in res.signals)].name, v.vllm)
    return (
        f"{per_server}\n* on ({by(v.scope.instance)}) group_right ()\n"
        f"group by ({inst}) (last_over_time({gauge}[{w}]))"
    )


def _failure_recordings(v: Vocabulary) -> list[Recording]:
    """Requests that failed per replica, and their share of what it served: vLLM's count plus those
    admission control refused, or the handlers' 5xx, whichever is larger (the two overlap: a failed
    non-streaming request is both, a refused one answers 503)."""
    n, res = v.names, v.res
    inst = by(v.scope.instance_model)
    engine = []
    if res.reports_engine_errors:
        engine.append(n.requests_failed)
    if "admission_rejections" in res.signals:
        rejected = vllm_rates(v)(res["admission_rejections"].name)
        engine.append(f"sum by ({inst}) ({rejected})")
    failing, served = [], [n.requests_finished]
    if engine:
        failing.append(sum_of(engine, inst) if len(engine) > 1 else engine[0])
    if "http_requests" in res.signals:
        failing.append(_with_model(v, n.http_inference_errors))
        served.append(_with_model(v, n.http_inference_requests))
    if not v.counts_failures:
        return []
    return [
        Recording(n.requests_failing, max_of(failing, inst) if len(failing) > 1 else failing[0]),
        Recording(n.requests_served, max_of(served, inst) if len(served) > 1 else served[0]),
        Recording(n.request_failures, f"{n.requests_failing}\n/\n({n.requests_served} > 0)"),
    ]


def _saturation_recordings(v: Vocabulary) -> list[Recording]:
    """Queue, batch and KV-cache usage per replica, and the fleet's average usage."""
    res, cfg = v.res, v.cfg
    s = cfg.vllm_selector
    n = v.names
    sc = v.scope
    out: list[Recording] = []
    # Queue and batch sizes add up across engines (data-parallel ranks) of a replica.
    for key, record in (("requests_waiting", n.requests_waiting), ("requests_running", n.requests_running)):
        if key in res.signals:
            out.append(Recording(record, f"sum by ({by(sc.instance_model)}) ({selector(res[key].name, s)})"))
    # From vLLM 0.20 the waiting count includes deferred requests, held back on purpose (a KV
    # transfer, structured-output compilation): only those waiting for room say the scheduler's
    # limits are reached.
    if "requests_waiting_by_reason" in res.signals:
        capacity = selector(res["requests_waiting_by_reason"].name, s, 'reason="capacity"')
        out.append(
            Recording(n.requests_waiting_for_capacity, f"sum by ({by(sc.instance_model)}) ({capacity})")
        )

    # KV-cache usage is a fraction per engine: the fullest engine is what preempts, so
    # take the max; summing fractions across engines is meaningless.
    if "kv_cache_usage" in res.signals:
        out.append(
            Recording(
                n.kv_cache_usage,
                f"max by ({by(sc.instance_model)}) ({selector(res['kv_cache_usage'].name, s)})",
            )
        )
        out.append(Recording(n.fleet_kv_cache_usage, f"avg by ({by(sc.fleet_model)}) ({n.kv_cache_usage})"))
    return out


# vllm:lora_requests_info is set to the current time under a new label set whenever the
# adapters change, and the old label sets stay; its adapter lists are comma-joined names.
LORA_COUNT_LIMIT = 16  # adapters counted per list (max_lora is rarely larger)


def _lora_recordings(v: Vocabulary) -> list[Recording]:
    """The current adapter lists per server, and how many adapters each holds (up to the limit)."""
    res, cfg = v.res, v.cfg
    if "lora_requests" not in res.signals:
        return []
    n = v.names
    info = selector(res["lora_requests"].name, cfg.vllm_selector)
    server = by(v.scope.instance)
    out = [Recording(n.lora_latest, f"{info}\n== on ({server}) group_left ()\nmax by ({server}) ({info})")]
    for record, label in (
        (n.lora_running, "running_lora_adapters"),
        (n.lora_waiting, "waiting_lora_adapters"),
    ):
        # One series per adapter name (the i-th of the list) plus the bare list: count them, minus one.
        names = "\n  or ".join(
            f'label_replace({n.lora_latest}, "adapter", "$1", "{label}", "(?:[^,]*,){{{i}}}([^,]+)(?:,.*)?")'
            for i in range(LORA_COUNT_LIMIT)
        )
        out.append(
            Recording(record, f"count by ({server}, max_lora) (\n  {names}\n  or {n.lora_latest}\n) - 1")
        )
    return out
