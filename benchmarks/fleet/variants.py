"""Edited copies of the generated rule files, to measure proposals before the generator changes;
each keeps every name alerts and dashboards read. The edits rewrite the shapes the generator writes
(`histogram_quantile(q, sum by (..., le) (rate(X_bucket{...}[w])))`) and fail loudly on others.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

VARIANTS = {
    "single_group": "every recording rule in one group, as before the rules were split by signal: "
    "what the split buys",
    "bucket_rate": "each histogram's per-replica bucket rate recorded once "
    "(job_instance_model:<signal>_bucket:rate5m); its per-replica quantiles read it "
    "(and its fleet quantiles, in bundles older than the recorded per-model bucket rate)",
    "trimmed": "without the recording rules that no alert, dashboard or other rule reads",
    "bucket_rate_trimmed": "bucket_rate and trimmed together",
    "proposal": "trimmed + per-replica bucket rates for TTFT and inter-token latency only (the "
    "alerting signals)",
}
# The SLO groups (vllm-obs.slo-<objective>) are left as the generator writes them: their long
# windows already come from recorded 5-minute rates, the former `slo_5m` variant, measured here
# (README: "Rule variants") before the generator adopted it.
SLO_GROUP_PREFIX = "vllm-obs.slo-"

LATENCY = re.compile(
    r"^histogram_quantile\((?P<q>[\d.]+), sum by \((?P<by>[^)]*)\) \(rate\((?P<metric>[^{]+)\{(?P<sel>[^}]*)\}\[(?P<w>\w+)\]\)\)\)$"
)
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def load(rule_files: list[Path]) -> dict[str, list[dict]]:
    return {str(p): yaml.safe_load(p.read_text())["groups"] for p in rule_files}


def write(name: str, rule_files: list[Path], outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    files = load(rule_files)
    recording_file = next(f for f in files if any(is_recording(g) for g in files[f]))
    alerts = [r for f in files for g in files[f] for r in g["rules"] if "alert" in r]
    groups = [dict(g) for g in files[recording_file]]
    recording = [g for g in groups if is_recording(g) and not g["name"].startswith(SLO_GROUP_PREFIX)]
    slo = [g for g in groups if is_recording(g) and g["name"].startswith(SLO_GROUP_PREFIX)]
    readers = [r["expr"] for r in alerts] + dashboard_exprs(Path(recording_file).parents[1] / "dashboards")

    if name == "single_group":
        recording = [{"name": "vllm-obs.recording", "rules": [r for g in recording for r in g["rules"]]}]
    if name in ("bucket_rate", "bucket_rate_trimmed"):
        recording = [{**g, "rules": bucket_rates(g["rules"])} for g in recording]
    if name == "proposal":
        only = ("time_to_first_token", "inter_token_latency")
        recording = [{**g, "rules": bucket_rates(g["rules"], only=only)} for g in recording]
    if name in ("trimmed", "bucket_rate_trimmed", "proposal"):
        slo_rules = [r for g in slo for r in g["rules"]]
        kept = trimmed([r for g in recording for r in g["rules"]], slo_rules, readers)
        recording = [{**g, "rules": [r for r in g["rules"] if r["record"] in kept]} for g in recording]
        recording = [g for g in recording if g["rules"]]
    others = [g for g in groups if not is_recording(g)]
    out = []
    for path, file_groups in files.items():
        target = outdir / Path(path).name
        if path == recording_file:
            file_groups = recording + slo + others
        target.write_text(yaml.safe_dump({"groups": file_groups}, sort_keys=False, width=200))
        out.append(target)
    return out


def is_recording(group: dict) -> bool:
    return any("record" in r for r in group["rules"])


def dashboard_exprs(dashboards: Path) -> list[str]:
    import json

    out = []
    for path in dashboards.glob("*.json"):
        stack = json.loads(path.read_text()).get("panels", [])
        while stack:
            panel = stack.pop()
            stack.extend(panel.get("panels", []))
            out.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
    return out


def bucket_rates(rules: list[dict], only: tuple[str, ...] | None = None) -> list[dict]:
    """Record sum by (job, instance, model_name, le) (rate(X_bucket[w])) once per histogram;
    every quantile of that histogram reads it."""
    out: list[dict] = []
    recorded: set[str] = set()
    for rule in rules:
        m = LATENCY.match(rule["expr"])
        level = rule["record"].split(":")[0]
        signal = rule["record"].split(":")[1]
        if not m or (only and not any(signal == f"vllm_{o}_seconds" for o in only)):
            out.append(rule)
            continue
        name = f"job_instance_model:{signal}_bucket:rate{m['w']}"
        if name not in recorded:
            recorded.add(name)
            out.append(
                {
                    "record": name,
                    "expr": f"sum by (job, instance, model_name, le) (rate({m['metric']}{{{m['sel']}}}[{m['w']}]))",
                }
            )
        if level == "job_instance_model":
            expr = f"histogram_quantile({m['q']}, {name})"
        elif level == "job_model":
            expr = f"histogram_quantile({m['q']}, sum by ({m['by']}) ({name}))"
        else:
            raise ValueError(f"unexpected level in {rule['record']}")
        out.append({"record": rule["record"], "expr": expr})
    return out


def trimmed(recording: list[dict], slo: list[dict], readers: list[str]) -> set[str]:
    """The recording rules an alert, a dashboard or a kept rule reads."""
    names = {r["record"] for r in recording}
    wanted = {n for expr in readers for n in _NAME.findall(expr) if n in names}
    wanted |= {n for r in slo for n in _NAME.findall(r["expr"]) if n in names}
    changed = True
    while changed:
        changed = False
        for rule in recording:
            if rule["record"] in wanted:
                for n in _NAME.findall(rule["expr"]):
                    if n in names and n not in wanted:
                        wanted.add(n)
                        changed = True
    return wanted


def recorded_names(files: list[Path]) -> list[str]:
    return [
        r["record"]
        for f in files
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    ]
