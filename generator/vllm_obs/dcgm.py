"""catalog/dcgm.yaml: the dcgm-exporter series the GPU layer may read and the XID codes that page."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from .config import BundleConfig

GPU_LABELS = ("gpu", "UUID", "modelName")  # what tells one GPU from another on a host
MIB = 1048576  # DCGM reports framebuffer sizes in MiB


@dataclass(frozen=True)
class DcgmSeries:
    name: str
    type: str
    unit: str
    optional: bool


@dataclass(frozen=True)
class Xid:
    code: int
    text: str
    why: str = ""


@dataclass(frozen=True)
class Dcgm:
    """catalog/dcgm.yaml: the series the layer may read and the XID codes that page."""

    series: dict[str, DcgmSeries]
    critical: tuple[Xid, ...]
    application: tuple[Xid, ...]
    sources: dict[str, dict[str, str]]

    def name(self, name: str) -> str:
        """A series name the layer reads; a name missing from the data file is a bug."""
        if name not in self.series:
            raise KeyError(f"{name} is not declared in catalog/dcgm.yaml")
        return name


@functools.lru_cache(maxsize=1)
def load_dcgm() -> Dcgm:
    text = resources.files("vllm_obs").joinpath("catalog/dcgm.yaml").read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    series = {
        s["name"]: DcgmSeries(s["name"], s["type"], s["unit"], bool(s.get("optional", False)))
        for s in data["series"]
    }
    return Dcgm(
        series=series,
        critical=tuple(Xid(x["code"], x["text"], x["why"]) for x in data["xid"]["critical"]),
        application=tuple(Xid(x["code"], x["text"]) for x in data["xid"]["application"]),
        sources=data["sources"],
    )


def gpu_selector(cfg: BundleConfig) -> str:
    return f'job="{cfg.gpu.job}"'


def critical_codes() -> tuple[int, ...]:
    return tuple(x.code for x in load_dcgm().critical)
