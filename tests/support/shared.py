"""Public data beside the project (../shared from its root), which a user's clone does not have.
Tests read it when present and skip in one line when not; nothing of it is copied into the project.
VLLM_OBS_SHARED points elsewhere (README: where to get it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("VLLM_OBS_SHARED", REPO.parent / "shared"))


def shared_file(relative: str) -> Path:
    """The file under ../shared, or skip the test in one line saying it is absent."""
    path = SHARED / relative
    if not path.is_file():
        pytest.skip(f"{path} is absent (no ../shared beside this clone; the README says where to get it)")
    return path
