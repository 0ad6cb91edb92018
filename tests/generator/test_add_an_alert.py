"""DEVELOPERS.md's recipe "A new alert", followed on a copy of the generator: a toy alert written into
its area module, its scenarios module and config.py, and nothing else, reaches the rules, their
promtool tests (green, and able to fail), the runbook, the alert table, the defaults and the mixin."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.generator.test_rules import promtool
from tests.mixin.test_mixin import assert_same, render, written
from tests.support.rule_slices import ALERT_FILE, promtool_each_file_on_its_slice

pytestmark = pytest.mark.prometheus

GENERATOR = Path(__file__).parent.parent.parent / "generator" / "vllm_obs"
TOY = "VllmToyRunningHigh"
THRESHOLD = 7

# The recipe's three files: (file in the package, text the edit goes after, text it adds).
CONFIG = (
    "config.py",
    "class AlertsSection:\n",
    f"""    toy_running_threshold: float = knob({THRESHOLD}, "{TOY}: running requests above this warn")
    toy_running_for: str = knob("3m", "{TOY}: how long they must stay above it")
""",
)
SCENARIOS = (
    "rules/scenarios/saturation.py",
    None,  # at the end
    f'''

def toy_running_cases(rules: list[Alert], inputs: Inputs) -> list[Case]:
    (rule,) = rules
    threshold = inputs.cfg.alerts.toy_running_threshold
    running = inputs.res["requests_running"]
    span = minutes(rule.for_) + PAST_FOR
    fire = Case(f"{TOY} fires after {{rule.for_}} with {{threshold + 1:g}} running")
    inputs.gauge(fire, running, threshold + 1, span)
    fire.checks = boundary(rule.name, 0, rule.for_, [Expect(rule, inputs.result(), threshold + 1)])
    silent = Case(f"{TOY} stays silent at exactly {{threshold:g}} running")
    inputs.gauge(silent, running, threshold, span)
    silent.checks = [Check(span - 1, rule.name, [])]
    return [fire, silent]
''',
)
AREA_IMPORT = (
    "rules/areas/saturation.py",
    "from ..scenarios.saturation import (\n",
    "    toy_running_cases,\n",
)
AREA_DECLARATION = (
    "rules/areas/saturation.py",
    "def declarations(v: Vocabulary) -> list[Declared]:\n    return [\n",
    f"""        Declared(
            name="{TOY}",
            knobs=("alerts.toy_running_threshold", "alerts.toy_running_for"),
            build=_toy_running_high,
            needs=("requests_running",),
            panel="Waiting vs running",
            runbook=Section(
                meaning="More requests run on one replica than `alerts.toy_running_threshold`.",
                confirm=["Running: `{{running}}`"],
                act=["Toy remedy: add a replica."],
            ),
            scenarios=toy_running_cases,
            symptoms=(DEAD_SERVER, PER_REPLICA),
        ),
""",
)
AREA_BUILD = (
    "rules/areas/saturation.py",
    None,
    f'''

def _toy_running_high(v: Vocabulary) -> list[Alert]:
    a, sc = v.cfg.alerts, v.scope
    return [
        Alert(
            name="{TOY}",
            expr=f"{{v.names.requests_running}} > {{number(a.toy_running_threshold)}}",
            for_=a.toy_running_for,
            severity="warning",
            summary="vLLM runs many requests (toy).",
            description=(
                f"{{{{{{{{ $value }}}}}}}} requests run on {{sc.where}} "
                f"(threshold {{number(a.toy_running_threshold)}}, for {{a.toy_running_for}})."
            ),
            dashboard="kv_cache",
        )
    ]
''',
)


def edit(package: Path, file: str, after: str | None, text: str) -> None:
    """Adds `text` after the one place `after` is in the file (None: at its end)."""
    path = package / file
    source = path.read_text()
    if after is None:
        path.write_text(source + text)
        return
    assert source.count(after) == 1, f"{file} no longer has one {after!r}: update this test's edit"
    path.write_text(source.replace(after, after + text))


def run_copy(src: Path, *args: str, cwd: Path) -> str:
    """The copied generator's command line in a process of its own; its standard output."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-m", "vllm_obs.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> tuple[Path, Path]:
    """(the copied package's parent, a bundle it generated) with the toy alert added."""
    where = tmp_path_factory.mktemp("add-an-alert")
    src = where / "src"
    package = shutil.copytree(GENERATOR, src / "vllm_obs", ignore=shutil.ignore_patterns("__pycache__"))
    for file, after, text in (CONFIG, SCENARIOS, AREA_IMPORT, AREA_DECLARATION, AREA_BUILD):
        edit(package, file, after, text)
    changed = {
        str(p.relative_to(package))
        for p in package.rglob("*")
        if p.is_file() and p.read_bytes() != (GENERATOR / p.relative_to(package)).read_bytes()
    }
    assert changed == {"config.py", "rules/scenarios/saturation.py", "rules/areas/saturation.py"}
    run_copy(src, "generate", "--out", str(where / "bundle"), cwd=where)
    return src, where / "bundle"


def test_the_copy_generates_the_toy_rule(toy):
    _, bundle = toy
    groups = yaml.safe_load((bundle / "alerts" / ALERT_FILE).read_text())["groups"]
    saturation = next(g for g in groups if g["name"] == "vllm-obs.saturation")
    (rule,) = [r for r in saturation["rules"] if r["alert"] == TOY]
    assert rule["expr"] == f"job_instance_model:vllm_requests_running:sum > {THRESHOLD}"
    assert rule["for"] == "3m" and rule["labels"]["severity"] == "warning"
    assert f"## {TOY}\n" in (bundle / "alerts" / "runbooks.md").read_text()


def test_its_promtool_cases_pass_and_catch_a_moved_threshold(toy, tmp_path):
    _, bundle = toy
    rules = sorted(str(p.relative_to(bundle)) for p in (bundle / "alerts").glob("*.rules.yml"))
    checked = promtool("check", "rules", *rules, cwd=bundle)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    files = tuple(
        p.name
        for p in sorted((bundle / "tests" / "rules").glob("*.test.yml"))
        if f"alertname: {TOY}\n" in p.read_text()
    )
    assert files == ("saturation.test.yml",)
    cases = yaml.safe_load((bundle / "tests" / "rules" / files[0]).read_text())["tests"]
    judged = [c for case in cases for c in case["alert_rule_test"] if c["alertname"] == TOY]
    assert any(c["exp_alerts"] for c in judged) and any(not c["exp_alerts"] for c in judged)
    failures = promtool_each_file_on_its_slice(bundle, only=files)
    assert not failures, "\n".join(failures)
    # The threshold one higher: the case that fires at threshold + 1 no longer does.
    broken = shutil.copytree(bundle, tmp_path / "broken")
    path = broken / "alerts" / ALERT_FILE
    text = path.read_text()
    before = f"vllm_requests_running:sum > {THRESHOLD}\n"
    assert text.count(before) == 1
    path.write_text(text.replace(before, f"vllm_requests_running:sum > {THRESHOLD + 1}\n"))
    failures = promtool_each_file_on_its_slice(broken, only=files)
    assert [f.split(":\n", 1)[0] for f in failures] == [f"saturation.test.yml ({TOY})"]


def test_its_runbook_opens_from_the_index_and_quotes_the_bundle(toy):
    _, bundle = toy
    runbooks = (bundle / "alerts" / "runbooks.md").read_text()
    assert f"| [{TOY}](#vllmtoyrunninghigh) | warning | KV cache and scheduler |" in runbooks
    section = runbooks.split(f"## {TOY}\n", 1)[1].split("\n## ", 1)[0]
    assert "- Running: `job_instance_model:vllm_requests_running:sum`" in section
    assert "- Toy remedy: add a replica." in section


def test_the_alert_table_and_the_defaults_show_its_knobs(toy, tmp_path):
    src, _ = toy
    table = run_copy(src, "alert-table", cwd=tmp_path)
    (row,) = [line for line in table.splitlines() if line.startswith(f"| {TOY} |")]
    assert row == (
        f"| {TOY} | saturation | warning | vLLM runs many requests (toy). | "
        f"`alerts.toy_running_threshold` ({THRESHOLD})<br>`alerts.toy_running_for` (3m) |"
    )
    defaults = yaml.safe_load(run_copy(src, "default-config", cwd=tmp_path))
    assert defaults["alerts"]["toy_running_threshold"] == THRESHOLD
    assert defaults["alerts"]["toy_running_for"] == "3m"


def test_the_mixin_renders_it_and_takes_its_knobs_from_config(toy):
    _, bundle = toy
    assert_same(render(bundle), written(bundle))
    changed = render(bundle, "{ toyRunningThreshold: 9, toyRunningFor: '4m' }")
    (rule,) = [r for g in changed["alerts"]["groups"] for r in g["rules"] if r["alert"] == TOY]
    assert (rule["expr"], rule["for"]) == ("job_instance_model:vllm_requests_running:sum > 9", "4m")
