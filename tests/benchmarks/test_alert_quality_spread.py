"""A run of several seeds: each figure's median and range, and the bundle against another rule
set row by row, better or worse only beyond the seeds' spread; checked by hand on three seeds."""

from __future__ import annotations

from benchmarks.alert_quality import spread


def summary(rules: str, seed: int, rows: list[tuple], healthy_pages: int = 0) -> dict:
    """rows: (id, expect, ok, time_to_page_s, pages, page_updates, chat, paged_by)."""
    return {
        "scenario": {"name": "t", "file": "t.yaml", "duration_s": 7200},
        "time_scale": 30,
        "rules": rules,
        "seed": seed,
        "incidents": [
            {
                "id": i,
                "kind": "engine_death",
                "expect": expect,
                "ok": ok,
                "time_to_page_s": ttp,
                "budget_s": 300 if expect == "page" else None,
                "pages": pages,
                "page_updates": updates,
                "tickets": chat,
                "shared": 0,
                "paged_by": paged_by,
            }
            for i, expect, ok, ttp, pages, updates, chat, paged_by in rows
        ],
        "healthy": {
            "replica_seconds": 86_400 * 2,
            "pages": healthy_pages,
            "pages_per_day_per_100_replicas": healthy_pages * 50.0,
        },
        "run": {
            "rule_evaluation_failures": 0,
            "rule_group_iterations_missed": seed,
            "rule_group_iterations": 100,
            "simulation_most_behind_s": 2.0 * seed,
        },
    }


CAP = ["VllmModelCapacityLow"]
BURN = ["VllmTimeToFirstTokenBudgetBurn 6h/30m"]


def three_seeds() -> dict:
    bundle = {
        1: [("outage", "page", True, 60, 1, 2, 3, CAP), ("restart", "none", True, None, 0, 0, 0, [])],
        2: [("outage", "page", True, 70, 1, 0, 4, CAP), ("restart", "none", True, None, 0, 0, 0, [])],
        3: [("outage", "page", True, 65, 1, 1, 2, CAP), ("restart", "none", True, None, 0, 0, 0, [])],
    }
    workbook = {
        1: [("outage", "page", True, 62, 2, 0, 3, CAP + BURN), ("restart", "none", True, None, 0, 0, 0, [])],
        2: [("outage", "page", True, 80, 2, 0, 3, CAP + BURN), ("restart", "none", False, None, 0, 0, 1, [])],
        3: [("outage", "page", True, 64, 3, 1, 3, CAP + BURN), ("restart", "none", True, None, 0, 0, 0, [])],
    }
    return {
        s: {
            "bundle": summary("bundle", s, bundle[s]),
            "workbook": summary("workbook", s, workbook[s], s == 2),
        }
        for s in (1, 2, 3)
    }


def test_each_figure_is_the_median_and_range_of_the_seeds():
    combined = spread.combine(three_seeds())
    outage = combined["rules"]["bundle"]["incidents"][0]
    assert outage["time_to_page_s"] == {"median": 65, "min": 60, "max": 70, "n": 3}
    assert outage["page_updates"] == {"median": 1, "min": 0, "max": 2, "n": 3}
    assert (outage["ok"], outage["of"]) == (3, 3)
    restart = combined["rules"]["bundle"]["incidents"][1]
    assert restart["time_to_page_s"]["n"] == 0  # never paged: no time
    healthy = combined["rules"]["workbook"]["healthy"]
    assert healthy["pages"] == {"median": 0, "min": 0, "max": 1, "n": 3}
    assert combined["rules"]["bundle"]["run"]["rule_group_iterations_missed"] == 6
    assert combined["rules"]["bundle"]["run"]["simulation_most_behind_s"] == 6.0
    # Seed 1 missed an evaluation (its rule_group_iterations_missed is its seed): not of record.
    assert combined["rules"]["bundle"]["run"]["kept_clock"] is False


def test_the_bundle_against_another_rule_set_differs_only_beyond_the_spread():
    rows = {r["id"]: r for r in spread.combine(three_seeds())["comparisons"]["workbook"]}
    # One page on every seed against two or three: better, on pages, and the report says why.
    assert (rows["outage"]["verdict"], rows["outage"]["on"]) == ("better", "pages")
    assert "VllmTimeToFirstTokenBudgetBurn 6h/30m" in rows["outage"]["why"]
    # The rollout got what it deserves on 3 seeds of 3 against 2 of 3.
    assert (rows["restart"]["verdict"], rows["restart"]["on"]) == ("better", "seeds as it should")


def test_times_to_page_whose_ranges_overlap_are_as_good():
    seeds = three_seeds()
    for s in seeds:
        for row in seeds[s]["workbook"]["incidents"]:
            row["pages"] = 1
            row["paged_by"] = CAP
        seeds[s]["workbook"]["incidents"][1]["ok"] = True
        seeds[s]["workbook"]["incidents"][1]["tickets"] = 0
    rows = {r["id"]: r for r in spread.combine(seeds)["comparisons"]["workbook"]}
    # 60-70 s against 62-80 s: within each other's spread.
    assert rows["outage"]["verdict"] == "as good" and rows["outage"]["why"] == ""
    # Beyond it: the workbook 100 s later on every seed.
    for s in seeds:
        seeds[s]["workbook"]["incidents"][0]["time_to_page_s"] += 100
    rows = {r["id"]: r for r in spread.combine(seeds)["comparisons"]["workbook"]}
    assert (rows["outage"]["verdict"], rows["outage"]["on"]) == ("better", "time to page")


def test_only_a_run_that_kept_its_clock_may_be_of_record():
    seeds = three_seeds()
    for s in seeds:
        for rules in seeds[s].values():
            rules["run"]["rule_group_iterations_missed"] = 0
    assert spread.combine(seeds)["rules"]["bundle"]["run"]["kept_clock"] is True
    seeds[3]["bundle"]["run"]["simulation_most_behind_s"] = 31.0  # two scrape intervals and more
    assert spread.combine(seeds)["rules"]["bundle"]["run"]["kept_clock"] is False
    assert spread.combine(seeds)["rules"]["workbook"]["run"]["kept_clock"] is True


def test_the_report_shows_medians_ranges_and_the_comparison(tmp_path):
    spread.write(tmp_path, three_seeds())
    text = (tmp_path / "report.md").read_text()
    assert "3 seeds (1, 2, 3)" in text
    assert (
        "| outage (engine_death) | page | 3/3; 65 s [60-70] (300); pages 1, updates 1 [0-2], chat 3 [2-4] |"
        in text
    )
    assert "## The bundle against `workbook`" in text
    assert (tmp_path / "spread.json").is_file()
    assert "**Not of record**: a seed did not keep its clock." in text
