"""Which parameters of a variant test run in `make test` and which only in the full matrix."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

MATRIX = pytest.mark.matrix


def tiered(values: Iterable, kept: Sequence, *, unpack: bool = False) -> list:
    """`values` as pytest parameters: those in `kept` run in `make test`, the others carry `matrix`.
    unpack: each value is a tuple of several arguments."""
    return [v if v in kept else pytest.param(*(v if unpack else (v,)), marks=MATRIX) for v in values]


def matrix_only(values: Iterable, kept: Sequence) -> list:
    """The values `tiered` leaves to the full matrix (`make test` loads them: test_variants.py)."""
    return [v for v in values if v not in kept]
