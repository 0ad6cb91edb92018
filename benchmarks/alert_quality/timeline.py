"""A run's timeline picture: the scenario's incidents as bars (coloured by what they deserve),
and under them each rule set's notifications on the fleet's clock (a page, a ticket or chat
message), so a missed incident, a late page or a page of nothing shows at a glance."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .scenario import Scenario
from .scoring import Notification, Routing, classified

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
        posts = list(classified(notes[name], routing))
        tickets = [n.started / hours for n, kind, _ in posts if kind == "ticket"]
        ax.scatter(tickets, [y] * len(tickets), marker="|", color="#7f7f7f", s=25, zorder=3)
        for update, style in ((True, {"facecolors": "none", "s": 25}), (False, {"s": 40})):
            at = [n.started / hours for n, kind, u in posts if kind == "page" and u == update]
            ax.scatter(
                at, [y] * len(at), marker="v", edgecolors="#d62728", color="#d62728", zorder=3, **style
            )
    ax.set_yticks(range(rows), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, scenario.duration / hours)
    ax.set_xlabel("simulated hours (notifications at the moment their alerts started)")
    ax.set_title(
        f"{scenario.name}: incidents (red: deserves a page, orange: a ticket, green: nothing) and notifications "
        "(red triangle: page, hollow: an update to an open page, grey bar: ticket or chat)",
        fontsize=9,
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
