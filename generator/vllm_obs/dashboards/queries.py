"""Label filters and variables shared by the dashboards."""

from __future__ import annotations

import re

from ..config import BundleConfig
from ..rules.names import by, scope_of
from ..signals import Resolution, Signal
from .spec import Variable

RATE = "$__rate_interval"


class Filters:
    def __init__(self, res: Resolution, cfg: BundleConfig) -> None:
        self.res = res
        self.cfg = cfg
        self.scope = scope_of(cfg, res)
        extra = cfg.prometheus.extra_selector.strip()
        self._extra = f", {extra}" if extra else ""
        cluster = self.scope.cluster
        # With multi-cluster on, every query is narrowed to the clusters picked first.
        self._cluster = f'{cluster}=~"$cluster", ' if cluster else ""

    @property
    def replica_label(self) -> str:
        return self.scope.replica

    @property
    def per_replica(self) -> str:
        """`by` labels for one line per server (its cluster too, where names can repeat)."""
        return by(self.scope.server)

    @property
    def per_model(self) -> str:
        return f"{self.per_replica}, model_name"

    @property
    def model(self) -> str:
        """For job_model recording rules."""
        return f'{{{self._cluster}job=~"$job", model_name=~"$model_name"}}'

    @property
    def replica(self) -> str:
        """For job_instance_model recording rules."""
        return f'{{{self._cluster}job=~"$job", {self.replica_label}=~"$instance", model_name=~"$model_name"}}'

    @property
    def target(self) -> str:
        """For per-target series without model_name (up, HTTP counters)."""
        return f'{{{self._cluster}job=~"$job", {self.replica_label}=~"$instance"{self._extra}}}'

    def raw(self, sig: Signal, *extra: str) -> str:
        """Matchers for a vLLM series, with the engine filter where the series has one."""
        parts = ['job=~"$job"', f'{self.replica_label}=~"$instance"', 'model_name=~"$model_name"']
        if self.scope.cluster:
            parts.insert(0, f'{self.scope.cluster}=~"$cluster"')
        if sig.has_label("engine"):
            parts.append('engine=~"$engine"')
        return "{" + ", ".join(parts + list(extra)) + self._extra + "}"

    def mean(self, sig: Signal) -> str:
        """Mean observation per server of a histogram over the panel's rate interval."""
        return (
            f"sum by ({self.per_replica}) (rate({sig.sum}{self.raw(sig)}[{RATE}]))\n/\n"
            f"sum by ({self.per_replica}) (rate({sig.count}{self.raw(sig)}[{RATE}]))"
        )

    @property
    def probe(self) -> str:
        """The canary probe's series about the selected servers (relabelled to their instance)."""
        return f'{{{self._cluster}{self.cfg.probe_selector}, instance=~"$instance"}}'

    @property
    def exporter(self) -> str:
        return f'{{{self._cluster}{self.cfg.exporter_selector}, {self.replica_label}=~"$instance"}}'

    @property
    def gpu(self) -> str:
        """The GPU recording rules: keyed by the vLLM instance using the GPU (and the cluster)."""
        return f'{{{self._cluster}instance=~"$instance"}}'

    def variables(self, engine: bool = True) -> tuple[Variable, ...]:
        """(cluster,) job, instance, model_name (and engine), read from a series every release has,
        then the ad hoc filters (any other label, e.g. namespace or pod)."""
        anchor = next(
            self.res[k]
            for k in ("requests_running", "requests_waiting", "generation_tokens", "time_to_first_token")
            if k in self.res.signals
        )
        name = anchor.name
        out = []
        if self.scope.cluster:
            out.append(
                Variable(
                    "cluster",
                    "Cluster",
                    f"label_values({name}{{{self.cfg.vllm_selector}}}, {self.scope.cluster})",
                )
            )
        c = self._cluster
        out += [
            # "All" means the configured vLLM job, not every job Prometheus scrapes.
            Variable(
                "job",
                "Job",
                f"label_values({name}{{{c}{self.cfg.vllm_selector}}}, job)",
                all_value=re.escape(self.cfg.prometheus.vllm_job),
            ),
            Variable(
                "instance",
                "Instance",
                f'label_values({name}{{{c}job=~"$job"{self._extra}}}, {self.replica_label})',
            ),
            Variable(
                "model_name",
                "Model",
                f'label_values({name}{{{c}job=~"$job", {self.replica_label}=~"$instance"{self._extra}}}, model_name)',
            ),
        ]
        if engine and anchor.has_label("engine"):
            out.append(
                Variable(
                    "engine",
                    "Engine",
                    f'label_values({name}{{{c}job=~"$job", {self.replica_label}=~"$instance", model_name=~"$model_name"{self._extra}}}, engine)',
                )
            )
        return tuple(out)
