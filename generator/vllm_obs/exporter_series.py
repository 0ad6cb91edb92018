"""The exporters' series as the generator queries them, checked against their contract: `select`
fails at generation on a family or label value absent from vllm_obs_contract/contract.yaml, so no
rule, panel or doctor check asks for a series the exporters never emit.
"""

from __future__ import annotations

import vllm_obs_contract
from vllm_obs_contract import Exporter, Family

from .promql import quote, selector

# A matcher value's prefix -> its operator; no prefix is an equality.
_OPERATORS = (("!~", "!~"), ("~", "=~"), ("!", "!="))

LOG = vllm_obs_contract.log_exporter()
PROBE = vllm_obs_contract.probe()


def select(exporter: Exporter, family: str, job: str, *raw: str, **matchers: str) -> str:
    """`family`'s series (counter: `_total`; or one histogram sample) with job and label matchers. A
    value may start with `~` (regex), `!~` or `!`; a closed label's alternatives must be its values.
    `raw` matchers go in as written (a histogram bucket's `le`).
    """
    fam, series = _family_of(exporter, family)
    parts = []
    for label, value in matchers.items():
        op = next(((o, p) for p, o in _OPERATORS if value.startswith(p)), ("=", ""))
        value = value[len(op[1]) :]
        if label not in fam.labels:
            raise KeyError(f"{family} has no label {label} in the exporters' contract")
        closed = fam.labels[label]
        for alternative in value.split("|") if "~" in op[0] else [value]:
            if closed is not None and alternative not in closed:
                raise KeyError(
                    f"{alternative!r} is not a value of {family}'s {label} in the exporters' contract"
                )
        parts.append(f"{label}{op[0]}{quote(value)}")
    return selector(series, job, *parts, *raw)


def _family_of(exporter: Exporter, name: str) -> tuple[Family, str]:
    for fam in exporter.families.values():
        if name in fam.samples:
            return fam, name
    fam = exporter[name]
    return fam, fam.series


def values(exporter: Exporter, family: str, label: str) -> tuple[str, ...]:
    return exporter[family].values(label)
