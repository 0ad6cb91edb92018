"""One declaration per alert (`Declared`): how its rules are built, the signals they need, the panel
its link opens, its runbook section, its promtool scenarios and its part in inhibition. The
assembler (assembly.py) builds every artefact from these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..vocabulary import Vocabulary
from .model import Alert
from .runbook_kit import Section
from .scenario_kit import Builder


@dataclass(frozen=True)
class Inhibition:
    """While this alert fires, it silences `alerts` and the alerts tagged with any of
    `symptoms` that are about the same thing (`equal`: "replica", the server's own labels;
    "target", its scrape target; "model", the same model in the same namespace and cluster)."""

    alerts: tuple[str, ...] = ()
    symptoms: tuple[str, ...] = ()
    equal: str = "replica"
    matchers: tuple[str, ...] = ()  # only while the source alert also matches these ('severity="critical"')


@dataclass(frozen=True)
class Declared:
    name: str
    # The alert's rules for this bundle (several severities or variants share the name);
    # called only when every signal of `needs` is present.
    build: Callable[[Vocabulary], Sequence[Alert]]
    panel: str | None  # title of the panel its dashboard_url opens, on its rules' dashboard
    runbook: Section | None
    scenarios: Builder | None  # promtool cases: at least one that fires and one that stays silent
    knobs: tuple[str, ...] = ()  # the config keys that tune it ("alerts.queue_for"), for the docs
    on: bool = True  # False: the part of the bundle it belongs to is off (no probe, no GPU layer...)
    needs: tuple[str, ...] = ()  # signals without which the bundle has no such alert
    uses: tuple[str, ...] = ()  # signals without which it has fewer rules (named in the warnings)
    symptoms: tuple[str, ...] = ()  # tags other alerts' inhibitions name
    inhibits: tuple[Inhibition, ...] = ()
    always_fires: bool = False  # a heartbeat (Watchdog): no scenario can show it silent


# A symptom tag: what a dead, hung or unreachable server explains on itself (its latency,
# queue, cache, stall and error alerts); the cause's alert silences it.
DEAD_SERVER = "dead_server"

# A symptom tag: a cause on one replica, a warning that names it (a ticket); a model's capacity
# page silences it, on that replica and on the model's others.
PER_REPLICA = "replica"

# A symptom tag: load a model's SLO burn page already tells (its queue depth and queue time,
# KV-cache pressure, filling and preemptions); the burn page silences it on the same model.
LOAD_SYMPTOMS = "load"

# The panel of an alert that explains itself (Watchdog): its link opens its dashboard only.
NO_PANEL = ""
