"""Scoring a run: every notification Alertmanager sent, recorded by the webhook, judged against the
schedule of incidents. Which incident a notification belongs to, what a page is, and the figures per
incident and over healthy time: the README's `scoring.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from .scenario import Incident, Scenario

DAY = 86_400.0
PER_REPLICAS = 100  # the yardstick: pages per simulated day on 100 replicas
GRACE = 1800.0  # after an incident's end: the 30-minute short window of the slow burn tier


@dataclass(frozen=True)
class Notification:
    """One webhook post, its times in seconds after the start of the run."""

    at: float  # when the webhook received it
    started: float  # when its earliest firing alert started (startsAt)
    receiver: str
    status: str  # firing | resolved
    alerts: tuple[Mapping[str, str], ...]  # the label sets of its alerts, firing and resolved
    group: str = ""  # Alertmanager's group key (PagerDuty's dedup key)
    # Those of its alerts it reports resolved: which alert opened, kept or changed a page is
    # read from what was firing, not from a resolved alert Alertmanager still carries.
    resolved: tuple[Mapping[str, str], ...] = ()
    # When each of `alerts` started (startsAt), None for a resolved one; empty: only `started` is known.
    starts: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class Routing:
    """Which receivers page; which are not notifications at all (the watchdog's)."""

    page: frozenset[str]
    ignore: frozenset[str] = frozenset()

    def kind(self, n: Notification) -> str | None:
        if n.receiver in self.ignore:
            return None
        return "page" if n.receiver in self.page else "ticket"


@dataclass
class IncidentScore:
    id: str
    kind: str
    expect: str
    # Pages opened on the pager: a group's first firing post, or its first after resolving.
    pages: int = 0
    page_updates: int = 0  # firing posts to the pager for a group whose page is open
    tickets: int = 0
    time_to_page: float | None = None  # seconds from the incident's start to its first page
    time_to_notify: float | None = None  # to its first notification of any kind
    alertnames: set[str] = field(default_factory=set)
    budget: float | None = None  # the most time_to_page may be (None: no budget for this kind)
    shared: int = 0  # of its notifications, those another incident open then holds too
    # Pages and chat notifications no incident holding them deserved (see `explained`).
    own_pages: int = 0
    own_tickets: int = 0
    paged_by: set[str] = field(default_factory=set)  # the alerts firing in its new pages (burn tiers named)

    @property
    def notifications(self) -> int:
        return self.pages + self.page_updates + self.tickets

    @property
    def verdict(self) -> str:
        if self.pages:
            return "paged"
        # Its alerts only reached a page an earlier incident had opened: in front of its on-call.
        return "updated an open page" if self.page_updates else "ticketed" if self.tickets else "missed"

    @property
    def ok(self) -> bool:
        """What the incident deserves and nothing more: a post to the pager in time for `page` (a new
        page or an update to one open), chat and no page for `ticket`, neither for `none`; a notification
        another incident open then deserved does not fail it."""
        if self.expect == "page":
            reached = self.pages or self.page_updates
            return bool(reached) and (self.budget is None or self.time_to_page <= self.budget)
        if self.expect == "ticket":
            return not self.own_pages and bool(self.tickets)
        return not self.own_pages and not self.own_tickets


@dataclass
class Score:
    incidents: list[IncidentScore]
    stray_pages: list[Notification]  # pages of no incident
    stray_tickets: list[Notification]
    healthy_replica_seconds: float  # each replica's time outside its model's incident windows, summed
    undeserved: int = 0  # pages no incident holding them deserved, a ticket-worthy cause's included
    unexplained_healthy: int = 0  # of those, pages only incidents that must not notify held
    unexplained_chat: int = 0  # chat notifications only incidents that must not notify held

    @property
    def healthy_pages(self) -> int:
        """Pages while nothing deserved one: stray pages and pages only incidents that must not
        notify held."""
        return len(self.stray_pages) + self.unexplained_healthy

    @property
    def healthy_chat(self) -> int:
        """Chat notifications while nothing deserved one: stray ones and those only incidents that
        must not notify held (a planned rollout's)."""
        return len(self.stray_tickets) + self.unexplained_chat

    @property
    def undeserved_pages(self) -> int:
        """Every page no incident deserved, a ticket-worthy cause's included."""
        return len(self.stray_pages) + self.undeserved

    @property
    def pages_per_day_per_100(self) -> float:
        """Healthy pages per day of 100 replicas (a replica-day is one replica healthy for a day)."""
        if self.healthy_replica_seconds <= 0:
            return float("nan")
        return self.healthy_pages / self.healthy_replica_seconds * DAY * PER_REPLICAS


def model_finder(
    scenario: Scenario, instances: Mapping[str, str] | None = None
) -> Callable[[Mapping[str, str]], str | None]:
    """The model an alert is about, from its labels: model_name, else its namespace (each model of
    a scenario has its own), else its instance (`instances`: instance -> model)."""
    models = {m.model for m in scenario.fleet}
    namespaces = {m.namespace: m.model for m in scenario.fleet}
    by_instance = dict(instances or {})
    aliases = scenario.aliases()

    def model_of(labels: Mapping[str, str]) -> str | None:
        if labels.get("model_name") in models:
            return labels["model_name"]
        if labels.get("model_name") in aliases:
            return aliases[labels["model_name"]]
        if labels.get("namespace") in namespaces:
            return namespaces[labels["namespace"]]
        return by_instance.get(labels.get("instance", ""))

    return model_of


def classified(
    notifications: Iterable[Notification], routing: Routing
) -> Iterator[tuple[Notification, str, bool]]:
    """Each firing notification in the order received, with its kind (page or ticket) and
    whether it only updated a page still open: one its receiver and group opened and no
    resolved post has closed."""
    open_pages: set[tuple[str, str]] = set()  # (receiver, group) of every page still open
    for n in sorted(notifications, key=lambda n: n.at):
        kind = routing.kind(n)
        if kind is None:
            continue
        page = (n.receiver, n.group)
        if n.status != "firing":
            open_pages.discard(page)
            continue
        update = kind == "page" and page in open_pages
        if kind == "page":
            open_pages.add(page)
        yield n, kind, update


RANK = {"none": 0, "ticket": 1, "page": 2}


def firing_names(n: Notification) -> set[str]:
    """The alerts a post carries as firing, a burn tier's windows with its name."""
    resolved = [dict(a) for a in n.resolved]
    return {
        a.get("alertname", "") + (f" {a['long']}/{a['short']}" if "long" in a and "short" in a else "")
        for a in n.alerts
        if dict(a) not in resolved
    }


def score(
    scenario: Scenario,
    notifications: Iterable[Notification],
    routing: Routing,
    model_of: Callable[[Mapping[str, str]], str | None],
    budgets: Mapping[str, float] | None = None,
    grace: float = GRACE,
) -> Score:
    budgets = budgets or {}
    rows = {
        i.id: IncidentScore(
            # A budget by the incident's id (it may depend on its parameters), else by its kind.
            i.id,
            i.kind,
            i.expect,
            budget=budgets.get(i.id, budgets.get(i.kind)) if i.expect == "page" else None,
        )
        for i in scenario.incidents
    }
    stray_pages: list[Notification] = []
    stray_tickets: list[Notification] = []
    undeserved = unexplained_healthy = unexplained_chat = 0
    for n, kind, update in classified(notifications, routing):
        holding = _incidents_of(n, scenario.incidents, model_of, grace)
        if not holding:
            if not update:
                (stray_pages if kind == "page" else stray_tickets).append(n)
            continue
        # What the most deserving incident open then deserved: it explains this notification.
        deserved = max(RANK[i.expect] for i in holding)
        if kind == "page" and not update:
            undeserved += deserved < RANK["page"]
            unexplained_healthy += deserved == RANK["none"]
        if kind == "ticket":
            unexplained_chat += deserved == RANK["none"]
        for incident in holding:
            row = rows[incident.id]
            since = n.at - incident.at
            row.alertnames |= {a.get("alertname", "") for a in n.alerts}
            row.shared += len(holding) > 1
            if row.time_to_notify is None:
                row.time_to_notify = since
            if kind == "page" and row.time_to_page is None:
                row.time_to_page = since  # a new page, or an update to one open
            if update:
                row.page_updates += 1
            elif kind == "page":
                row.pages += 1
                row.paged_by |= firing_names(n)
                row.own_pages += deserved <= RANK[incident.expect] < RANK["page"]
            else:
                row.tickets += 1
                row.own_tickets += deserved == RANK["none"]
    return Score(
        incidents=[rows[i.id] for i in scenario.incidents],
        stray_pages=stray_pages,
        stray_tickets=stray_tickets,
        healthy_replica_seconds=sum(
            m.replicas * (scenario.duration - _covered(scenario, m.model, grace)) for m in scenario.fleet
        ),
        undeserved=undeserved,
        unexplained_healthy=unexplained_healthy,
        unexplained_chat=unexplained_chat,
    )


def _incidents_of(
    n: Notification,
    incidents: Iterable[Incident],
    model_of: Callable[[Mapping[str, str]], str | None],
    grace: float,
) -> list[Incident]:
    """Every incident on the notification's model whose window holds the start of one of its firing
    alerts: an update that adds a new incident's alert to a page open for another counts for both."""
    if n.starts:
        moments = [(model_of(a), t) for a, t in zip(n.alerts, n.starts, strict=True) if t is not None]
    else:
        moments = [(model, n.started) for model in {model_of(a) for a in n.alerts} - {None}]
    return [
        i
        for i in incidents
        if any(model == i.target.model and i.at <= t <= i.end + grace for model, t in moments)
    ]


def _covered(scenario: Scenario, model: str, grace: float) -> float:
    """Seconds of the run inside a window of an incident on `model` that deserves a notification
    (a window that must stay silent is healthy time)."""
    spans = sorted(
        (i.at, min(scenario.duration, i.end + grace))
        for i in scenario.incidents
        if i.expect != "none" and i.target.model == model
    )
    covered, reach = 0.0, 0.0
    for start, end in spans:
        start = max(start, reach)
        if end > start:
            covered += end - start
            reach = end
    return covered
