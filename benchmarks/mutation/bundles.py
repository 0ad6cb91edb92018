"""The two bundles the mutation run judges: the default one committed in this checkout, and
one with every engine feature and the GPU layer on, generated on the spot."""

from __future__ import annotations

import contextlib
import hashlib
import io
from pathlib import Path

from vllm_obs.catalog import Catalog
from vllm_obs.cli import main as vllm_obs

REPO = Path(__file__).resolve().parents[2]
DEFAULT = "default"
EVERYTHING = "every feature + GPU"


def features() -> list[str]:
    """Every engine feature the embedded catalog knows."""
    return sorted(Catalog.load().features)


def generate_everything(out: Path) -> Path:
    """The newest release from the embedded catalog, every feature on, the GPU layer on."""
    config = out / "config.yml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("gpu:\n  enabled: true\n")
    args = ["generate", "--out", str(out / "bundle"), "--config", str(config)]
    for name in features():
        args += ["--feature", name]
    with contextlib.redirect_stderr(io.StringIO()) as said:
        code = vllm_obs(args)
    if code != 0:
        raise SystemExit(f"generating the every-feature bundle failed: {said.getvalue().strip()}")
    return out / "bundle"


def digest(root: Path) -> str:
    """What the mutation results depend on: the alerting rules and the promtool tests."""
    h = hashlib.sha256()
    for path in [
        root / "alerts" / "vllm-alerts.rules.yml",
        *sorted((root / "tests" / "rules").glob("*.test.yml")),
    ]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]
