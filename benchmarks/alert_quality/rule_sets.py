"""The rule sets a run can judge on the same simulated fleet and Alertmanager routing: `bundle`
(this checkout's), `workbook` (workbook.py), `before` (an earlier commit's generator, from git) and
`peer` (vLLM PR #34638's rules, read from ../shared's reference/peers.md; without it the run stops).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml
from vllm_obs.errors import BundleError

from .traces import trace_dir

RULE_SETS = ("bundle", "workbook", "before", "peer")
BEFORE = "0b48dea"
PEER_SECTION = "### 2.1 vLLM closed PR #34638"
REPO = Path(__file__).resolve().parents[2]


def peers_file() -> Path:
    return trace_dir().parent / "reference" / "peers.md"


def peer_rules(path: Path | None = None) -> dict:
    """vLLM PR #34638's alerts as a Prometheus rule file, from the table in peers.md."""
    path = path or peers_file()
    try:
        text = path.read_text("utf-8")
    except OSError:
        raise BundleError(
            f"{path} is absent: the peer rule set is read from ../shared/reference/peers.md; "
            "fetch ../shared as benchmarks/alert_quality/README.md says, or run --rules bundle."
        ) from None
    if PEER_SECTION not in text:
        raise BundleError(f"{path} has no section '{PEER_SECTION}'; it is not the expected peers.md.")
    section = text.split(PEER_SECTION, 1)[1].split("\n#", 1)[0]
    rules = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`") and cells[1].endswith("`"):
            name, expr, hold, severity = cells
            rules.append(
                {"alert": name, "expr": expr.strip("`"), "for": hold, "labels": {"severity": severity}}
            )
    if not rules:
        raise BundleError(f"found no alert rows in {path}'s section '{PEER_SECTION}'.")
    return {"groups": [{"name": "vllm-pr-34638", "rules": rules}]}


def generate_before(commit: str, out: Path, config: Path, metrics: Path, scratch: Path) -> None:
    """The bundle of the generator at `commit` (its own catalog and templates), run in a process
    of its own so its package cannot mix with this checkout's."""
    verified = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if verified.returncode != 0:
        raise BundleError(
            f"this clone has no commit {commit!r}; run from a full clone, or pass --before with a commit it has."
        )
    sha = verified.stdout.strip()
    source = scratch / f"generator-{sha[:12]}"
    if not source.exists():
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", sha, "generator"], capture_output=True
        )
        if archive.returncode != 0:
            raise BundleError(
                f"git cannot read the generator of commit {commit}: {archive.stderr.decode().strip()}."
            )
        staged = scratch / f".generator-{sha[:12]}"
        shutil.rmtree(staged, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(staged, filter="data")
        staged.replace(source)  # whole or not at all
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from vllm_obs.cli import main; sys.exit(main(sys.argv[1:]))",
            "generate",
            "--out",
            str(out),
            "--config",
            str(config),
            "--metrics-file",
            str(metrics),
        ],
        env={"PYTHONPATH": str(source / "generator"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise BundleError(
            f"the generator of {commit} refused the run's configuration: {said[-1] if said else done.returncode}"
        )


def use_rules(bundle: Path, rules: dict) -> None:
    """Replace the bundle's rule files by `rules` (prometheus.yml loads that file alone)."""
    for path in (bundle / "alerts").glob("*.rules.yml"):
        path.unlink()
    target = bundle / "alerts" / "peer.rules.yml"
    target.write_text(yaml.safe_dump(rules, sort_keys=False))
    prom = bundle / "prometheus" / "prometheus.yml"
    data = yaml.safe_load(prom.read_text())
    data["rule_files"] = ["../alerts/peer.rules.yml"]
    prom.write_text(yaml.safe_dump(data, sort_keys=False))
