"""The bundle's dashboards, keyed by the file name they are written to."""

from __future__ import annotations

import dataclasses

from ..config import BundleConfig
from ..signals import Resolution
from .failures import failures
from .instance import instance
from .kv_cache import kv_cache
from .overview import overview
from .spec import Dashboard


def dashboards(res: Resolution, cfg: BundleConfig) -> list[Dashboard]:
    built = [overview(res, cfg), instance(res, cfg), kv_cache(res, cfg), failures(res, cfg)]
    # A row whose signals all lack on this release (a feature the server does not run)
    # disappears with its panels, and so would a dashboard left without any.
    kept = [dataclasses.replace(d, rows=tuple(r for r in d.rows if r.panels)) for d in built]
    kept = [d for d in kept if d.rows]
    siblings = tuple((d.key, d.title) for d in kept)
    return [dataclasses.replace(d, siblings=siblings) for d in kept]
