"""The figures of a run of several seeds: each one's median and range, rule sets side by side, and
this checkout's bundle against each other rule set row by row; a difference counts only where the
ranges do not overlap. Written to out/spread.json and out/report.md.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from .report import kept_clock

RANK = {"none": 0, "ticket": 1, "page": 2}


def figure(values: list[float | None]) -> dict:
    """Median and range of the seeds' values that exist, and how many exist."""
    seen = [v for v in values if v is not None]
    if not seen:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(seen), "min": min(seen), "max": max(seen), "n": len(seen)}


def _text(f: dict, unit: str = "") -> str:
    if f["n"] == 0:
        return "-"

    def num(x: float) -> str:
        return f"{x:.0f}" if unit == " s" or float(x).is_integer() else f"{x:.2f}"

    spread = "" if f["min"] == f["max"] else f" [{num(f['min'])}-{num(f['max'])}]"
    return f"{num(f['median'])}{unit}{spread}"


def combine(runs: dict[int, dict[str, dict]]) -> dict:
    """Per rule set, each incident's and the healthy time's figures over the seeds."""
    seeds = sorted(runs)
    first = runs[seeds[0]]
    out: dict = {"seeds": seeds, "rules": {}}
    any_summary = next(iter(first.values()))
    out["scenario"] = any_summary["scenario"]
    out["time_scale"] = any_summary["time_scale"]
    for rules in first:
        per_seed = [runs[s][rules] for s in seeds]
        rows = []
        for k, incident in enumerate(per_seed[0]["incidents"]):
            cells = [p["incidents"][k] for p in per_seed]
            rows.append(
                {
                    "id": incident["id"],
                    "kind": incident["kind"],
                    "expect": incident["expect"],
                    "ok": sum(c["ok"] for c in cells),
                    "of": len(cells),
                    "time_to_page_s": figure([c["time_to_page_s"] for c in cells]),
                    "budget_s": incident["budget_s"],
                    "pages": figure([c["pages"] for c in cells]),
                    "page_updates": figure([c.get("page_updates", 0) for c in cells]),
                    "chat": figure([c["tickets"] for c in cells]),
                    "shared": figure([c.get("shared", 0) for c in cells]),
                    "paged_by": sorted({a for c in cells for a in c.get("paged_by", [])}),
                }
            )
        healthy = [p["healthy"] for p in per_seed]
        health = [p["run"] for p in per_seed]
        out["rules"][per_seed[0].get("rules", rules)] = {
            "key": rules,
            "incidents": rows,
            "healthy": {
                "replica_days": figure([h["replica_seconds"] / 86_400 for h in healthy]),
                "pages": figure([h["pages"] for h in healthy]),
                "chat": figure([h.get("chat") for h in healthy]),
                "pages_per_day_per_100_replicas": figure(
                    [h["pages_per_day_per_100_replicas"] for h in healthy]
                ),
            },
            "run": {
                "kept_clock": all(kept_clock(r) for r in health),
                "simulation_most_behind_s": max(r.get("simulation_most_behind_s", 0.0) for r in health),
                "rule_group_iterations_missed": sum(r["rule_group_iterations_missed"] for r in health),
                "rule_group_iterations": sum(r["rule_group_iterations"] for r in health),
                "rule_evaluation_failures": sum(r["rule_evaluation_failures"] for r in health),
            },
        }
    names = list(out["rules"])
    mine = next((n for n in names if out["rules"][n]["key"] == "bundle"), None)
    out["comparisons"] = {
        other: compare(out["rules"][mine]["incidents"], out["rules"][other]["incidents"])
        for other in names
        if mine is not None and other != mine
    }
    return out


def _disjoint(a: dict, b: dict) -> bool:
    return a["n"] > 0 and b["n"] > 0 and (a["max"] < b["min"] or b["max"] < a["min"])


def compare(mine: list[dict], theirs: list[dict]) -> list[dict]:
    """The bundle's rows against another rule set's: `better`, `worse` or `as good`, first on what the
    incident deserves (in how many seeds), then beyond the seeds' spread on pages and time to page, or
    on notifications for one that deserves fewer; with what paged in each, which says why."""
    out = []
    for a, b in zip(mine, theirs, strict=True):
        verdict, on = "as good", ""
        if a["ok"] != b["ok"]:
            verdict, on = ("better" if a["ok"] > b["ok"] else "worse"), "seeds as it should"
        elif a["expect"] == "page":
            if _disjoint(a["pages"], b["pages"]):
                closer = abs(a["pages"]["median"] - 1) < abs(b["pages"]["median"] - 1)
                verdict, on = ("better" if closer else "worse"), "pages"
            elif _disjoint(a["time_to_page_s"], b["time_to_page_s"]):
                faster = a["time_to_page_s"]["median"] < b["time_to_page_s"]["median"]
                verdict, on = ("better" if faster else "worse"), "time to page"
        else:
            for key in ("pages", "chat"):
                if _disjoint(a[key], b[key]):
                    verdict, on = ("better" if a[key]["median"] < b[key]["median"] else "worse"), key
                    break
        why = ""
        if a["paged_by"] != b["paged_by"]:
            why = (
                f"paged by {', '.join(a['paged_by']) or 'nothing'}; "
                f"the other by {', '.join(b['paged_by']) or 'nothing'}"
            )
        out.append({"id": a["id"], "verdict": verdict, "on": on, "why": why})
    return out


def _cell(row: dict) -> str:
    ok = f"{row['ok']}/{row['of']}"
    ok = ok if row["ok"] == row["of"] else f"**{ok}**"
    parts = [ok]
    if row["time_to_page_s"]["n"]:
        budget = f" ({row['budget_s']:.0f})" if row["budget_s"] is not None else ""
        parts.append(f"{_text(row['time_to_page_s'], ' s')}{budget}")
    parts.append(
        f"pages {_text(row['pages'])}, updates {_text(row['page_updates'])}, chat {_text(row['chat'])}"
    )
    return "; ".join(parts)


def markdown(combined: dict) -> str:
    names = list(combined["rules"])
    s = combined["scenario"]
    lines = [
        f"# Alert quality: scenario `{s['name']}`, {len(combined['seeds'])} seeds "
        f"({', '.join(map(str, combined['seeds']))})",
        "",
        f"{s['duration_s'] / 3600:.2f} simulated hours of `{s['file']}` at {combined['time_scale']:g}x, each "
        "seed's own traffic and background. Each cell: the seeds that got what the incident deserves; "
        "the time to page, median [range] (budget from harm); pages, pager updates and chat "
        "notifications, median [range]. Each seed's own report is in seed-N/report.md.",
        "",
        "| incident | deserves | " + " | ".join(names) + " |",
        "| --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]
    for k, row in enumerate(combined["rules"][names[0]]["incidents"]):
        cells = [_cell(combined["rules"][n]["incidents"][k]) for n in names]
        shared = combined["rules"][names[0]]["incidents"][k]["shared"]
        overlap = " (overlaps another)" if shared["n"] and shared["max"] else ""
        lines.append(
            f"| {row['id']} ({row['kind']}){overlap} | {row['expect']} | " + " | ".join(cells) + " |"
        )
    lines.append(
        "| healthy time: pages (per day of 100 replicas) | 0 | "
        + " | ".join(
            f"{_text(combined['rules'][n]['healthy']['pages'])} "
            f"({_text(combined['rules'][n]['healthy']['pages_per_day_per_100_replicas'])}) over "
            f"{_text(combined['rules'][n]['healthy']['replica_days'])} replica-days"
            for n in names
        )
        + " |"
    )
    lines.append(
        "| healthy time: chat notifications | 0 | "
        + " | ".join(_text(combined["rules"][n]["healthy"]["chat"]) for n in names)
        + " |"
    )
    for other, rows in combined["comparisons"].items():
        lines += [
            "",
            f"## The bundle against `{other}`",
            "",
            "Better or worse only beyond the seeds' spread (their ranges do not overlap).",
            "",
            "| incident | the bundle is | on | why (what paged) |",
            "| --- | --- | --- | --- |",
        ]
        for row in rows:
            verdict = row["verdict"] if row["verdict"] != "worse" else "**worse**"
            lines.append(
                f"| {row['id']} | {verdict} | {row['on'] or '-'} | {row['why'] or 'the same alerts'} |"
            )
    lines += ["", "## The runs themselves", ""]
    for n in names:
        r = combined["rules"][n]["run"]
        lines.append(
            f"- {n}: the simulation at most {r['simulation_most_behind_s']:.0f} simulated seconds behind its "
            f"clock over every seed; {r['rule_group_iterations_missed']:.0f} missed of "
            f"{r['rule_group_iterations']:.0f} group evaluations, {r['rule_evaluation_failures']:.0f} failed. "
            + (
                "Every seed kept its clock."
                if r["kept_clock"]
                else "**Not of record**: a seed did not keep its clock."
            )
        )
    return "\n".join(lines) + "\n"


def write(out: Path, runs: dict[int, dict[str, dict]]) -> dict:
    combined = combine(runs)
    (out / "spread.json").write_text(json.dumps(combined, indent=1) + "\n")
    (out / "report.md").write_text(markdown(combined))
    return combined
