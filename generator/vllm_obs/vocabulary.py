"""The bundle's shared vocabulary: recorded-series names, scopes, SLOs and burn tiers. `build_bundle`
builds one `Vocabulary` per bundle for rules, dashboards, routing, runbooks and the mixin, so no
artefact rebuilds names; its naming and levels are in docs/design.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .config import BundleConfig
from .promql import quote, seconds
from .signals import Resolution


@dataclass(frozen=True)
class Scope:
    """The labels every aggregation keeps: `replica` tells one server from another (`instance` for a
    scraped vLLM); `cluster` names the cluster a series comes from, or is None for one cluster.
    """

    replica: str = "instance"
    cluster: str | None = None
    # Labels that tell servers apart behind one scrape target, on platforms that put several
    # on one (a Ray node's metrics port serves every Serve replica on that node: ReplicaId).
    identity: tuple[str, ...] = ()
    # Kubernetes (pod labels on): the namespace splits the fleet as the cluster does, so every
    # fleet-wide rule is per namespace; the pod goes with every target, so an alert names it.
    # The pod's sidecars (log exporter, probe) carry the same namespace and pod, so joins hold.
    namespace: str | None = None
    pod: str | None = None

    @property
    def partitions(self) -> tuple[tuple[str, str], ...]:
        """(label, dashboard variable) of each label that splits the fleet: cluster, namespace."""
        out = [(self.cluster, "cluster")] if self.cluster else []
        return tuple(out + ([(self.namespace, "namespace")] if self.namespace else []))

    def _keep(self, *labels: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*(label for label, _ in self.partitions), *labels]))

    @property
    def _pod(self) -> tuple[str, ...]:
        return (self.pod,) if self.pod else ()

    @property
    def instance_model(self) -> tuple[str, ...]:
        return self._keep("job", self.replica, *self._pod, *self.identity, "model_name")

    @property
    def fleet_model(self) -> tuple[str, ...]:
        return self._keep("job", "model_name")

    @property
    def instance(self) -> tuple[str, ...]:
        """A scrape target of a job: series without a model (HTTP counters, `up`)."""
        return self._keep("job", self.replica, *self._pod)

    @property
    def server(self) -> tuple[str, ...]:
        """One server: its target (and pod), its identity behind the target, its cluster."""
        return self._keep(self.replica, *self._pod, *self.identity)

    @property
    def target_model(self) -> tuple[str, ...]:
        """A scrape target and model: how the canary probe's series are keyed."""
        return self._keep("instance", *self._pod, "model_name")

    @property
    def target(self) -> tuple[str, ...]:
        return self._keep("instance", *self._pod)

    @property
    def replica_labels(self) -> tuple[str, ...]:
        """What makes two alerts about the same server (inhibition's `equal`)."""
        return self._keep(self.replica, *self._pod)

    @property
    def same_model(self) -> tuple[str, ...]:
        """What makes two alerts about the same model (inhibition's `equal`), whatever job their
        series come from: its name, namespace (absent on both outside Kubernetes) and cluster."""
        return self._keep("namespace", "model_name")

    @property
    def on_instance_model(self) -> str:
        return f"on ({by(self.instance_model)})"

    @property
    def where(self) -> str:
        """'model on replica (in cluster)' for alert descriptions."""
        text = f"{{{{ $labels.model_name }}}} on {{{{ $labels.{self.replica} }}}}"
        text += "".join(f" ({label} {{{{ $labels.{label} }}}})" for label in (*self._pod, *self.identity))
        return text + self.in_cluster

    @property
    def target_ref(self) -> str:
        """The scrape target (instance) an alert is about, for descriptions."""
        return self.server_ref + self.in_cluster

    @property
    def server_ref(self) -> str:
        """The scrape target and its pod, where the sentence names the cluster itself."""
        pod = f" (pod {{{{ $labels.{self.pod} }}}})" if self.pod else ""
        return "{{ $labels.instance }}" + pod

    @property
    def in_cluster(self) -> str:
        """Where the series come from: ' in namespace N in cluster C', each only when kept."""
        return "".join(f" in {var} {{{{ $labels.{label} }}}}" for label, var in reversed(self.partitions))


def scope_of(cfg: BundleConfig, res: Resolution | None = None) -> Scope:
    """The labels aggregations keep: the cluster (when on) and the source's server identity."""
    p = cfg.prometheus
    identity = res.source.identity if res is not None else ()
    pods = p.pod_labels
    return Scope(
        cluster=p.cluster_label if p.multi_cluster else None,
        identity=identity,
        namespace="namespace" if pods else None,
        pod="pod" if pods else None,
    )


# The metric part of a recorded histogram's names, per signal.
HISTOGRAM_METRICS = {
    "time_to_first_token": "vllm_time_to_first_token_seconds",
    "inter_token_latency": "vllm_inter_token_latency_seconds",
    "e2e_request_latency": "vllm_e2e_request_latency_seconds",
    "request_queue_time": "vllm_request_queue_time_seconds",
    "request_prefill_time": "vllm_request_prefill_time_seconds",
    "request_decode_time": "vllm_request_decode_time_seconds",
    "request_time_per_output_token": "vllm_request_time_per_output_token_seconds",
    "request_prompt_tokens": "vllm_request_prompt_tokens",
    "request_generation_tokens": "vllm_request_generation_tokens",
    "iteration_tokens": "vllm_iteration_tokens",
}
QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def by(labels: tuple[str, ...]) -> str:
    return ", ".join(labels)


def quantile(level: str, signal: str, q: str, window: str) -> str:
    return f"{level}:{HISTOGRAM_METRICS[signal]}:{q}_{window}"


def mean(level: str, signal: str, window: str) -> str:
    return f"{level}:{HISTOGRAM_METRICS[signal]}:mean_{window}"


def bucket_rate(level: str, signal: str, window: str) -> str:
    return f"{level}:{HISTOGRAM_METRICS[signal]}_bucket:rate{window}"


def rate(level: str, metric: str, window: str) -> str:
    return f"{level}:{metric}:rate{window}"


def ratio(level: str, metric: str, window: str) -> str:
    return f"{level}:{metric}:ratio_{window}"


def gauge(level: str, metric: str, op: str) -> str:
    return f"{level}:{metric}:{op}"


# Names used by alerts and dashboards, for one rate window.
class Names:
    def __init__(self, window: str) -> None:
        self.window = window
        w = window
        level = "job_instance_model"
        self.requests_finished = rate(level, "vllm_requests_finished", w)
        self.requests_failed = rate(level, "vllm_requests_failed", w)
        self.request_errors = ratio(level, "vllm_request_errors", w)
        self.prompt_tokens = rate(level, "vllm_prompt_tokens", w)
        self.generation_tokens = rate(level, "vllm_generation_tokens", w)
        self.preemptions = rate(level, "vllm_preemptions", w)
        self.preemptions_per_request = ratio(level, "vllm_preemptions_per_request", w)
        self.prefix_cache_hits = ratio(level, "vllm_prefix_cache_hits", w)
        self.requests_waiting = gauge(level, "vllm_requests_waiting", "sum")
        self.requests_running = gauge(level, "vllm_requests_running", "sum")
        # Requests waiting for batch or cache room, without the deferred ones (vLLM 0.20+).
        self.requests_waiting_for_capacity = gauge(level, "vllm_requests_waiting_for_capacity", "sum")
        self.kv_cache_usage = gauge(level, "vllm_kv_cache_usage", "max")
        self.fleet_kv_cache_usage = gauge("job_model", "vllm_kv_cache_usage", "avg")
        self.fleet_requests_finished = rate("job_model", "vllm_requests_finished", w)
        self.fleet_generation_tokens = rate("job_model", "vllm_generation_tokens", w)
        self.fleet_prompt_tokens = rate("job_model", "vllm_prompt_tokens", w)
        self.http_requests = rate("job_instance", "vllm_http_requests", w)
        # The canary probe's requests that vLLM answered, subtracted from served traffic.
        self.probe_answered = rate("instance_model", "vllm_probe_requests_answered", w)
        self.http_errors = ratio("job_instance", "vllm_http_5xx", w)
        # LoRA: the newest label set of vllm:lora_requests_info per server, and the adapters it lists.
        self.lora_latest = gauge("job_instance", "vllm_lora_requests_info", "latest")
        self.lora_running = gauge("job_instance", "vllm_lora_adapters_running", "count")
        self.lora_waiting = gauge("job_instance", "vllm_lora_adapters_waiting", "count")
        # Availability: requests that finished well, HTTP on the inference handlers (the canary's
        # own requests left out), and the larger of vLLM's and HTTP's failure ratios per replica.
        self.requests_good = rate(level, "vllm_requests_good", w)
        self.http_inference_requests = rate("job_instance", "vllm_http_inference_requests", w)
        self.http_inference_errors = rate("job_instance", "vllm_http_inference_5xx", w)
        self.requests_failing = rate(level, "vllm_requests_failing", w)
        self.requests_served = rate(level, "vllm_requests_served", w)
        self.request_failures = ratio(level, "vllm_request_failures", w)
        # Each model's replicas: serving it now, or serving nothing now and having served it
        # within paging.expected_window (a server down, dead or stopped is still its replica).
        self.served_model = gauge(level, "vllm_served_model", "replica")
        # Capacity: each replica's readiness, why it is not ready, and the counts per model.
        self.replica_ready = gauge(level, "vllm_replica_ready", "bool")
        self.replica_unready = gauge(level, "vllm_replica_unready", "cause")
        self.replicas_ready = gauge("job_model", "vllm_replicas_ready", "count")
        # What a model should run: kube-state-metrics' desired replicas or paging.expected_replicas
        # (desired), else the most it had ready within paging.expected_window (expected).
        self.replicas_desired = gauge("job_model", "vllm_replicas_desired", "count")
        self.replicas_expected = gauge("job_model", "vllm_replicas_expected", "count")
        # 1 while a server's log shows a planned stop or the start after it (rules.expressions.planned).
        self.restart_planned = gauge("instance", "vllm_restart_planned", "bool")
        # Engine features (recorded only where the source exposes them).
        self.spec_acceptance = ratio(level, "vllm_spec_decode_acceptance", w)
        self.spec_accepted_length = f"{level}:vllm_spec_decode_accepted_length:mean_{w}"
        self.spec_drafts = rate(level, "vllm_spec_decode_drafts", w)
        self.rejections = rate("job_instance_model_reason", "vllm_admission_rejections", w)
        self.kv_spread = gauge(level, "vllm_kv_cache_usage", "engine_spread")
        self.waiting_spread = gauge(level, "vllm_requests_waiting", "engine_spread")

    def quantile(self, signal: str, q: str, level: str = "job_instance_model") -> str:
        return quantile(level, signal, q, self.window)

    def mean(self, signal: str) -> str:
        return mean("job_instance_model", signal, self.window)

    def bucket_rate(self, signal: str, level: str) -> str:
        return bucket_rate(level, signal, self.window)


class GpuNames:
    """The GPU layer's recording rules: per GPU they keep cluster (when on), instance (the vLLM server),
    gpu, UUID and modelName; per server, cluster (when on) and instance.
    """

    utilization = "instance_gpu:vllm_gpu_utilization:ratio"
    memory_used_ratio = "instance_gpu:vllm_gpu_memory_used:ratio"
    memory_used_bytes = "instance_gpu:vllm_gpu_memory_used:bytes"
    memory_free_bytes = "instance_gpu:vllm_gpu_memory_free:bytes"
    temperature = "instance_gpu:vllm_gpu_temperature:celsius"
    power = "instance_gpu:vllm_gpu_power:watts"
    xid = "instance_gpu:vllm_gpu_xid:last"
    server_utilization = "instance:vllm_gpu_utilization:avg"
    server_memory_used = "instance:vllm_gpu_memory_used:max_ratio"


# -- service-level objectives ---------------------------------------------------------


@dataclass(frozen=True)
class BurnTier:
    """One tier of the multi-window, multi-burn-rate alerts (the SRE workbook's four)."""

    severity: str
    for_: str
    long: str
    short: str
    factor: float

    @property
    def paging(self) -> bool:
        return self.severity == "critical"


# kubernetes-mixin's tiers and holds, as Pyrra and sloth write them.
BURN_TIERS = (
    BurnTier("critical", "2m", "1h", "5m", 14.4),
    BurnTier("critical", "15m", "6h", "30m", 6.0),
    BurnTier("warning", "1h", "1d", "2h", 3.0),
    BurnTier("warning", "3h", "3d", "6h", 1.0),
)
# Every window a burn tier reads, shortest first: each is one recorded miss ratio per SLO.
SLO_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
# The latest scrape of any target, per Prometheus (and cluster): how long it has been scraping.
SCRAPE_HISTORY = "prometheus:up_timestamp:max"


@dataclass(frozen=True)
class Slo:
    """A service-level objective of each model: the share of its events that must be good. Availability
    counts requests; latency SLOs count observations at or under `threshold` (time to first token also
    counts a failed request as a miss)."""

    name: str  # availability | ttft | itl
    metric: str  # the metric part of its recorded names
    label: str  # short name on panels: Availability, TTFT, TPOT
    what: str  # in alert text: "availability", "time-to-first-token"
    events: str  # what one event is: "requests", "output tokens"
    objective: float  # the default; a model class may set its own (ModelClass)
    floor: str  # the config key of its tiers' traffic floor, in its events
    signal: str | None = None  # the histogram of a latency SLO
    threshold: float | None = None  # seconds, a bucket bound of that histogram
    setting: str | None = None  # the config key of the threshold, for errors

    @property
    def budget(self) -> float:
        return round(1 - self.objective, 10)

    @property
    def bad_rate(self) -> str:
        """Bad events per second per model, over the shortest window (recorded)."""
        return f"job_model:{self.metric}:slo_bad_rate{SLO_WINDOWS[0]}"

    @property
    def total_rate(self) -> str:
        return f"job_model:{self.metric}:slo_total_rate{SLO_WINDOWS[0]}"

    def miss(self, window: str) -> str:
        """The share of bad events over `window`."""
        return f"job_model:{self.metric}:slo_miss_ratio_{window}"

    def events_in(self, window: str) -> str:
        """Events a model saw over `window`: a tier's traffic floor reads it."""
        return f"avg_over_time({self.total_rate}[{window}]) * {int(seconds(window))}"

    def bad_in(self, window: str) -> str:
        return f"avg_over_time({self.bad_rate}[{window}]) * {int(seconds(window))}"


AVAILABILITY_METRIC = "vllm_request_availability"


def slos(cfg: BundleConfig) -> tuple[Slo, ...]:
    s = cfg.slo
    return (
        Slo(
            "availability",
            AVAILABILITY_METRIC,
            "Availability",
            "availability",
            "requests",
            s.availability_objective,
            "slo.min_requests",
        ),
        Slo(
            "ttft",
            HISTOGRAM_METRICS["time_to_first_token"],
            "TTFT",
            "time-to-first-token",
            "requests",
            s.ttft_objective,
            "slo.min_requests",
            "time_to_first_token",
            s.ttft_threshold_seconds,
            "slo.ttft_threshold_seconds",
        ),
        Slo(
            "itl",
            HISTOGRAM_METRICS["inter_token_latency"],
            "TPOT",
            "time-per-output-token",
            "output tokens",
            s.itl_objective,
            "slo.min_tokens",
            "inter_token_latency",
            s.itl_threshold_seconds,
            "slo.itl_threshold_seconds",
        ),
    )


@dataclass(frozen=True)
class SloTarget:
    """One SLO as one class of models holds it: its objective and threshold."""

    slo: Slo
    objective: float
    threshold: float | None
    setting: str | None  # where the threshold was set, for errors

    @property
    def budget(self) -> float:
        return round(1 - self.objective, 10)


@dataclass(frozen=True)
class ModelClass:
    """The models one `slo.models` entry sets (or the rest: the defaults): its own label regex,
    and the negation of every entry's before it, so each model is in one class."""

    name: str  # "slo.models[0]", or "default"
    rules: tuple[tuple[str, str, bool], ...]  # (label, regex, whether it must match)
    targets: tuple[SloTarget, ...]

    def target(self, name: str) -> SloTarget | None:
        return next((t for t in self.targets if t.slo.name == name), None)

    @property
    def matchers(self) -> tuple[str, ...]:
        return tuple(f"{label}{'=~' if must else '!~'}{quote(regex)}" for label, regex, must in self.rules)

    @property
    def selector(self) -> str:
        """The matchers as a selector's braces ("" for the default class of a bundle without entries)."""
        return "{" + ", ".join(self.matchers) + "}" if self.rules else ""

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a series with these labels is one of this class's models."""
        return all(
            (re.fullmatch(regex, labels.get(label, "")) is not None) == must
            for label, regex, must in self.rules
        )


def model_classes(cfg: BundleConfig, kinds: tuple[Slo, ...]) -> tuple[ModelClass, ...]:
    """The classes of `slo.models` in order, then the default one."""
    out, before = [], []
    for i, entry in enumerate(cfg.slo.models):
        rule = ("model_name", entry.model_name) if entry.model_name else ("namespace", entry.namespace)
        targets = []
        for slo in kinds:
            if slo.name not in entry.slis:
                continue
            threshold = getattr(entry, f"{slo.name}_threshold_seconds", None)
            setting = f"slo.models[{i}].{slo.name}_threshold_seconds" if threshold else slo.setting
            objective = getattr(entry, f"{slo.name}_objective") or slo.objective
            targets.append(SloTarget(slo, objective, threshold or slo.threshold, setting))
        out.append(ModelClass(f"slo.models[{i}]", ((*rule, True), *before), tuple(targets)))
        before.append((*rule, False))
    default = tuple(SloTarget(s, s.objective, s.threshold, s.setting) for s in kinds)
    return (*out, ModelClass("default", tuple(before), default))


# -- dashboards ---------------------------------------------------------------------------

# Every dashboard of a bundle, by key, with its title, in navigation order.
DASHBOARDS = {
    "overview": "Overview",
    "instance": "Instance and model",
    "kv_cache": "KV cache and scheduler",
    "failures": "Failures",
}


# -- the vocabulary of one bundle ------------------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    """What every artefact of one bundle shares: built once by `vocabulary()`."""

    cfg: BundleConfig
    res: Resolution
    names: Names
    scope: Scope  # vLLM's own series: cluster, replica and the source's server identity
    targets: Scope  # series keyed by scrape target (log exporter, probe, GPU): no identity
    slos: tuple[Slo, ...]  # availability, and the latency SLOs whose histogram the source has
    classes: tuple[ModelClass, ...]  # slo.models' classes, then the default one

    @property
    def vllm(self) -> str:
        """Matchers of every vLLM series query."""
        return self.cfg.vllm_selector

    @property
    def exporter(self) -> str:
        return self.cfg.exporter_selector

    @property
    def probe(self) -> str:
        return self.cfg.probe_selector

    @property
    def counts_failures(self) -> bool:
        """The source tells failed requests: vLLM's own count (0.13+), admission control's, or HTTP."""
        res = self.res
        return res.reports_engine_errors or res.has("admission_rejections") or res.has("http_requests")

    def slo(self, name: str) -> Slo | None:
        return next((s for s in self.slos if s.name == name), None)

    def holding(self, name: str) -> list[tuple[ModelClass, SloTarget]]:
        """The model classes that hold SLO `name`, each with its target."""
        return [(c, t) for c in self.classes if (t := c.target(name)) is not None]


def vocabulary(res: Resolution, cfg: BundleConfig) -> Vocabulary:
    kinds = tuple(s for s in slos(cfg) if s.signal is None or s.signal in res.signals)
    return Vocabulary(
        cfg=cfg,
        res=res,
        names=Names(cfg.alerts.rate_window),
        scope=scope_of(cfg, res),
        targets=scope_of(cfg),
        slos=kinds,
        classes=model_classes(cfg, kinds),
    )


@dataclass(frozen=True)
class RecordedHistogram:
    """What the bundle records of one histogram: only what an alert or a fleet-wide panel reads, since
    each per-replica statistic reads every engine's series at every evaluation; the Instance and model
    dashboard computes the rest from the raw series (docs/generating.md)."""

    key: str
    short: str  # the rule group's name: vllm-obs.recording-<short>
    replica: tuple[str, ...]  # per replica: quantiles of QUANTILES, and "mean"
    fleet: bool = False  # p50/p95/p99 per model, from a recorded per-model bucket rate


HISTOGRAMS = (
    # Per replica, the p95 that the replica warnings and the Overview's replica table read.
    # Instance and model draws p50/p95/p99 of one replica from the raw series (one window).
    RecordedHistogram("time_to_first_token", "ttft", ("p95",), fleet=True),
    RecordedHistogram("inter_token_latency", "itl", ("p95",), fleet=True),
    RecordedHistogram("request_queue_time", "queue", ("p95",), fleet=True),
    # Per model only: the Overview's latency panels and heatmaps.
    RecordedHistogram("e2e_request_latency", "e2e", (), fleet=True),
    RecordedHistogram("request_time_per_output_token", "tpot-request", (), fleet=True),
    # The KV cache and scheduler dashboard's worst steps and their spread across replicas.
    RecordedHistogram("iteration_tokens", "step-tokens", ("p50", "p99")),
)
RECORDED_HISTOGRAMS = {h.key: h for h in HISTOGRAMS}
