"""A simulated replica's /metrics: vLLM's families and buckets, filled with exactly what the
replica model observed, and read back as Prometheus reads them."""

from __future__ import annotations

import math

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.alert_quality.exposition import ReplicaMetrics
from benchmarks.alert_quality.replica import Replica
from benchmarks.fleet.exposition import load_template
from tests.benchmarks.test_alert_quality_replica import params, poisson, replay

TEMPLATE = load_template()


def scrape(metrics: ReplicaMetrics) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def series(scraped: dict, name: str, **labels: str) -> list[tuple[dict, float]]:
    return [
        (dict(key), value)
        for (n, key), value in scraped.items()
        if n == name and all(dict(key).get(k) == v for k, v in labels.items())
    ]


def one(scraped: dict, name: str, **labels: str) -> float:
    (match,) = series(scraped, name, **labels)
    return match[1]


def test_the_exposition_is_the_replicas_observations_bucketed_as_vllm_buckets_them():
    replica = Replica(params(kv_blocks=96))
    metrics = ReplicaMetrics("chat", started=1000.0, template=TEMPLATE)
    arrivals = poisson(2, 120, prompt=400, output=300, seed=3)
    replay(replica, arrivals[: len(arrivals) // 2], until=60)
    metrics.update(replica)  # twice: the second adds only what is new
    replay(replica, arrivals[len(arrivals) // 2 :], until=120)
    metrics.update(replica)
    s, scraped = replica.seen, scrape(metrics)
    ttft = s.time_to_first_token
    assert one(scraped, "vllm:time_to_first_token_seconds_count") == len(ttft) > 50
    assert math.isclose(one(scraped, "vllm:time_to_first_token_seconds_sum"), sum(ttft), rel_tol=1e-9)
    buckets = sorted(
        (float(labels["le"]), value)
        for labels, value in series(scraped, "vllm:time_to_first_token_seconds_bucket")
    )
    for le, count in buckets:  # cumulative, le inclusive, +Inf the count
        assert count == sum(1 for x in ttft if x <= le)
    assert one(scraped, "vllm:request_success_total", finished_reason="length") == s.finished
    assert one(scraped, "vllm:request_success_total", finished_reason="error") == 0
    assert one(scraped, "vllm:num_preemptions_total") == s.preemptions > 0
    assert one(scraped, "vllm:request_num_preemptions_sum") == sum(s.request_preemptions)
    assert one(scraped, "vllm:generation_tokens_total") == s.generation_tokens
    assert one(scraped, "vllm:iteration_tokens_total_count") == len(s.iteration_tokens)
    tpot = [
        d / (g - 1) for d, g in zip(s.request_decode_time, s.request_generation_tokens, strict=True) if g > 1
    ]
    assert math.isclose(
        one(scraped, "vllm:request_time_per_output_token_seconds_sum"), sum(tpot), rel_tol=1e-9
    )
    assert one(scraped, "vllm:request_inference_time_seconds_count") == s.finished
    assert one(scraped, "vllm:num_requests_running") == replica.num_running
    assert one(scraped, "vllm:num_requests_waiting_by_reason", reason="capacity") == replica.num_waiting
    assert one(scraped, "vllm:kv_cache_usage_perc") == replica.kv_cache_usage
    assert one(scraped, "vllm:time_to_first_token_seconds_created") == 1000.0
    # Every series of the capture, relabelled with this model, and nothing else.
    assert len(scraped) == len(scrape_captured()) and {dict(k).get("model_name") for (_, k) in scraped} <= {
        "chat",
        None,
    }


def scrape_captured() -> dict:
    out = {}
    for family in text_string_to_metric_families(TEMPLATE.renderer("x").render(np.zeros(len(TEMPLATE)))):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_a_fresh_replica_exposes_zeros_where_a_fresh_server_does():
    scraped = scrape(ReplicaMetrics("chat", started=5.0, template=TEMPLATE))
    assert one(scraped, "vllm:time_to_first_token_seconds_count") == 0
    assert one(scraped, "vllm:prompt_tokens_total") == 0
    assert one(scraped, "process_start_time_seconds") == 5.0


def test_a_draining_fleet_serves_the_same_metrics_and_keeps_no_observations():
    from benchmarks.alert_quality.fleet import Fleet
    from benchmarks.alert_quality.scenario import Model
    from tests.benchmarks.test_alert_quality_fleet import TEMPLATE, steady
    from tests.benchmarks.test_alert_quality_replica import params

    def fleet(drain: bool) -> Fleet:
        model = Model("chat", "llm-chat", 2, "conv", 1.0)
        return Fleet(
            [(model, params(), steady(3.0, 300))], started=0.0, seed=2, template=TEMPLATE, drain=drain
        )

    kept, drained = fleet(False), fleet(True)
    for t in range(10, 301, 10):
        kept.advance(t)
        drained.advance(t)
        for a, b in zip(kept.members, drained.members, strict=True):
            assert a.metrics.render() == b.metrics.render()
    assert kept.members[0].replica.seen.finished > 100
    for member in drained.members:
        seen = member.replica.seen
        assert not seen.inter_token_latency and not seen.request_prefill_time and not member.replica.done
