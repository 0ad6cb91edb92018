"""The rules some alerts need, and promtool runs on just those rules. An alert reads only series, so
with the recording rules it reads, each in its group and place, promtool gives the same verdict for
a fraction of the work. Reading named alerts' ALERTS brings them in; reading any alert's, no slice."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from vllm_obs.promql import seconds

from tests.support.monitoring import binary

ALERT_FILE = "vllm-alerts.rules.yml"
RECORDING_FILE = "vllm-recording.rules.yml"
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


Substitute = tuple[int, int, dict]  # (group index, rule index, the rule to put there)


@dataclass(frozen=True)
class Slice:
    alerts: frozenset[str]  # the alerts kept
    recording: str  # the recording rules file with only the rules they read
    groups: frozenset[str]  # every group kept (for group_eval_order)


def narrowed(test: dict, groups: set[str] | frozenset[str]) -> dict:
    """A promtool test file whose group_eval_order names only the groups kept."""
    if "group_eval_order" not in test:
        return test
    return {**test, "group_eval_order": [g for g in test["group_eval_order"] if g in groups]}


# A read of named alerts' state: ALERTS{alertname="..." or alertname=~"A|B", ...}, or an
# alert's ALERTS_FOR_STATE compared with 0 (its labels, whatever the time it became active).
_READS_ALERT = re.compile(r'ALERTS(?:_FOR_STATE)?\{alertname=~?"([A-Za-z0-9_|]+)"[^{}]*\}(?: > bool 0)?')


def alerts_read(expr: str) -> set[str]:
    """The alerts whose state (ALERTS) an expression reads by name (`alertname="A"` or
    `alertname=~"A|B"`)."""
    return {name for names in _READS_ALERT.findall(expr) for name in names.split("|")}


def named_alerts(case: dict) -> frozenset[str]:
    """The alerts one promtool test case judges: those its alert_rule_test names and those
    whose state (ALERTS) its expression tests read."""
    named = {c["alertname"] for c in case.get("alert_rule_test", [])}
    for test in case.get("promql_expr_test", []):
        named.update(alerts_read(test["expr"]))
    return frozenset(named)


def span_minutes(case: dict) -> float:
    """The last evaluation time a promtool test case judges, in minutes."""
    times = [c["eval_time"] for c in case.get("alert_rule_test", []) + case.get("promql_expr_test", [])]
    return max((seconds(t) / 60 for t in times), default=0.0)


def reads_recorded(case: dict) -> bool:
    """Whether an expression test of the case reads anything but an alert's state: it may read
    any recorded series, so the case runs on the whole rules."""
    return any(_READS_ALERT.fullmatch(t["expr"]) is None for t in case.get("promql_expr_test", []))


def _kept(rules: dict, keep, substitute: Substitute | None = None) -> str:
    """The rules file with only the rules `keep` accepts, each group in place (empty ones left
    out), and `substitute` in place of the rule it names."""
    groups = []
    for g, group in enumerate(rules["groups"]):
        chosen = [
            substitute[2] if substitute and (g, r) == substitute[:2] else rule
            for r, rule in enumerate(group["rules"])
            if keep(rule)
        ]
        if chosen:
            groups.append({**group, "rules": chosen})
    return yaml.safe_dump({**rules, "groups": groups}, sort_keys=False, width=1000)


class RuleFiles:
    """A bundle's alerting and recording rules, parsed."""

    def __init__(self, root: Path) -> None:
        self.alerting_path = root / "alerts" / ALERT_FILE
        self.recording_path = root / "alerts" / RECORDING_FILE
        self.alerting = yaml.safe_load(self.alerting_path.read_text())
        self.recording = yaml.safe_load(self.recording_path.read_text())

    def slice(self, alerts: set[str] | frozenset[str]) -> Slice | None:
        """The rules these alerts need, with the alerts whose state they read, or None when one
        of them reads the state of alerts not named (ALERTS of any)."""
        wanted = set(alerts)
        while True:
            rules = [
                (g["name"], r)
                for g in self.alerting["groups"]
                for r in g["rules"]
                if r.get("alert") in wanted
            ]
            if any(r["expr"].count("ALERTS") != len(_READS_ALERT.findall(r["expr"])) for _, r in rules):
                return None
            read = {name for _, r in rules for name in alerts_read(r["expr"])}
            if read <= wanted:
                break
            wanted |= read
        recorded = {
            r["record"]: (g["name"], r["expr"])
            for g in self.recording["groups"]
            for r in g["rules"]
            if "record" in r
        }
        needed: set[str] = set()
        # What an alert reads: its expression, and the queries its annotations make when it notifies.
        read_by = [r["expr"] + " " + " ".join(r.get("annotations", {}).values()) for _, r in rules]
        todo = [n for text in read_by for n in _NAME.findall(text) if n in recorded]
        while todo:
            name = todo.pop()
            if name not in needed:
                needed.add(name)
                todo += [n for n in _NAME.findall(recorded[name][1]) if n in recorded]
        return Slice(
            alerts=frozenset(wanted),
            recording=_kept(self.recording, lambda r: r.get("record") in needed),
            groups=frozenset({g for g, _ in rules} | {recorded[n][0] for n in needed}),
        )

    def alerting_text(
        self, alerts: set[str] | frozenset[str] | None = None, substitute: Substitute | None = None
    ) -> str:
        """The alerting rules file with only these alerts (None: every rule), and `substitute`
        in place of the rule it names."""
        return _kept(self.alerting, lambda r: alerts is None or r.get("alert") in alerts, substitute)


SAID = 3000  # characters kept of each end of promtool's output when it fails
_PASSED: set[str] = set()  # digests of (slice, test file) runs that passed, in this process
# A folder where every test worker of one run marks the runs that passed (tests/conftest.py).
PASSED_DIR_ENV = "VLLM_OBS_PROMTOOL_PASSED"


def promtool_each_file_on_its_slice(
    bundle: Path,
    skip: tuple[str, ...] = (),
    first_failure: bool = False,
    only: tuple[str, ...] = (),
    longest: float | None = None,
) -> list[str]:
    """Run each promtool test file's cases on the slice of the alerts they name (whole rules for
    expression tests or an alert without a slice), skipping identical runs that already passed; the
    failing runs' output. skip/only: files; first_failure: stop at one; longest: last minute judged."""
    promtool = binary("promtool")
    rules = RuleFiles(bundle)
    failures = []
    paths = sorted((bundle / "tests" / "rules").glob("*.test.yml"))
    assert set(only) <= {p.name for p in paths}, (
        f"no test file {set(only) - {p.name for p in paths}} in {bundle}"
    )
    for path in paths:
        if path.name in skip or (only and path.name not in only):
            continue
        test = yaml.safe_load(path.read_text())
        files = {name: p.read_text() for name, p in _rule_files(bundle, test).items()}
        # An expression test may read any recorded series: those cases run on the whole rules.
        by_alerts: dict[tuple[frozenset[str], bool], list[dict]] = {}
        for case in test.get("tests", []):
            if longest is not None and span_minutes(case) > longest:
                continue
            by_alerts.setdefault((named_alerts(case), reads_recorded(case)), []).append(case)
        for (alerts, exprs), cases in by_alerts.items():
            sliceable = alerts and not exprs and set(files) == {ALERT_FILE, RECORDING_FILE}
            part = rules.slice(alerts) if sliceable else None
            chosen, content = dict(files), {**test, "tests": cases}
            if part is not None:
                chosen = {ALERT_FILE: rules.alerting_text(part.alerts), RECORDING_FILE: part.recording}
                content = narrowed(content, part.groups)
            said = _promtool_once(promtool, path.name, chosen, content)
            if said is not None:
                failures.append(f"{path.name} ({', '.join(sorted(alerts)) or 'expressions'}):\n{said}")
                if first_failure:
                    return failures
    return failures


def _promtool_once(promtool: str, name: str, files: dict[str, str], test: dict) -> str | None:
    """promtool on one test file with these rule files; None when it passes, else its output."""
    text = yaml.safe_dump(test, sort_keys=False, width=1000)
    digest = hashlib.sha256("\0".join([*files, *files.values(), text]).encode()).hexdigest()
    # Passes are shared with the other test workers of this run (promtool is deterministic: the
    # same rules and cases pass again); a failure always runs.
    shared = os.environ.get(PASSED_DIR_ENV)
    if digest in _PASSED or (shared and (Path(shared) / digest).exists()):
        return None
    with tempfile.TemporaryDirectory(prefix="vllm-obs-slice-") as tmp:
        where = Path(tmp)
        (where / "alerts").mkdir()
        for file, content in files.items():
            (where / "alerts" / file).write_text(content)
        (where / "tests" / "rules").mkdir(parents=True)
        (where / "tests" / "rules" / name).write_text(text)
        done = subprocess.run(
            [promtool, "test", "rules", f"tests/rules/{name}"], cwd=where, capture_output=True, text=True
        )
    if done.returncode != 0:
        said = done.stdout + done.stderr
        # Its first failures and its last: promtool lists failed cases in the file's order.
        return said if len(said) <= 2 * SAID else f"{said[:SAID]}\n[...]\n{said[-SAID:]}"
    _PASSED.add(digest)
    if shared:
        (Path(shared) / digest).touch()
    return None


def _rule_files(bundle: Path, test: dict) -> dict[str, Path]:
    """The rule files a test file loads (all in the bundle's alerts/), by name."""
    out = {}
    for entry in test.get("rule_files", []):
        path = (bundle / "tests" / "rules" / entry).resolve()
        if path.parent != (bundle / "alerts").resolve():
            raise ValueError(f"{entry}: a generated test loads rule files from the bundle's alerts/ only")
        out[path.name] = path
    return out


def failures_without_label(bundle: Path, label: str, workdir: Path) -> list[str]:
    """The generated tests' failures on a copy of the bundle whose aggregations drop `label`
    (`by (label, ...` becomes `by (...`): empty means the cases cannot tell it is kept."""
    copy = workdir / "bundle"
    shutil.copytree(bundle / "tests", copy / "tests")
    (copy / "alerts").mkdir()
    for path in (bundle / "alerts").glob("*.rules.yml"):
        text = path.read_text()
        assert f"by ({label}, " in text, path.name
        (copy / "alerts" / path.name).write_text(text.replace(f"by ({label}, ", "by ("))
    return promtool_each_file_on_its_slice(copy, first_failure=True)
