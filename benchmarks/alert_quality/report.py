"""A run's figures as Markdown (report.md beside results.json), and several runs side by side for
the README: `python -m benchmarks.alert_quality.report work/day/results.json [more ...]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# A run whose simulation fell further behind its clock than two scrape intervals, or whose
# Prometheus skipped an evaluation, timed its alerts on a clock it did not keep.
RECORD_BEHIND_S = 30.0


def kept_clock(run: dict) -> bool:
    behind = run.get("simulation_most_behind_s", run.get("simulation_behind_s", 0.0))
    return behind <= RECORD_BEHIND_S and not run.get("rule_group_iterations_missed", 0)


def clock_note(run: dict) -> str:
    if kept_clock(run):
        return "It kept its clock: its figures may be of record."
    return (
        f"**Not of record**: the simulation fell more than {RECORD_BEHIND_S:.0f} simulated seconds behind "
        "its clock or Prometheus missed evaluations (a loaded machine); run it again on an idle one, "
        "or at a slower --time-scale."
    )


def _time(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


def markdown(summary: dict) -> str:
    s, h, run = summary["scenario"], summary["healthy"], summary["run"]
    lines = [
        f"# Alert quality: scenario `{s['name']}`",
        "",
        f"Rules: {summary.get('rules', 'bundle')}. "
        f"Scenario file `{s['file']}`, seed {summary.get('seed', '-')}, {s['duration_s'] / 3600:.2f} simulated "
        f"hours at {summary['time_scale']:g}x the wall clock, engine profile `{summary['engine']}`, bundle "
        f"configuration {summary['config'] or 'the production defaults'}"
        + (", its own simulation (--separately)" if summary.get("separately") else "")
        + ".",
        "",
        _background(summary.get("background")),
        "",
        "Time to page: to the first post to the pager, a new page or an update to one open (budget: "
        "from the harm, budgets.py). Shared: notifications another incident open then holds too.",
        "",
        "| incident | kind | deserves | got | as it should | time to page (budget) | pages | pager updates "
        "| chat | shared | paged by | alerts |",
        "| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for i in summary["incidents"]:
        budget = f" ({_time(i['budget_s'])})" if i["budget_s"] is not None else ""
        lines.append(
            f"| {i['id']} | {i['kind']} | {i['expect']} | {i['verdict']} | {'yes' if i['ok'] else '**no**'} "
            f"| {_time(i['time_to_page_s'])}{budget} | {i['pages']} | {i.get('page_updates', 0)} | {i['tickets']} "
            f"| {i.get('shared', 0)} | {', '.join(i.get('paged_by', [])) or '-'} | {', '.join(i['alerts']) or '-'} |"
        )
    lines += [
        "",
        f"Healthy time: {h['replica_seconds'] / 86400:.2f} replica-days; pages in it {h['pages']} "
        f"({h['pages_per_day_per_100_replicas']:.2f} per day of 100 replicas); pages no incident "
        f"deserved, a ticket-worthy one's included: {h['undeserved_pages']}; chat in it "
        f"{h.get('chat', '-')} (a planned rollout's included).",
    ]
    for label, key in (("Stray pages", "stray_pages"), ("Stray tickets", "stray_tickets")):
        if h[key]:
            lines.append(f"{label} (no incident's window): " + "; ".join(", ".join(n) for n in h[key]) + ".")
    lines += [
        "",
        f"The run itself: {run['rule_evaluation_failures']:.0f} failed rule evaluations, "
        f"{run['rule_group_iterations_missed']:.0f} missed of {run['rule_group_iterations']:.0f} group "
        f"evaluations; the simulation at most {run.get('simulation_most_behind_s', run['simulation_behind_s']):.0f} "
        f"simulated seconds behind its clock, {run['simulation_behind_s']:.0f} at the end (its slowest step "
        f"{run['slowest_tick_wall_s']:.2f} s of wall time; notifications are timed on the fleet's own clock)"
        + (
            f"; it used {run['simulation_cores']:.2f} cores for the simulation and its serving, "
            f"{run['prometheus_cores']:.2f} for this rule set's Prometheus. "
            if "simulation_cores" in run
            else ". "
        )
        + clock_note(run),
        "",
    ]
    return "\n".join(lines)


def _background(b: dict | None) -> str:
    if not b:
        return "Background: none recorded."
    return (
        f"Background of every replica: {b['error_share']:.2%} of requests failed, {b['abort_share']:.1%} "
        f"abandoned by their client (after {b['abort_after']:g} s on average), a {b['client_timeout']:g} s "
        f"client timeout, the load swinging {b['rhythm']:.0%} over the day."
    )


def _cell(i: dict) -> str:
    got = i["verdict"] if i["ok"] else f"**{i['verdict']}**"
    if i["time_to_page_s"] is not None:
        got += f" in {i['time_to_page_s']:.0f} s"
    return f"{got}; {i['pages']} pages ({i.get('page_updates', 0)} updates), {i['tickets']} chat"


def side_by_side(summaries: list[dict]) -> str:
    """The rule sets judged on one run, an incident per row (bold: not what it deserves), then
    each rule set's own report."""
    first = summaries[0]
    s = first["scenario"]
    names = [x.get("rules", "bundle") for x in summaries]
    lines = [
        f"# Alert quality: scenario `{s['name']}`, rule sets side by side",
        "",
        f"One simulation ({s['duration_s'] / 3600:.2f} simulated hours of `{s['file']}` at "
        f"{first['time_scale']:g}x, engine profile `{first['engine']}`) watched by each rule set's own "
        "Prometheus and Alertmanager; a page is a notification group opened on the critical receiver "
        "(its updates while open are one PagerDuty incident, counted and shown, never failed); chat is "
        "every other notification.",
        "",
        "| incident | deserves | " + " | ".join(names) + " |",
        "| --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]
    rows = zip(*(x["incidents"] for x in summaries), strict=True)
    for row in rows:
        lines.append(
            f"| {row[0]['id']} ({row[0]['kind']}) | {row[0]['expect']} | "
            + " | ".join(map(_cell, row))
            + " |"
        )
    lines.append(
        "| healthy time: pages per day of 100 replicas | 0 | "
        + " | ".join(f"{x['healthy']['pages_per_day_per_100_replicas']:.2f}" for x in summaries)
        + " |"
    )
    lines.append(
        "| healthy time: chat notifications | 0 | "
        + " | ".join(str(x["healthy"].get("chat", "-")) for x in summaries)
        + " |"
    )
    lines.append("")
    body = [markdown(x).replace("# Alert quality", "## Alert quality", 1) for x in summaries]
    return "\n".join(lines) + "\n" + "\n".join(body)


def main(argv: list[str] | None = None) -> int:
    paths = argv if argv is not None else sys.argv[1:]
    if not paths:
        print("give one or more results.json files of benchmarks.alert_quality.run.", file=sys.stderr)
        return 2
    for path in paths:
        try:
            print(markdown(json.loads(Path(path).read_text())))
        except (OSError, ValueError, KeyError, TypeError):
            print(
                f"{path} is not a results.json of benchmarks.alert_quality.run; give one it wrote.",
                file=sys.stderr,
            )
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
