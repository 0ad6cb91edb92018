"""The probe's part of the exporters' contract (vllm_obs_contract/contract.yaml).
Families are built from it (`family`) and closed label-value sets read from it (`closed_values`),
so a family or value the contract lacks cannot be exported: the build raises, or the import does.
"""

from __future__ import annotations

import vllm_obs_contract
from vllm_obs_contract import ContractError

FAMILIES = vllm_obs_contract.probe()
family = FAMILIES.family
closed_values = FAMILIES.closed_values

__all__ = ["FAMILIES", "ContractError", "closed_values", "family"]
