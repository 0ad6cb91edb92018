"""Write a bundle into a directory all at once, or check that the directory matches it. Files are
staged, then moved into place atomically, the old ones restored on failure; a manifest lets a later
run remove files it no longer writes, and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .errors import BundleError
from .layout import MANIFEST


def write_bundle(files: dict[str, str], out: Path) -> list[str]:
    """Write files under out; return the paths removed because the bundle dropped them."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".vllm-obs-staging-", dir=out))
    except OSError as exc:
        raise BundleError(
            f"cannot write to {out} ({exc.strerror or exc}); choose a writable --out directory."
        ) from None
    backup = staging / "__previous__"
    moved: list[tuple[Path, Path | None]] = []  # (destination, backup of what it replaced)
    stale = [p for p in _manifest_files(out) if p not in files]
    try:
        for rel, content in files.items():
            staged = staging / rel
            staged.parent.mkdir(parents=True, exist_ok=True)
            staged.write_text(content, encoding="utf-8")
        for rel in [*files, *stale]:
            dest = out / rel
            if dest.is_dir():
                raise BundleError(f"{dest} is a directory where the bundle writes a file; move it away.")
        for rel in files:
            dest = out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            saved = None
            if dest.exists():
                saved = backup / rel
                saved.parent.mkdir(parents=True, exist_ok=True)
                os.replace(dest, saved)
            moved.append((dest, saved))
            os.replace(staging / rel, dest)
        for rel in stale:
            dest = out / rel
            if dest.exists():
                saved = backup / rel
                saved.parent.mkdir(parents=True, exist_ok=True)
                os.replace(dest, saved)
                moved.append((dest, saved))
    except BundleError:
        _roll_back(moved)
        raise
    except OSError as exc:
        _roll_back(moved)
        raise BundleError(
            f"cannot write the bundle into {out} ({exc.strerror or exc}); nothing was changed, "
            "fix the permissions or choose another --out."
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return stale


def check_bundle(files: dict[str, str], out: Path) -> list[str]:
    """Paths whose content differs from the bundle, are missing, or are stale."""
    problems = []
    for rel, content in sorted(files.items()):
        path = out / rel
        try:
            if path.read_text("utf-8") != content:
                problems.append(f"{rel} differs")
        except FileNotFoundError:
            problems.append(f"{rel} is missing")
        except OSError as exc:
            problems.append(f"{rel} cannot be read ({exc.strerror})")
    for rel in _manifest_files(out):
        if rel not in files and (out / rel).exists():
            problems.append(f"{rel} is no longer generated")
    return problems


def _manifest_files(out: Path) -> list[str]:
    try:
        data = json.loads((out / MANIFEST).read_text("utf-8"))
        files = data.get("files", []) if data.get("generated_by") == "vllm-obs" else []
    except (OSError, ValueError, AttributeError):
        return []
    # Only plain relative paths: a tampered manifest must not delete outside the bundle.
    return [f for f in files if isinstance(f, str) and not os.path.isabs(f) and ".." not in Path(f).parts]


def _roll_back(moved: list[tuple[Path, Path | None]]) -> None:
    for dest, saved in reversed(moved):
        with contextlib.suppress(OSError):
            if saved is not None:
                os.replace(saved, dest)
            elif dest.exists():
                dest.unlink()
