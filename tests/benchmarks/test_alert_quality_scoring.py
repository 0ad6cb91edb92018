"""The scoring of an alert-quality run: which incident a notification belongs to, what it is,
and the figures per incident and over healthy time, checked by hand on small schedules."""

from __future__ import annotations

import math

import pytest

from benchmarks.alert_quality.scenario import parse_scenario
from benchmarks.alert_quality.scoring import Notification, Routing, model_finder, score

ROUTING = Routing(page=frozenset({"critical-pagerduty"}), ignore=frozenset({"watchdog-webhook"}))

# Two models; chat has an outage (page) from 10 to 20 min and a slow replica (ticket) from 60 to
# 70 min; code has a planned restart (must not notify) from 30 to 40 min. Two hours in all.
SCHEDULE = {
    "name": "scoring",
    "duration": "2h",
    "fleet": [
        {"model": "chat", "namespace": "llm-chat", "replicas": 6, "trace": "conv", "per_replica_rate": 1.0},
        {"model": "code", "namespace": "llm-code", "replicas": 4, "trace": "code", "per_replica_rate": 1.0},
    ],
    "incidents": [
        {
            "id": "outage",
            "kind": "engine_death",
            "at": "10m",
            "duration": "10m",
            "target": {"model": "chat", "fraction": 0.5},
            "expect": "page",
        },
        {
            "id": "slow",
            "kind": "slow_replica",
            "at": "60m",
            "duration": "10m",
            "factor": 3.0,
            "target": {"model": "chat", "replicas": 1},
            "expect": "ticket",
        },
        {
            "id": "restart",
            "kind": "rolling_restart",
            "at": "30m",
            "duration": "10m",
            "per_replica": "45s",
            "target": {"model": "code"},
            "expect": "none",
        },
    ],
}


@pytest.fixture(scope="module")
def scenario():
    return parse_scenario(SCHEDULE, "test")


def note(at, receiver, alertname, started=None, status="firing", group=None, **labels):
    return Notification(
        at=at,
        started=at if started is None else started,
        receiver=receiver,
        status=status,
        alerts=({"alertname": alertname, **labels},),
        # Alertmanager's group key; by default one group per alert and label set.
        group=group if group is not None else f"{alertname}{sorted(labels.items())}",
    )


def run(scenario, *notes, budgets=None, instances=None):
    return score(scenario, notes, ROUTING, model_finder(scenario, instances), budgets=budgets)


def by_id(result):
    return {row.id: row for row in result.incidents}


def test_a_page_in_time_is_what_an_outage_deserves(scenario):
    result = run(
        scenario,
        note(600 + 40, "warning-slack", "VllmEngineDead", model_name="chat"),
        note(600 + 55, "critical-pagerduty", "VllmModelCapacityLow", model_name="chat"),
        note(600 + 355, "critical-pagerduty", "VllmModelCapacityLow", model_name="chat"),  # a repeat
        budgets={"engine_death": 60},
    )
    outage = by_id(result)["outage"]
    # The repeat is the same group's post while its page is open: an update, not a second page.
    assert (outage.verdict, outage.pages, outage.page_updates, outage.tickets) == ("paged", 1, 1, 1)
    assert outage.notifications == 3
    assert outage.time_to_page == 55 and outage.time_to_notify == 40
    assert outage.alertnames == {"VllmEngineDead", "VllmModelCapacityLow"}
    assert outage.ok
    late = by_id(
        run(
            scenario,
            note(600 + 61, "critical-pagerduty", "X", model_name="chat"),
            budgets={"engine_death": 60},
        )
    )["outage"]
    assert late.verdict == "paged" and not late.ok


def test_a_missed_or_merely_ticketed_outage_is_not_ok(scenario):
    assert by_id(run(scenario))["outage"].verdict == "missed"
    ticketed = by_id(run(scenario, note(700, "warning-slack", "VllmEngineDead", model_name="chat")))["outage"]
    assert ticketed.verdict == "ticketed" and not ticketed.ok


def test_a_cause_deserves_a_ticket_and_no_page(scenario):
    ticket = note(3600 + 300, "warning-slack", "VllmHighTimeToFirstToken", model_name="chat")
    assert by_id(run(scenario, ticket))["slow"].ok
    paged = run(scenario, ticket, note(3600 + 320, "critical-pagerduty", "VllmTTFTBurn", model_name="chat"))
    assert not by_id(paged)["slow"].ok
    assert paged.undeserved_pages == 1 and paged.healthy_pages == 0


def test_an_event_that_must_not_notify_fails_on_a_ticket_and_its_page_counts_as_healthy(scenario):
    assert by_id(run(scenario))["restart"].ok
    ticket = run(scenario, note(1800 + 60, "warning-slack", "VllmTargetDown", namespace="llm-code"))
    assert by_id(ticket)["restart"].verdict == "ticketed" and not by_id(ticket)["restart"].ok
    page = run(scenario, note(1800 + 60, "critical-pagerduty", "VllmModelCapacityLow", namespace="llm-code"))
    assert page.healthy_pages == 1 and page.undeserved_pages == 1


def test_a_notification_belongs_by_when_its_alert_started_and_the_model(scenario):
    # Sent well after the outage, but its alert started within the window's grace (30 min after the end).
    late_start = note(
        1200 + 1700, "critical-pagerduty", "VllmAvailabilityBurn", started=1200 + 1700, model_name="chat"
    )
    assert by_id(run(scenario, late_start))["outage"].pages == 1
    # Started after the grace: about something else.
    after = run(scenario, note(1200 + 1801, "critical-pagerduty", "X", model_name="chat"))
    assert by_id(after)["outage"].pages == 0 and len(after.stray_pages) == 1
    # A repeat sent after the grace of an alert that started during the outage still belongs to it.
    repeat = note(1200 + 3000, "critical-pagerduty", "X", started=700, model_name="chat")
    assert by_id(run(scenario, repeat))["outage"].pages == 1
    # The same moment, another model: not this incident's.
    other = run(scenario, note(700, "critical-pagerduty", "X", model_name="code"))
    assert by_id(other)["outage"].pages == 0 and len(other.stray_pages) == 1


def with_burst(at: str, share: float):
    """The schedule with an error burst of 20 minutes on chat, overlapping its outage."""
    schedule = {**SCHEDULE, "incidents": [dict(i) for i in SCHEDULE["incidents"]]}
    burst = {"id": "burst", "kind": "error_burst", "at": at, "duration": "20m", "share": share}
    schedule["incidents"].append({**burst, "target": {"model": "chat"}, "expect": "page"})
    return parse_scenario(schedule, "test")


def test_an_overlapping_pair_of_incidents_is_accepted_and_both_are_scored():
    """A death during an error burst on one model: the parser accepts them, and every
    notification while both are open belongs to both, shown as shared."""
    both = with_burst("5m", 0.3)
    page = note(700, "critical-pagerduty", "VllmModelCapacityLow", model_name="chat")
    chat = note(400, "warning-slack", "VllmRequestErrors", model_name="chat")  # the burst alone then
    rows = by_id(run(both, page, chat, budgets={"engine_death": 300, "error_burst": 473}))
    assert (rows["outage"].pages, rows["outage"].tickets, rows["outage"].shared) == (1, 0, 1)
    assert (rows["burst"].pages, rows["burst"].tickets, rows["burst"].shared) == (1, 1, 1)
    assert rows["outage"].time_to_page == 100 and rows["burst"].time_to_page == 400
    assert rows["outage"].ok and rows["burst"].ok


def test_an_update_that_adds_an_overlapping_incident_s_alert_to_an_open_page_counts_for_it():
    """A death during a burst whose page is open: the update that adds the capacity alert started
    long after the page did, and belongs to the death as much as to the burst."""
    both = with_burst("4m", 0.1)
    burn = {"alertname": "VllmAvailabilityBudgetBurn", "model_name": "chat"}
    capacity = {"alertname": "VllmModelCapacityLow", "model_name": "chat"}
    opened = Notification(300, 290, "critical-pagerduty", "firing", (burn,), "g", starts=(290,))
    update = Notification(640, 290, "critical-pagerduty", "firing", (burn, capacity), "g", starts=(290, 620))
    rows = by_id(run(both, opened, update, budgets={"engine_death": 300, "error_burst": 473}))
    assert (rows["burst"].pages, rows["burst"].page_updates) == (1, 1)
    assert (rows["outage"].verdict, rows["outage"].time_to_page) == ("updated an open page", 40)
    assert rows["outage"].ok and rows["outage"].shared == 1
    # Known only by its earliest start (an older run's record), it belongs to the burst alone.
    bare = Notification(640, 290, "critical-pagerduty", "firing", (burn, capacity), "g")
    assert by_id(run(both, opened, bare))["outage"].verdict == "missed"
    # An alert of another model that started then says nothing of this model's outage.
    elsewhere = {**capacity, "model_name": "code"}
    mixed = Notification(640, 290, "critical-pagerduty", "firing", (burn, elsewhere), "g", starts=(290, 620))
    assert by_id(run(both, opened, mixed))["outage"].verdict == "missed"


def test_an_incident_that_deserves_less_is_not_failed_by_the_page_of_one_open_beside_it():
    """A rollout during a spike: the spike's page is shown on the rollout's row too, but the
    rollout is judged on the notifications nothing else open deserved."""
    schedule = {**SCHEDULE, "incidents": [dict(i) for i in SCHEDULE["incidents"]]}
    schedule["incidents"][2] = {**schedule["incidents"][2], "target": {"model": "chat"}, "at": "12m"}
    close = parse_scenario(schedule, "test")
    page = note(780, "critical-pagerduty", "VllmTimeToFirstTokenBudgetBurn", model_name="chat")
    rows = by_id(run(close, page))
    assert rows["restart"].pages == 1 and rows["restart"].ok
    # The same page with the outage gone: the rollout alone held it, and fails.
    alone = parse_scenario({**schedule, "incidents": schedule["incidents"][1:]}, "test")
    result = run(alone, page)
    assert not by_id(result)["restart"].ok and result.healthy_pages == 1


def test_the_model_comes_from_model_name_namespace_or_instance(scenario):
    instances = {"10.0.0.7:8000": "chat"}
    for labels in ({"model_name": "chat"}, {"namespace": "llm-chat"}, {"instance": "10.0.0.7:8000"}):
        result = run(scenario, note(700, "critical-pagerduty", "X", **labels), instances=instances)
        assert by_id(result)["outage"].pages == 1, labels
    nameless = run(
        scenario, note(700, "critical-pagerduty", "VllmMetricsAbsent", job="vllm"), instances=instances
    )
    assert by_id(nameless)["outage"].pages == 0 and len(nameless.stray_pages) == 1


def test_the_watchdog_and_resolved_posts_are_not_notifications(scenario):
    result = run(
        scenario,
        note(700, "watchdog-webhook", "WatchdogVllmObs"),
        note(5000, "watchdog-webhook", "WatchdogVllmObs"),
        note(900, "critical-pagerduty", "VllmModelCapacityLow", status="resolved", model_name="chat"),
    )
    assert by_id(result)["outage"].notifications == 0 and not result.stray_pages and not result.stray_tickets


def test_pages_per_day_on_100_replicas_over_healthy_time(scenario):
    # chat (6 replicas) is unhealthy from 10 to 50 min (outage + grace) and from 60 to 100 min
    # (slow + grace): 80 of its 120 minutes; code's restart must not notify, so all 120 of code's
    # 4 replicas' minutes are healthy. Healthy replica-seconds: 6 * 40 * 60 + 4 * 120 * 60.
    healthy = 6 * 40 * 60 + 4 * 120 * 60
    stray = note(7000, "critical-pagerduty", "X", model_name="code")
    result = run(scenario, stray, note(1800 + 60, "critical-pagerduty", "Y", model_name="code"))
    assert result.healthy_replica_seconds == healthy
    assert result.healthy_pages == 2
    assert math.isclose(result.pages_per_day_per_100, 2 / healthy * 86_400 * 100)
    assert run(scenario).pages_per_day_per_100 == 0


def test_chat_in_healthy_time_counts_stray_posts_and_a_planned_rollout_s(scenario):
    """Chat no incident deserved: outside every window, or held only by one that must not notify
    (code's restart); chat a ticket-worthy or page-worthy incident holds is that incident's."""
    result = run(
        scenario,
        note(7000, "warning-slack", "VllmQueueDepthHigh", model_name="code"),
        note(1800 + 60, "warning-slack", "VllmTargetDown", namespace="llm-code"),
        note(700, "warning-slack", "VllmEngineDead", model_name="chat"),
        note(3600 + 300, "warning-slack", "VllmHighTimeToFirstToken", model_name="chat"),
    )
    assert result.healthy_chat == 2
    assert by_id(result)["outage"].tickets == 1 and by_id(result)["slow"].tickets == 1
    assert run(scenario).healthy_chat == 0


def test_a_groups_updates_while_its_page_is_open_are_one_page(scenario):
    """PagerDuty keeps the posts of one group (one dedup key) in its open incident: the capacity
    page and the burn that joins its group later wake someone once; once the group resolves, its
    next firing post is a new page."""
    group = "{}/{severity=critical}:{model_name=chat}"
    result = run(
        scenario,
        note(640, "critical-pagerduty", "VllmModelCapacityLow", group=group, model_name="chat"),
        note(940, "critical-pagerduty", "VllmAvailabilityBudgetBurn", 900, group=group, model_name="chat"),
        note(1240, "critical-pagerduty", "VllmAvailabilityBudgetBurn", 900, group=group, model_name="chat"),
        # Another group of the same incident is a page of its own.
        note(1000, "critical-pagerduty", "VllmTimeToFirstTokenBudgetBurn", group="other", model_name="chat"),
        note(
            1500,
            "critical-pagerduty",
            "VllmAvailabilityBudgetBurn",
            900,
            "resolved",
            group,
            model_name="chat",
        ),
        note(1600, "critical-pagerduty", "VllmAvailabilityBudgetBurn", 1590, group=group, model_name="chat"),
    )
    outage = by_id(result)["outage"]
    assert (outage.pages, outage.page_updates) == (3, 2)
    assert outage.time_to_page == 40
    assert outage.notifications == 5


def test_a_post_to_chat_never_opens_or_closes_a_page(scenario):
    group = "{}:{model_name=chat}"
    result = run(
        scenario,
        note(640, "critical-pagerduty", "VllmModelCapacityLow", group=group, model_name="chat"),
        note(700, "warning-slack", "VllmModelCapacityLow", 640, "resolved", group, model_name="chat"),
        note(940, "critical-pagerduty", "VllmModelCapacityLow", 640, group=group, model_name="chat"),
        note(950, "warning-slack", "VllmModelCapacityLow", 640, group=group, model_name="chat"),
    )
    outage = by_id(result)["outage"]
    assert (outage.pages, outage.page_updates, outage.tickets) == (1, 1, 1)


def test_an_incident_whose_posts_only_update_an_open_page_is_counted_not_failed(scenario):
    """Its alerts reach a PagerDuty incident already open on its model: nobody is woken again,
    the person awake sees them; judged on when they came."""
    group = "{}:{model_name=chat}"
    result = run(
        scenario,
        note(300, "critical-pagerduty", "VllmAvailabilityBudgetBurn", group=group, model_name="chat"),
        note(640, "critical-pagerduty", "VllmModelCapacityLow", 620, group=group, model_name="chat"),
        budgets={"engine_death": 60},
    )
    outage = by_id(result)["outage"]
    assert (outage.verdict, outage.pages, outage.page_updates) == ("updated an open page", 0, 1)
    assert outage.time_to_page == 40 and outage.ok and len(result.stray_pages) == 1
    late = by_id(run(scenario, *result_notes(group), budgets={"engine_death": 30}))["outage"]
    assert late.verdict == "updated an open page" and not late.ok


def result_notes(group):
    return (
        note(300, "critical-pagerduty", "VllmAvailabilityBudgetBurn", group=group, model_name="chat"),
        note(640, "critical-pagerduty", "VllmModelCapacityLow", 620, group=group, model_name="chat"),
    )


def test_a_page_names_the_alerts_and_burn_tiers_that_opened_it_and_an_upgraded_models_new_name(scenario):
    schedule = {**SCHEDULE, "incidents": [dict(i) for i in SCHEDULE["incidents"]]}
    schedule["incidents"][2] = {
        "id": "restart",
        "kind": "model_upgrade",
        "at": "30m",
        "duration": "10m",
        "per_replica": "1m",
        "to": "code-v2",
        "target": {"model": "code"},
        "expect": "none",
    }
    upgraded = parse_scenario(schedule, "test")
    burn = Notification(
        at=700,
        started=700,
        receiver="critical-pagerduty",
        status="firing",
        alerts=(
            {"alertname": "VllmAvailabilityBudgetBurn", "long": "1h", "short": "5m", "model_name": "chat"},
            {"alertname": "VllmModelCapacityLow", "model_name": "chat"},
        ),
        group="g",
        resolved=({"alertname": "VllmModelCapacityLow", "model_name": "chat"},),
    )
    renamed = note(1900, "warning-slack", "VllmTargetDown", model_name="code-v2")
    rows = by_id(run(upgraded, burn, renamed))
    assert rows["outage"].paged_by == {"VllmAvailabilityBudgetBurn 1h/5m"}
    assert rows["restart"].tickets == 1 and not rows["restart"].ok
