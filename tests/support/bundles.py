"""Generate bundles in tests and read back every PromQL expression they contain."""

from __future__ import annotations

import json
import re
from pathlib import Path

import promql_parser
import yaml
from vllm_obs.cli import main as vllm_obs

# Links a responder could open: the defaults leave them unset, and alerts then carry none.
LINKS = {"grafana_url": "https://grafana.example.com", "runbook_url": "https://runbooks.example.com/runbooks.md"}
# Grafana's built-in variables, as a dashboard expands them for a 1h range.
GRAFANA_BUILTINS = {"$__rate_interval": "1m", "$__range": "1h", "$__interval": "15s"}


def generate(out: Path, *args: str, config: dict | None = None) -> Path:
    argv = ["generate", "--out", str(out), *args]
    if config is not None:
        path = out.parent / f"{out.name}-config.yml"
        path.write_text(yaml.safe_dump(config))
        argv += ["--config", str(path)]
    code = vllm_obs(argv)
    assert code == 0, f"vllm-obs {' '.join(argv)} exited {code}"
    return out


# The burn tiers judged one window at a time: they test the burn alert's text, which reads only
# recorded miss ratios, the same for any release or platform. The committed bundle, a user's
# thresholds and multi-cluster bundles run them; another release's or platform's may skip them.
BURN_ONE_WINDOW_FILE = "slo-burn-every-5m.test.yml"
# The SLO burn scenarios: most of promtool's time; a test of a rule outside the SLO groups skips them.
BURN_TEST_FILES = ("slo-burn.test.yml", BURN_ONE_WINDOW_FILE)
# The slo-burn cases of the 1h and 6h tiers are judged within this many minutes; those of the
# 1d and 3d tiers (their windows, floors and factors) after it.
BURN_FAST_TIERS_MINUTES = 90.0
# What a bundle of another release, platform or feature set leaves out of its promtool run
# (check_and_test's keywords): the one-window file, and the 1d and 3d tiers' cases, which test
# the same alert text too. Its own recordings are judged by the 1h and 6h tiers' cases.
ANOTHER_RELEASE = {"skip": (BURN_ONE_WINDOW_FILE,), "longest": BURN_FAST_TIERS_MINUTES}


def rule_test_files(bundle: Path, *, burn_rates: bool = True) -> list[str]:
    """The bundle's promtool test files, relative to it. burn_rates=False leaves out the slo-burn
    files, half of promtool's time: a test editing a rule outside the SLO groups cannot be caught there."""
    paths = sorted((bundle / "tests" / "rules").glob("*.test.yml"))
    return [str(p.relative_to(bundle)) for p in paths if burn_rates or p.name not in BURN_TEST_FILES]


def rule_exprs(bundle: Path) -> dict[str, str]:
    """rule name (record or alert, with a counter) -> expr, for every rule file."""
    out = {}
    for path in sorted((bundle / "alerts").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for i, rule in enumerate(group["rules"]):
                name = rule.get("record") or rule.get("alert")
                out[f"{path.name}:{group['name']}:{i}:{name}"] = rule["expr"]
    return out


def aggregation_clauses(bundle: Path) -> list[tuple[str, list[str]]]:
    """(rule, labels) of every `by (...)` and `on (...)` clause of the bundle's rules, but the joins
    that keep no partition label: absent() of the whole job returns the job alone, and how long
    Prometheus has scraped is one history per Prometheus (per cluster where kept)."""
    out = []
    for where, expr in rule_exprs(bundle).items():
        expr = expr.replace("unless on (job) absent(", "unless absent(")
        expr = expr.replace("on () group_left () max(time() - min_over_time(", "max(time() - min_over_time(")
        for clause in re.findall(r"\b(?:by|on) \(([^)]*)\)", expr):
            out.append((where, [label.strip() for label in clause.split(",")]))
    return out


def recorded_names(bundle: Path) -> set[str]:
    names = set()
    for path in (bundle / "alerts").glob("*.rules.yml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            names |= {r["record"] for r in group["rules"] if "record" in r}
    return names


def dashboard_panels(bundle: Path) -> list[tuple[str, dict]]:
    """(dashboard title, panel) for every non-row panel."""
    out = []
    for path in sorted((bundle / "dashboards").glob("*.json")):
        dash = json.loads(path.read_text())
        out += [(dash["title"], p) for p in dash["panels"] if p["type"] != "row"]
    return out


def dashboards(bundle: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((bundle / "dashboards").glob("*.json"))]


def panels_by_row(bundle: Path) -> list[tuple[str, str, dict]]:
    """(dashboard title, row title, panel) for every non-row panel, in layout order."""
    out = []
    for dash in dashboards(bundle):
        row = ""
        for panel in dash["panels"]:
            if panel["type"] == "row":
                row = panel["title"]
            else:
                out.append((dash["title"], row, panel))
    return out


def dashboard_variables(dash: dict, chosen: dict[str, str] | None = None) -> dict[str, str]:
    """$name -> value for the dashboard's own variables: `chosen` values, else each one's All value,
    then Grafana's built-ins. Only variables the dashboard defines: a query using another stays broken."""
    values = dict(GRAFANA_BUILTINS)
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            values["$" + var["name"]] = var["allValue"]
    values.update(chosen or {})
    return values


def expand(expr: str, values: dict[str, str]) -> str:
    """Substitute variables the way Grafana pastes them, longest names first."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(name, values[name])
    return expr


def substitute(expr: str, variables: dict[str, str] | None = None) -> str:
    values = {**GRAFANA_BUILTINS, **(variables or {})}
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(name, values[name])
    return re.sub(r"\$(job|instance|model_name|engine)\b", ".*", expr)


def dashboard_exprs(bundle: Path, variables: dict[str, str] | None = None) -> dict[str, str]:
    out = {}
    for title, panel in dashboard_panels(bundle):
        for target in panel["targets"]:
            out[f"{title} / {panel['title']} / {target['refId']}"] = substitute(target["expr"], variables)
    return out


def selected_names(expr: str) -> set[str]:
    """Metric names of every selector in a PromQL expression, from a real PromQL parser."""
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            else:
                for matcher in node.matchers.matchers:
                    if matcher.name == "__name__":
                        names.add(f"~{matcher.value}")

    promql_parser.walk(promql_parser.parse(expr), pre_visit=visit)
    return names


def exposed_sample_names(families: dict) -> set[str]:
    """Sample names a source's families put on /metrics."""
    out = set()
    for name, family in families.items():
        if family.type == "histogram":
            out |= {name + "_bucket", name + "_sum", name + "_count"}
        else:
            out.add(name)
    return out


def distinct_catalog_sources(catalog) -> list[tuple[str, str]]:
    """One (release, engine) per distinct family set of the catalog: releases whose families agree
    in every field get bundles that select the same series (test_bundle_queries.py shows it)."""
    seen: dict[tuple, tuple[str, str]] = {}
    for release in catalog.releases:
        for engine in release.engines:
            families = catalog.families(release.version, engine)
            key = (engine, tuple(sorted(_spec_key(spec) for spec in families.values())))
            seen.setdefault(key, (release.text, engine))
    return list(seen.values())


def _spec_key(spec) -> tuple:
    values = tuple(sorted((label, tuple(v)) for label, v in spec.label_values.items()))
    return (spec.name, spec.type, tuple(sorted(spec.labels)), values, spec.buckets, spec.when)
