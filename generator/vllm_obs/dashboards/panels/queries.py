"""Label filters, variables and query helpers shared by the dashboards."""

from __future__ import annotations

import re

from ...exporter_series import LOG, PROBE, select
from ...signals import Signal
from ...source import Family
from ...vocabulary import QUANTILES, RECORDED_HISTOGRAMS, Vocabulary, by
from ..spec import Annotation, Variable

RATE = "$__rate_interval"
# What "All" of the instance variable expands to: every replica (the linter's rule).
EVERY = ".+"
# The worst replicas (or engines) a fleet panel draws by name; the rest are its spread lines.
# At 1,000 replicas a line each is unreadable and costs the refresh seconds of JSON.
TOP = 5


def regex_literal(text: str) -> str:
    """A regex matching exactly `text`, written for the inside of a PromQL string: Grafana pastes an
    All value into `job=~"$job"` as is, so RE2's escapes are escaped again (`vllm.prod` -> `vllm\\\\.prod`).
    """
    escaped = re.sub(r"([.+*?()|\[\]{}^$\\])", r"\\\1", text)
    return escaped.replace("\\", "\\\\")


class Filters:
    def __init__(
        self, v: Vocabulary, engine: bool = True, fleet: bool = False, one_replica: bool = False
    ) -> None:
        """`engine`: the dashboard has an engine variable. `fleet`: breakdowns are per model across the
        selected replicas, per-replica statistics drawn as the worst few and a spread. `one_replica`:
        the instance variable has no All (the dashboard opens on one replica)."""
        res, cfg = v.res, v.cfg
        self.fleet = fleet
        self.one_replica = one_replica
        self.v = v
        self.res = res
        self.cfg = cfg
        self.names = v.names
        anchor = res.signals.get("requests_running")
        self.engine = engine and anchor is not None and anchor.has_label("engine")
        self.scope = v.scope
        extra = cfg.prometheus.extra_selector.strip()
        self._extra = f", {extra}" if extra else ""
        # With multi-cluster (pod labels) on, every query is narrowed to the clusters (namespaces)
        # picked first.
        self._partitions = [f'{label}=~"${var}"' for label, var in self.scope.partitions]
        self._within = "".join(f"{m}, " for m in self._partitions)  # a selector's first matchers

    @property
    def replica_label(self) -> str:
        return self.scope.replica

    @property
    def per_replica(self) -> str:
        """`by` labels for one line per server (its cluster too, where names can repeat)."""
        return by(self.scope.server)

    @property
    def per_replica_model(self) -> str:
        """`by` labels for one line per server and model, on any dashboard."""
        return f"{self.per_replica}, model_name"

    @property
    def per_model(self) -> str:
        """`by` labels of a breakdown's lines: per replica and model, or per model on a fleet dashboard."""
        return by(self.scope.fleet_model) if self.fleet else self.per_replica_model

    @property
    def legend(self) -> str:
        """The legend of a line grouped by `per_model`."""
        return "{{model_name}}" if self.fleet else "{{instance}} {{model_name}}"

    def worst(self, expr: str, lowest: bool = False) -> str:
        """The TOP series of `expr` at each step, highest (or lowest, where low is bad): a replica's
        line shows while it is among them. One replica selected, it is that replica's line."""
        return f"{'bottomk' if lowest else 'topk'}({TOP}, {expr})"

    def spread(self, expr: str, lowest: bool = False, per: str = "model_name") -> tuple[tuple[str, str], ...]:
        """(expr, legend) of the median and the 90th percentile (10th where low is bad) of `expr`
        across the series selected, per model: the bulk of a fleet, where the worst are the outliers."""
        tail = 0.1 if lowest else 0.9
        group = f" by ({per})" if per else ""
        legend = f" {{{{{per}}}}}" if per else ""
        return tuple(
            (f"quantile{group} ({q:g}, {expr})", f"{name}{legend}")
            for q, name in ((0.5, "median"), (tail, f"p{round(tail * 100)}"))
        )

    @property
    def model(self) -> str:
        """For job_model recording rules."""
        return f'{{{self._within}job=~"$job", model_name=~"$model_name"}}'

    @property
    def replica(self) -> str:
        """For job_instance_model recording rules."""
        return f'{{{self._within}job=~"$job", {self.replica_label}=~"$instance", model_name=~"$model_name"}}'

    @property
    def target(self) -> str:
        """For per-target series without model_name (up, HTTP counters)."""
        return f'{{{self._within}job=~"$job", {self.replica_label}=~"$instance"{self._extra}}}'

    @property
    def recorded_target(self) -> str:
        """For job_instance recording rules (no model_name, no extra selector: already applied)."""
        return f'{{{self._within}job=~"$job", {self.replica_label}=~"$instance"}}'

    def raw(self, item: Signal | Family, *extra: str) -> str:
        """Matchers for a vLLM series: model and engine filters only where the series has the label."""
        labels = item.family.labels if isinstance(item, Signal) else item.labels
        parts = [*self._partitions, 'job=~"$job"', f'{self.replica_label}=~"$instance"']
        if "model_name" in labels:
            parts.append('model_name=~"$model_name"')
        if "engine" in labels and self.engine:
            parts.append('engine=~"$engine"')
        return "{" + ", ".join(parts + list(extra)) + self._extra + "}"

    def family(self, native: str) -> Family | None:
        """A series the source has that no signal names (e.g. a feature's secondary series)."""
        return self.res.source.families.get(native)

    def rate(self, item: Signal | Family, group: str, *extra: str) -> str:
        name = item.name
        return f"sum by ({group}) (rate({name}{self.raw(item, *extra)}[{RATE}]))"

    def ratio(self, hits: Signal | Family, total: Signal | Family, group: str) -> str:
        """hits / total as rates; 0/0 (no traffic) stays empty rather than NaN."""
        return f"{self.rate(hits, group)}\n/\n({self.rate(total, group)} > 0)"

    def mean(self, sig: Signal | Family, group: str | None = None) -> str:
        """Mean observation of a histogram over the panel's rate interval (per server by default)."""
        group = group or self.per_replica
        name = sig.name
        return (
            f"sum by ({group}) (rate({name}_sum{self.raw(sig)}[{RATE}]))\n/\n"
            f"(sum by ({group}) (rate({name}_count{self.raw(sig)}[{RATE}])) > 0)"
        )

    def quantile(self, sig: Signal | Family, q: float, group: str) -> str:
        by_le = f"{group}, le" if group else "le"
        return f"histogram_quantile({q:g}, sum by ({by_le}) (rate({sig.name}_bucket{self.raw(sig)}[{RATE}])))"

    def replica_statistics(self, key: str, stats: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
        """A histogram's statistics per replica and model (QUANTILES or "mean") and their window in words:
        the recorded series where the rules record them all, else the raw series over the rate interval
        (cheap for the replicas one dashboard shows). One window for the lines of one panel."""
        spec = RECORDED_HISTOGRAMS.get(key)
        if spec is not None and set(stats) <= set(spec.replica):
            n = self.names
            recorded = (n.mean(key) if s == "mean" else n.quantile(key, s) for s in stats)
            return tuple(f"{name}{self.replica}" for name in recorded), self.cfg.alerts.rate_window
        if self.fleet:
            raise ValueError(
                f"{key} {'/'.join(stats)} per replica is not recorded: record it (vocabulary.HISTOGRAMS) "
                "before a fleet dashboard reads it, or every refresh reads every engine's buckets"
            )
        sig, group = self.res[key], self.per_replica_model
        raw = (
            self.mean(sig, group) if s == "mean" else self.quantile(sig, QUANTILES[s], group) for s in stats
        )
        return tuple(raw), "the panel's rate interval"

    def buckets(self, sig: Signal | Family) -> str:
        """Bucket rates by le, for a heatmap of the distribution."""
        return f"sum by (le) (rate({sig.name}_bucket{self.raw(sig)}[{RATE}]))"

    @property
    def probe(self) -> str:
        """The canary probe's series about the selected servers (relabelled to their instance)."""
        return f'{{{self._within}{self.cfg.probe_selector}, instance=~"$instance"}}'

    @property
    def exporter(self) -> str:
        return f'{{{self._within}{self.cfg.exporter_selector}, {self.replica_label}=~"$instance"}}'

    def job(self, job: str, *extra: str) -> str:
        """Matchers of another job's series (Prometheus' or Alertmanager's own), in the clusters
        picked: not in the namespaces picked, which are vLLM's (Prometheus runs in its own)."""
        cluster = f'{self.scope.cluster}=~"$cluster", ' if self.scope.cluster else ""
        return "{" + cluster + ", ".join([f'job="{job}"', *extra]) + "}"

    def log(self, family: str, **matchers: str) -> str:
        """A log-exporter series of the selected servers (checked against the exporters' contract)."""
        return select(LOG, family, self.exporter[1:-1], **matchers)

    def probed(self, family: str, **matchers: str) -> str:
        """A canary-probe series about the selected servers (checked against the exporters' contract)."""
        return select(PROBE, family, self.probe[1:-1], **matchers)

    @property
    def gpu(self) -> str:
        """The GPU recording rules: keyed by the vLLM instance using the GPU (and the cluster)."""
        return f'{{{self._within}instance=~"$instance"}}'

    def variables(self) -> tuple[Variable, ...]:
        """(cluster, namespace,) job, instance, model_name (and engine), read from a series every release has,
        then the ad hoc filters (any other label, e.g. namespace or pod)."""
        anchor = next(
            self.res[k]
            for k in ("requests_running", "requests_waiting", "generation_tokens", "time_to_first_token")
            if k in self.res.signals
        )
        name = anchor.name
        out = []
        for i, (label, var) in enumerate(self.scope.partitions):
            # Each is read within the ones picked before it (a cluster's namespaces).
            within = "".join(f"{m}, " for m in self._partitions[:i])
            out.append(
                Variable(
                    var, var.title(), f"label_values({name}{{{within}{self.cfg.vllm_selector}}}, {label})"
                )
            )
        c = self._within
        out += [
            # "All" means the configured vLLM job, not every job Prometheus scrapes.
            Variable(
                "job",
                "Job",
                f"label_values({name}{{{c}{self.cfg.vllm_selector}}}, job)",
                all_value=regex_literal(self.cfg.prometheus.vllm_job),
            ),
            Variable(
                "instance",
                "Instance",
                f'label_values({name}{{{c}job=~"$job"{self._extra}}}, {self.replica_label})',
                all_value=EVERY,
                include_all=not self.one_replica,
            ),
            Variable(
                "model_name",
                "Model",
                f'label_values({name}{{{c}job=~"$job", {self.replica_label}=~"$instance"{self._extra}}}, model_name)',
            ),
        ]
        if self.engine:
            out.append(
                Variable(
                    "engine",
                    "Engine",
                    f'label_values({name}{{{c}job=~"$job", {self.replica_label}=~"$instance", model_name=~"$model_name"{self._extra}}}, engine)',
                )
            )
        out.append(Variable("filters", "Filters", "", kind="adhoc"))
        return tuple(out)

    def alert_annotation(self) -> Annotation:
        """Firing vLLM alerts of the selected servers, drawn on every time series. Alerts of the log
        exporter, probe and GPU exporter jobs are kept, and the empty alternatives keep fleet-wide alerts.
        """
        p = self.cfg.prometheus
        companions = [p.log_exporter_job] * bool(p.log_exporters) + [p.probe_job] * bool(p.probes)
        if self.cfg.gpu.enabled:
            companions.append(self.cfg.gpu.job)
        jobs = "|".join(["$job", *(regex_literal(j) for j in companions), ""])
        matchers = [
            'alertstate="firing"',
            'alertname=~"Vllm.*"',
            f'job=~"{jobs}"',
            f'{self.replica_label}=~"$instance|"',
            'model_name=~"$model_name|"',
        ]
        matchers[:0] = [f'{label}=~"${var}|"' for label, var in self.scope.partitions]
        return Annotation(
            name="Firing vLLM alerts",
            expr=f"ALERTS{{{', '.join(matchers)}}}",
            title="{{alertname}} ({{severity}})",
            text="{{instance}} {{model_name}}",
        )
