"""The engine's progress as the target's own /metrics counts it: prompt plus generated tokens, which
every vLLM release from 0.6 exposes and a busy engine moves at each step; else engine steps, else
finished requests. A platform's prefix (`ray_vllm:`, `kserve_vllm:`) or `_` for `:` is accepted.
"""

from __future__ import annotations

import math
import re

# In order of preference: the first group the exposition has is summed (every label set of it).
GROUPS = (
    ("prompt_tokens_total", "generation_tokens_total"),
    ("iteration_tokens_total_count",),  # engine steps (from 0.6.4)
    ("request_success_total",),
)
NAMES = tuple(f"vllm:{name}" for group in GROUPS for name in group)
_RANK = {name: rank for rank, group in enumerate(GROUPS) for name in group}
_SAMPLE = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*_)?vllm[:_](" + "|".join(_RANK) + r")(?=[{\s])",
    re.MULTILINE,
)


def engine_progress(exposition: str) -> float | None:
    """The sum of the best counter group's samples, or None when the text has none of them."""
    sums: dict[int, float] = {}
    for match in _SAMPLE.finditer(exposition):
        end = exposition.find("\n", match.end())
        line = exposition[match.end() : end if end >= 0 else len(exposition)]
        if line.startswith("{"):
            line = line[line.rfind("}") + 1 :]  # label values may hold spaces, never after the set
        fields = line.split()
        try:
            value = float(fields[0])
        except (IndexError, ValueError):
            continue
        if math.isfinite(value):
            rank = _RANK[match.group(1)]
            sums[rank] = sums.get(rank, 0.0) + value
    return sums[min(sums)] if sums else None
