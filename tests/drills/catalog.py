"""The drill scenarios by number, with the title and picture the report gives each.

Kept apart from the drill itself so the test of the committed report needs no server.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    number: int
    key: str
    title: str

    @property
    def heading(self) -> str:
        return f"{self.number}. {self.title}"

    @property
    def picture(self) -> str:
        return f"{self.number:02d}-{self.key}.png"


SCENARIOS = (
    Scenario(1, "queue-pressure", "Queue pressure with KV headroom"),
    Scenario(2, "kv-cache-saturation", "KV-cache saturation"),
    Scenario(3, "latency", "Latency under load"),
    Scenario(4, "dead-engine", "Dead engine"),
    Scenario(5, "hung-engine", "Hung engine"),
    Scenario(6, "startup-failure", "Startup failure"),
    Scenario(7, "out-of-memory", "Out of memory"),
    Scenario(8, "lifecycle", "Lifecycle: planned stop, normal restart, slow start, restart loop"),
)

BY_KEY = {s.key: s for s in SCENARIOS}
