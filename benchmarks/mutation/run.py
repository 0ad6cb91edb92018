"""Apply each mutant of a bundle's alerting rules, one at a time, and run the promtool tests naming
its alert on a slice of the rules it reads (all rules where the slice fails the unmutated alert).
A mutant is killed when such a test fails; one promtool cannot load is not counted.
"""

from __future__ import annotations

import queue
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from tests.support.rule_slices import (
    RuleFiles,
    Slice,
    named_alerts,
    narrowed,
    promtool_each_file_on_its_slice,
    span_minutes,
)

from .mutants import Mutant, mutants_of

LOAD_ERRORS = ("could not load", "parse error", "error parsing", "cannot unmarshal")


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    verdict: str  # killed, survived, untested (no test file names the alert), invalid
    files: tuple[str, ...] = ()


class Bundle(RuleFiles):
    """A generated bundle's alerting rules and promtool tests."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.root = root
        self.test_files = sorted((root / "tests" / "rules").glob("*.test.yml"))
        if not self.test_files:
            raise SystemExit(f"{root} has no tests/rules/*.test.yml: generate the bundle first.")

    def mutants(self) -> list[Mutant]:
        return [
            replace(m, at=(g, r))
            for g, group in enumerate(self.alerting["groups"])
            for r, rule in enumerate(group["rules"])
            if "alert" in rule
            for m in mutants_of(rule)
        ]

    def with_mutant(self, mutant: Mutant, alerts: frozenset[str] | None = None) -> str:
        """The alerting rules file with the mutant in its rule's place (only these alerts)."""
        return self.alerting_text(alerts, (*mutant.at, mutant.rule))

    def tests_naming(self) -> dict[str, dict[str, dict]]:
        """Alert name -> {test file: that file with only the tests whose alert_rule_test names
        the alert or read its state}. promtool checks only the alerts a test names, so no other test can notice a
        change to this one; running just these keeps the full run short."""
        out: dict[str, dict[str, dict]] = {}
        for path in self.test_files:
            data = yaml.safe_load(path.read_text())
            for test in data.get("tests", []):
                for name in named_alerts(test):
                    chosen = out.setdefault(name, {}).setdefault(path.name, {**data, "tests": []})
                    chosen["tests"].append(test)
        return out


class Workspace:
    """A private copy of the bundle's alerts/ and tests/rules/ where one mutant at a time lives."""

    def __init__(self, bundle: Bundle, where: Path) -> None:
        self.bundle = bundle
        shutil.copytree(bundle.root / "alerts", where / "alerts")
        shutil.copytree(bundle.root / "tests" / "rules", where / "tests" / "rules")
        self.rules = where / "alerts" / bundle.alerting_path.name
        self.recording = where / "alerts" / bundle.recording_path.name
        self.tests = where / "tests" / "rules"

    def run(
        self,
        tests: dict[str, dict] | None = None,
        rules_text: str | None = None,
        recording: str | None = None,
    ) -> subprocess.CompletedProcess:
        """promtool on `tests` (file name -> its content; None: the bundle's own files as they
        are), with these alerting and recording rules (None: the bundle's own)."""
        self.rules.write_text(rules_text if rules_text is not None else self.bundle.alerting_path.read_text())
        self.recording.write_text(
            recording if recording is not None else self.bundle.recording_path.read_text()
        )
        if tests is None:
            files = [p.name for p in self.bundle.test_files]
        else:
            files = []
            for name, content in tests.items():
                chosen = self.tests / f"chosen-{name}"
                chosen.write_text(yaml.safe_dump(content, sort_keys=False, width=1000))
                files.append(chosen.name)
        return subprocess.run(
            ["promtool", "test", "rules", *files],
            cwd=self.tests,
            capture_output=True,
            text=True,
            timeout=600,
        )


def run(bundle: Bundle, mutants: list[Mutant], workers: int = 2, baseline: bool = True) -> list[Outcome]:
    """Each mutant's verdict. baseline=False skips running the bundle's own tests first (a
    caller that has proven them already)."""
    naming = bundle.tests_naming()
    with tempfile.TemporaryDirectory(prefix="vllm-obs-mutation-") as tmp:
        spaces: queue.Queue[Workspace] = queue.Queue()
        for n in range(workers):
            spaces.put(Workspace(bundle, Path(tmp) / f"w{n}"))
        failing = promtool_each_file_on_its_slice(bundle.root) if baseline else []
        if failing:
            raise SystemExit(
                "the bundle's own promtool tests fail before any mutation:\n" + "\n".join(failing)
            )

        def promtool(*args, **kwargs) -> subprocess.CompletedProcess:
            space = spaces.get()
            try:
                return space.run(*args, **kwargs)
            finally:
                spaces.put(space)

        def sliced(alert: str) -> Slice | None:
            """The alert's slice if its unmutated rules pass its tests with it."""
            part = bundle.slice({alert})
            if part is None:
                return None
            tests = {name: narrowed(test, part.groups) for name, test in naming[alert].items()}
            alone = promtool(tests, bundle.alerting_text(part.alerts), part.recording)
            return part if alone.returncode == 0 else None

        # Only the alerts these mutants belong to (a sample needs only its own).
        alerts = sorted({m.rule["alert"] for m in mutants} & set(naming))
        with ThreadPoolExecutor(workers) as pool:
            slices = dict(zip(alerts, pool.map(sliced, alerts), strict=True))

        def judge(mutant: Mutant) -> Outcome:
            alert = mutant.rule["alert"]
            tests = touching(naming.get(alert, {}), mutant.rule)
            files = tuple(sorted(tests))
            if not tests:
                return Outcome(mutant, "untested")
            part = slices.get(alert)
            # The short cases first: most mutants fail one, and the long ones need not run.
            for stage in stages(tests):
                if part:
                    done = promtool(
                        {name: narrowed(test, part.groups) for name, test in stage.items()},
                        bundle.with_mutant(mutant, part.alerts),
                        part.recording,
                    )
                else:
                    done = promtool(stage, bundle.with_mutant(mutant))
                if done.returncode != 0:
                    said = (done.stdout + done.stderr).lower()
                    if any(e in said for e in LOAD_ERRORS):
                        return Outcome(mutant, "invalid", files)
                    return Outcome(mutant, "killed", files)
            return Outcome(mutant, "survived", files)

        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(judge, mutants))


def touching(tests: dict[str, dict], rule: dict) -> dict[str, dict]:
    """The cases that can notice a change to this rule of its alert: those that judge the alert
    whole (its every firing rule is listed), and those that read the state of this rule alone
    (ALERTS with its labels: a burn tier's long and short windows)."""
    own = [f'{k}="{v}"' for k, v in rule.get("labels", {}).items() if k != "severity"]
    name = f'alertname="{rule["alert"]}"'

    def touches(case: dict) -> bool:
        if any(c["alertname"] == rule["alert"] for c in case.get("alert_rule_test", [])):
            return True
        return any(
            name in t["expr"] and all(m in t["expr"] for m in own) for t in case.get("promql_expr_test", [])
        )

    out = {}
    for file, test in tests.items():
        cases = [c for c in test["tests"] if touches(c)]
        if cases:
            out[file] = {**test, "tests": cases}
    return out


# Cases that evaluate this many minutes or fewer run first.
SHORT_CASE_MINUTES = 90


def stages(tests: dict[str, dict]) -> list[dict[str, dict]]:
    """The test files split in two runs: the cases judged within SHORT_CASE_MINUTES, then the
    rest (hours of evaluations), each file keeping only its cases of that run."""
    out = []
    for short in (True, False):
        stage = {}
        for name, test in tests.items():
            cases = [c for c in test["tests"] if (span_minutes(c) <= SHORT_CASE_MINUTES) == short]
            if cases:
                stage[name] = {**test, "tests": cases}
        if stage:
            out.append(stage)
    return out
