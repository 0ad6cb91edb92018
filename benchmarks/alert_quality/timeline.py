"""A run's timeline picture: the scenario's incidents as bars (coloured by what they deserve),
and under them each rule set's notifications on the fleet's clock (a page, a ticket or chat
message), so a missed incident, a late page or a page of nothing shows at a glance."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .scenario import Scenario
from .scoring import Notification, Routing

DESERVES = {"page": "#d62728", "ticket": "#ff7f0e", "none": "#2ca02c"}


def draw(scenario: Scenario, notes: dict[str, list[Notification]], routing: Routing, path: Path) -> None:
    incidents = list(scenario.incidents)
    sets = list(notes)
    rows = len(incidents) + len(sets)
    fig, ax = plt.subplots(figsize=(12, 0.32 * rows + 1.6))
    hours = 3600.0
    labels = []
    for y, incident in enumerate(incidents):
        ax.barh(
            y,
            (incident.end - incident.at) / hours,
            left=incident.at / hours,
            height=0.6,
            color=DESERVES[incident.expect],
            alpha=0.7,
        )
        labels.append(f"{incident.id} ({incident.target.model})")
    for k, name in enumerate(sets):
        y = len(incidents) + k
        labels.append(f"{name}: notifications")
        for kind, marker, colour in (("ticket", "|", "#7f7f7f"), ("page", "v", "#d62728")):
            at = [n.started / hours for n in notes[name] if n.status == "firing" and routing.kind(n) == kind]
            ax.scatter(
                at, [y] * len(at), marker=marker, color=colour, s=40 if kind == "page" else 25, zorder=3
            )
    ax.set_yticks(range(rows), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, scenario.duration / hours)
    ax.set_xlabel("simulated hours (notifications at the moment their alerts started)")
    ax.set_title(
        f"{scenario.name}: incidents (red: deserves a page, orange: a ticket, green: nothing) and notifications "
        "(red triangle: page, grey bar: ticket or chat)",
        fontsize=9,
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
