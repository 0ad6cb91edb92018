#!/usr/bin/env python3
"""Create the stack's secrets when they are missing: `make secrets` (run by `make generate`).
`python3 stack/make_secrets.py [DIR]`, DIR defaulting to secrets/ of this checkout; what it
writes and with which modes: docs/scripts.md."""

from __future__ import annotations

import os
import secrets
import stat
import sys
from pathlib import Path

GENERATED = {
    "grafana-admin-password": "Grafana's admin password (user admin)",
    "vllm-api-key": "vLLM's API key (send it as `Authorization: Bearer <key>`)",
}
ALERTMANAGER_DIR = "alertmanager"
KEPT = {"README.md", ".gitignore", ALERTMANAGER_DIR, *GENERATED}
DEFAULT_DIR = Path(__file__).resolve().parent.parent / "secrets"


class SecretsError(Exception):
    """A problem the user must fix: one sentence, exit status 2."""


def random_secret() -> str:
    return secrets.token_urlsafe(32)


def write_new(path: Path, value: str) -> None:
    """Write a new file, 0644 whatever the umask; O_EXCL: never replace an existing secret."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.fchmod(fd, 0o644)
        os.write(fd, (value + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure(directory: Path) -> list[str]:
    """Create what is missing; return the lines to print."""
    if directory.exists() and not directory.is_dir():
        raise SecretsError(f"{directory} is not a directory; move it away and run `make secrets` again")
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    (directory / ALERTMANAGER_DIR).mkdir(exist_ok=True)
    os.chmod(directory / ALERTMANAGER_DIR, 0o755)
    lines = []
    for name, what in GENERATED.items():
        path = directory / name
        if path.exists():
            try:
                value = path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise SecretsError(
                    f"cannot read {path} ({exc}); fix or delete it and run `make secrets` again"
                ) from None
            if not value:
                raise SecretsError(
                    f"{path} is empty; put your own value in it, or delete it to have a random one made"
                )
            if stat.S_IMODE(path.stat().st_mode) & 0o044 != 0o044:
                os.chmod(path, 0o644)  # the container reads it as a non-root user
                lines.append(f"made {path} readable by the containers (0644; {directory} stays 0700)")
            lines.append(f"kept     {path}: {what}")
        else:
            write_new(path, random_secret())
            lines.append(f"created  {path}: {what}")
    for entry in sorted(directory.iterdir()):
        if entry.name not in KEPT and not entry.name.startswith("."):
            lines.append(
                f"note: {entry} is not read by the stack; Alertmanager's files go in "
                f"{directory / ALERTMANAGER_DIR}/ (mounted at /etc/alertmanager/secrets)"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        print("make_secrets: usage: make_secrets.py [DIR]", file=sys.stderr)
        return 2
    directory = Path(args[0]) if args else DEFAULT_DIR
    try:
        lines = ensure(directory)
    except SecretsError as exc:
        print(f"make_secrets: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"make_secrets: cannot set up {directory}: {exc.strerror}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
