"""Which of many series exist, in a few bounded queries: exact names (no regex on `__name__`),
branches joined with `or on (__name__, job, engine)`, URLs of a few kilobytes, and a histogram
asked for by its +Inf bucket. docs/design.md says why.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..clients import ApiError, PrometheusClient
from ..context import Presence

MAX_QUERY_CHARS = 3000


def present(prom: PrometheusClient, selector: str, names: Iterable[str]) -> dict[str, Presence]:
    """name -> how many targets have it, for each name that exists under selector."""
    branches = [_branch(name, selector) for name in sorted(set(names))]
    queries = chunks(branches, " or on (__name__, job, engine) ")
    found: dict[str, Presence] = {}
    for result in prom.query_many(queries):
        if isinstance(result, ApiError):
            raise result
        for sample in result:
            name = sample["metric"].get("__name__", "")
            count = int(float(sample["value"][1]))
            engine = bool(sample["metric"].get("engine"))
            old = found.get(name)
            found[name] = Presence(
                instances=max(count, old.instances if old else 0),
                engine_label=engine or (old.engine_label if old else False),
            )
    return found


def chunks(branches: list[str], joiner: str) -> list[str]:
    out: list[str] = []
    current: list[str] = []
    size = 0
    for branch in branches:
        if current and size + len(joiner) + len(branch) > MAX_QUERY_CHARS:
            out.append(joiner.join(current))
            current, size = [], 0
        current.append(branch)
        size += len(branch) + len(joiner)
    if current:
        out.append(joiner.join(current))
    return out


def _branch(name: str, selector: str) -> str:
    inner = f'__name__="{name}"' + (f", {selector}" if selector else "")
    if name.endswith("_bucket"):
        # Every child histogram has a +Inf bucket: one series per child instead of one per bound.
        inner += ', le="+Inf"'

    return f"count by (__name__, job, engine) (group by (__name__, job, instance, engine) ({{{inner}}}))"
