"""The surviving mutants that change nothing a test could observe, each with why
(benchmarks/mutation/equivalent.yaml): the report lists them apart from real survivors."""

from __future__ import annotations

from pathlib import Path

import yaml

FILE = Path(__file__).with_name("equivalent.yaml")


def load_equivalents(path: Path = FILE) -> dict[str, str]:
    """Mutant id -> the reason it is equivalent to the rule as written."""
    entries = yaml.safe_load(path.read_text()) or []
    return {e["mutant"]: e["reason"] for e in entries}
