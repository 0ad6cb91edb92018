"""The drill report: one Markdown file and one picture per scenario, drawn with matplotlib from the
drill Prometheus's data: the scenario's signals, the alerts' firing intervals shaded behind them,
and a strip with one bar per alert and a mark per notification."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tests.support.drill_stack import CHAT, PAGER

from .catalog import SCENARIOS, Scenario
from .harness import Panel, Part, range_query
from .run import CONFIG, SLOW_START, Drill

STATES = ["unknown", "starting", "loading", "ready", "stopping", "stopped", "failed_start", "dead"]
MARKS = {PAGER: ("v", "#b00000", "pager"), CHAT: ("o", "#1f4fbf", "chat")}


def write_report(drill: Drill, out: Path) -> Path:
    """Write report.md and the pictures into out (replacing an earlier report there)."""
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".drill-report-", dir=out))
    try:
        for scenario in SCENARIOS:
            draw(drill, scenario, staging / scenario.picture)
        (staging / "report.md").write_text(markdown(drill), "utf-8")
        for old in out.glob("*.png"):
            old.unlink()
        for made in staging.iterdir():
            os.replace(made, out / made.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out / "report.md"


# -- data ----------------------------------------------------------------------------------------


def window(part: Part) -> tuple[float, float]:
    end = part.end if part.end is not None else part.start + 1
    return part.start - 3, end


def origin(part: Part) -> float:
    return part.trigger if part.trigger is not None else part.start


def alert_spans(drill: Drill, part: Part) -> dict[str, list[tuple[float, float]]]:
    """'Alert (severity)' -> firing intervals, for the part's instance."""
    since, until = window(part)
    spans: dict[str, list[tuple[float, float]]] = {}
    for series in range_query(
        drill.stack, f'ALERTS{{alertstate="firing", instance="{part.instance}"}}', since, until
    ):
        labels = series["metric"]
        name = labels["alertname"] + (
            f" ({labels['severity']})" if labels.get("severity") == "critical" else ""
        )
        times = sorted(float(t) for t, _ in series["values"])
        merged: list[list[float]] = []
        for t in times:
            if merged and t - merged[-1][1] <= 1.5:
                merged[-1][1] = t
            else:
                merged.append([t, t])
        spans.setdefault(name, []).extend((a, b + 1) for a, b in merged)
    return dict(sorted(spans.items(), key=lambda kv: min(a for a, _ in kv[1])))


def notifications(drill: Drill, part: Part) -> list[tuple[float, str, str, str]]:
    """(time, receiver, alert label, status) for notifications about the part's instance."""
    since, until = window(part)
    out = []
    for note in drill.stack.recorder.records(since, until):
        if note.receiver not in (PAGER, CHAT):
            continue
        for alert in note.alerts:
            labels = alert["labels"]
            if labels.get("instance") != part.instance:
                continue
            name = labels["alertname"] + (
                f" ({labels['severity']})" if labels.get("severity") == "critical" else ""
            )
            out.append((note.received, note.receiver, name, alert["status"]))
    return sorted(set(out))


# -- pictures ------------------------------------------------------------------------------------


def draw(drill: Drill, scenario: Scenario, path: Path) -> None:
    """One block of plots per part, stacked; every block shares its part's time axis."""
    parts = drill.results[scenario.key].parts
    if not parts:
        fig, ax = plt.subplots(figsize=(8, 2))
        ax.axis("off")
        ax.text(0.5, 0.5, f"{scenario.heading}: did not run", ha="center", va="center", fontsize=12)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return
    heights = [strip_height(drill, p) + 1.45 * len(p.panels) + (0.4 if len(parts) > 1 else 0) for p in parts]
    fig = plt.figure(figsize=(9, sum(heights) + 0.5), constrained_layout=True)
    fig.suptitle(scenario.heading, fontsize=13, fontweight="bold")
    blocks = fig.subfigures(len(parts), 1, height_ratios=heights, squeeze=False)[:, 0]
    for block, part in zip(blocks, parts, strict=True):
        ratios = [strip_height(drill, part)] + [1.45] * len(part.panels)
        axes = block.subplots(len(ratios), 1, sharex=True, gridspec_kw={"height_ratios": ratios})
        if len(parts) > 1:
            block.suptitle(part.title, fontsize=10, x=0.01, ha="left")
        draw_part(drill, part, list(axes))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def strip_height(drill: Drill, part: Part) -> float:
    return 0.5 + 0.28 * max(1, len(alert_spans(drill, part)))


def colours_for(spans: dict[str, list]) -> dict[str, str]:
    """Reds for critical alerts, oranges and browns for warnings, in order of appearance."""
    critical = iter(["#c62828", "#8e0000", "#e57373", "#ad1457"] * 3)
    warning = iter(["#ef8a00", "#b8860b", "#8d6e63", "#fbc02d", "#6d4c41"] * 3)
    return {name: next(critical) if name.endswith("(critical)") else next(warning) for name in spans}


def draw_part(drill: Drill, part: Part, axes: list) -> None:
    zero = origin(part)
    since, until = window(part)
    spans = alert_spans(drill, part)
    colours = colours_for(spans)

    strip = axes[0]
    names = list(spans) or ["(no alert fired)"]
    for row, name in enumerate(names):
        for a, b in spans.get(name, []):
            strip.barh(row, b - a, left=a - zero, height=0.55, color=colours.get(name, "#999"), alpha=0.85)
    for at, receiver, name, status in notifications(drill, part):
        if status != "firing" or name not in spans:
            continue
        marker, colour, _ = MARKS[receiver]
        # The pager's mark above the bar, the chat's below: both show when they arrive together.
        offset = -0.3 if receiver == PAGER else 0.3
        strip.plot(
            at - zero,
            names.index(name) + offset,
            marker=marker,
            color=colour,
            markersize=6,
            markeredgecolor="white",
        )
    strip.set_yticks(range(len(names)))
    strip.set_yticklabels(names, fontsize=7)
    strip.set_ylim(len(names) - 0.4, -0.6)
    handles = [
        plt.Line2D([], [], marker=m, color=c, linestyle="", markersize=6, label=f"notified: {label}")
        for m, c, label in MARKS.values()
    ]
    strip.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0), framealpha=0.8)
    # The part's events, numbered as in the report's timeline, along the top.
    marks = [(at - zero, str(n)) for n, (at, _) in enumerate(numbered_events(part), 1)]
    top = strip.secondary_xaxis("top")
    top.set_xticks([x for x, _ in marks], labels=[label for _, label in marks], fontsize=7)
    top.tick_params(length=3, pad=1)

    for ax, panel in zip(axes[1:], part.panels, strict=True):
        draw_panel(drill, part, panel, ax, zero, since, until)
        for name, intervals in spans.items():
            for a, b in intervals:
                ax.axvspan(a - zero, b - zero, color=colours[name], alpha=0.13, linewidth=0)
    for ax in axes:
        ax.set_xlim(since - zero, until - zero)
        ax.axvline(0, color="black", linestyle="--", linewidth=0.8)
        for x, _ in marks:
            if x != 0:
                ax.axvline(x, color="#555", linestyle=":", linewidth=0.7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25)
    axes[-1].set_xlabel(f"seconds after: {part.trigger_label or 'start'}", fontsize=8)


def numbered_events(part: Part) -> list[tuple[float, str]]:
    return sorted(part.events)


def draw_panel(drill: Drill, part: Part, panel: Panel, ax, zero: float, since: float, until: float) -> None:
    ax.set_title(panel.title, fontsize=8, loc="left")
    if panel.kind == "state":
        points = []
        for _legend, expr in panel.series:
            for series in range_query(drill.stack, expr.replace("{i}", part.instance), since, until):
                state = series["metric"].get("state", "unknown")
                points += [
                    (float(t) - zero, STATES.index(state) if state in STATES else 0)
                    for t, _ in series["values"]
                ]
        points.sort()
        if points:
            xs, ys = zip(*points, strict=True)
            ax.step(xs, ys, where="post", color="#333", linewidth=1.4)
        ax.set_yticks(range(len(STATES)))
        ax.set_yticklabels(STATES, fontsize=6)
        ax.set_ylim(-0.5, len(STATES) - 0.5)
        return
    drawn = False
    for legend, expr in panel.series:
        for series in range_query(drill.stack, expr.replace("{i}", part.instance), since, until):
            values = [(float(t) - zero, float(v)) for t, v in series["values"]]
            if values:
                xs, ys = zip(*values, strict=True)
                ax.plot(xs, ys, linewidth=1.3, label=legend)
                drawn = True
    for label, value in panel.thresholds:
        ax.axhline(value, color="#b00000", linestyle=":", linewidth=1)
        ax.annotate(
            f"{label} {value:g}",
            (1, value),
            xycoords=("axes fraction", "data"),
            fontsize=6,
            color="#b00000",
            ha="right",
            va="bottom",
        )
    if panel.ylim:
        ax.set_ylim(*panel.ylim)
    if not drawn:
        ax.text(
            0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", fontsize=8, color="#777"
        )
    elif len(panel.series) > 1:
        ax.legend(fontsize=6, loc="upper left")


# -- Markdown --------------------------------------------------------------------------------------


def clock(at: float) -> str:
    return dt.datetime.fromtimestamp(at, tz=dt.timezone.utc).strftime("%H:%M:%S")


def minutes(total: float) -> str:
    return f"{int(total // 60)} min {int(total % 60):02d} s"


def versions() -> str:
    found = []
    for name, command in (("Prometheus", "prometheus"), ("Alertmanager", "prometheus-alertmanager")):
        path = shutil.which(command)
        if path:
            first = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.splitlines()
            found.append(f"{name} {first[0].split()[2] if first else '?'}")
    return ", ".join(found)


def markdown(drill: Drill) -> str:
    config = drill.config
    prom, alerts, am = config["prometheus"], config["alerts"], config["alertmanager"]
    lines = [
        "# Live drills",
        "",
        "Every failure mode the alerts are written for, produced for real on vLLM 0.32.0 (CPU build, the",
        "tiny test model), watched by the log exporter and the canary probe, a real Prometheus loaded with",
        "the bundle generated from the live server's `/metrics`, and a real Alertmanager with the generated",
        "routing, every receiver pointed at a local webhook that records what it is sent. Critical alerts",
        "go to the **pager** and also the **chat**, warnings to the chat only.",
        "",
        f"Written by `make drill` on {dt.datetime.fromtimestamp(drill.started, tz=dt.timezone.utc):%Y-%m-%d %H:%M} UTC "
        f"({platform.machine()}, {os.cpu_count()} cores; {versions()}).",
        "",
        f"The drill configuration ([`tests/drills/{CONFIG.name}`](../../tests/drills/{CONFIG.name})) changes "
        "only intervals, windows, `for` durations and thresholds: scrape and evaluation every "
        f"{prom['scrape_interval']}, rate windows of {alerts['rate_window']}, Alertmanager `group_wait` "
        f"{am['group_wait']} and `group_interval` {am['group_interval']}. What fires here fires in production "
        "with the production clock.",
        "",
        f"**Drill time: {minutes(drill.finished - drill.started)}** (servers started: "
        + ", ".join(f"{name} in {s:.0f} s" for name, s in drill.server_starts)
        + f"). Load average at the start and the end: {drill.load_before} / {drill.load_after}.",
        "",
    ]
    for error in drill.phase_errors:
        lines += [f"**A phase stopped early:** `{error}`", ""]
    lines += [
        "| # | scenario | result | first notification of each expected alert (after the trigger) |",
        "|---|---|---|---|",
    ]
    for scenario in SCENARIOS:
        result = drill.results[scenario.key]
        verdict = "pass" if result.parts and not result.failures else "**FAIL**"
        reached = "; ".join(
            f"{x.alert} ({x.severity}) → {x.receiver} {x.seconds:+.1f} s"
            for p in result.parts
            for x in p.latencies
        )
        anchor = scenario.heading.lower().replace(" ", "-")
        anchor = "".join(c for c in anchor if c.isalnum() or c == "-")
        lines.append(f"| {scenario.number} | [{scenario.title}](#{anchor}) | {verdict} | {reached or '-'} |")
    lines += ["", *doctor_section(drill)]
    for scenario in SCENARIOS:
        lines += ["", *scenario_section(drill, scenario)]
    return "\n".join(lines) + "\n"


def doctor_section(drill: Drill) -> list[str]:
    lines = ["## `vllm-obs doctor` on the drill stack", ""]
    run = drill.doctor
    if run is None:
        return lines + ["The doctor did not run (the phase before it stopped)."]
    verdict = next((line for line in reversed(run.output.splitlines()) if line.strip()), "")
    lines += [
        f"Run at {clock(run.at)} UTC on server A's stack, after the latency and queue scenarios, with two clients "
        "sending short completions, against the bundle and the configuration it was generated with; it took "
        f"{run.seconds:.1f} s and exited **{run.code}**.",
        "",
        f"Verdict: `{verdict.strip()}`",
        "",
        "```text",
        "$ vllm-obs doctor --prometheus PROMETHEUS --alertmanager ALERTMANAGER --bundle BUNDLE --config CONFIG",
        run.output.rstrip(),
        "```",
    ]
    return lines


def scenario_section(drill: Drill, scenario: Scenario) -> list[str]:
    result = drill.results[scenario.key]
    lines = [f"## {scenario.heading}", ""]
    if not result.parts:
        reason = "; ".join(drill.phase_errors) or "not reached"
        return lines + [f"**Did not run**: {reason}"]
    lines += [f"![{scenario.title}]({scenario.picture})", ""]
    for part in result.parts:
        if len(result.parts) > 1:
            lines += [f"### {part.title}", ""]
        lines += [*part.done, ""]
        zero = origin(part)
        load = f" (load average {part.load:.1f})" if part.load is not None else ""
        lines += [
            f"Server `{part.instance}`; trigger at {clock(zero)} UTC{load}: {part.trigger_label or '-'}.",
            "",
        ]
        if part.error:
            lines += [f"**Error:** `{part.error}`", ""]
        lines += ["| t (s) | what happened |", "|---:|---|"]
        timeline = [(at, f"[{n}] {text}") for n, (at, text) in enumerate(numbered_events(part), 1)]
        for at, receiver, name, status in notifications(drill, part):
            where = MARKS[receiver][2]
            timeline.append((at, f"{name} **{status}** → {where}"))
        for at, text in sorted(timeline):
            lines.append(f"| {at - zero:+.1f} | {text} |")
        lines += ["", "| check | result | detail |", "|---|---|---|"]
        for check in part.checks:
            verdict = "ok" if check.ok else "**FAIL**"
            lines.append(f"| {check.description} | {verdict} | {check.detail} |")
        if part.latencies:
            lines += [
                "",
                "Detection latency (trigger → notification): "
                + "; ".join(
                    f"{x.alert} ({x.severity}) → {x.receiver} {x.seconds:.1f} s" for x in part.latencies
                )
                + ".",
            ]
        if part.facts:
            lines += ["", "Measured: " + "; ".join(part.facts) + "."]
        lines.append("")
    if scenario.key == "lifecycle":
        lines.append(
            f"The slow-start part runs with [`tests/drills/{SLOW_START.name}`](../../tests/drills/{SLOW_START.name}) "
            "on top of the drill configuration."
        )
    return lines
