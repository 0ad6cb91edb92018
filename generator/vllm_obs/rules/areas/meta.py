"""Meta: the alerting pipeline itself."""

from __future__ import annotations

from ...vocabulary import Vocabulary
from ..declaration import NO_PANEL, Declared
from ..model import Alert
from ..runbook_kit import Section
from ..scenario_kit import REPLICA, Case, Check, Expect, Inputs, series_text

GROUP = "vllm-obs.meta"


def declarations(v: Vocabulary) -> list[Declared]:
    return [
        Declared(
            name="Watchdog",
            build=lambda v: [
                Alert(
                    name="Watchdog",
                    expr="vector(1)",
                    severity="info",
                    summary="The alerting pipeline is alive.",
                    description=(
                        "Always firing. If its heartbeat stops arriving at the dead man's switch, Prometheus, "
                        "Alertmanager or the path between them is broken."
                    ),
                    dashboard="overview",
                )
            ],
            # It explains itself: its link opens the overview, on no panel in particular.
            panel=NO_PANEL,
            runbook=Section(
                meaning=(
                    "Always firing, on purpose: the dead man's switch of the whole pipeline. Alertmanager "
                    "sends it to a heartbeat service, which pages when the heartbeat stops."
                ),
                confirm=["Alertmanager's UI lists it as firing; the heartbeat service shows recent pings."],
                act=[
                    "Never silence it. If the heartbeat stopped: check Prometheus, its rule evaluation, "
                    "Alertmanager and the network between them.",
                ],
            ),
            scenarios=_watchdog,
            always_fires=True,
        ),
    ]


def _watchdog(rules: list[Alert], io: Inputs) -> list[Case]:
    (rule,) = rules
    case = Case("Watchdog always fires")
    case.add(series_text("up", {**io.base, **io.at_target(REPLICA)}), "1+0x3")
    case.checks = [Check(0, rule.name, [Expect(rule, {}, 1)]), Check(2, rule.name, [Expect(rule, {}, 1)])]
    return [case]
