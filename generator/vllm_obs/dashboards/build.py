"""The bundle's dashboards, keyed by the file name they are written to."""

from __future__ import annotations

from ..config import BundleConfig
from ..signals import Resolution
from .failures import failures
from .instance import instance
from .kv_cache import kv_cache
from .overview import overview
from .spec import Dashboard


def dashboards(res: Resolution, cfg: BundleConfig) -> list[Dashboard]:
    built = [overview(res, cfg), instance(res, cfg), kv_cache(res, cfg), failures(res, cfg)]
    # A row whose signals all lack on this release disappears with its panels.
    return [
        Dashboard(d.key, d.title, d.description, tuple(r for r in d.rows if r.panels), d.variables)
        for d in built
    ]
