"""The doctor's flags that need checking before any request: URLs, the timeout and the
credentials (read from files, never from the command line)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from .findings import DoctorCannotRun

TOKEN_ENV = "VLLM_OBS_PROMETHEUS_TOKEN"


@dataclass(frozen=True)
class Auth:
    bearer_token: str | None = None
    basic: tuple[str, str] | None = None
    ca_file: str | None = None
    insecure: bool = False
    timeout: float = 30.0


def validate(args: argparse.Namespace) -> tuple[Auth, Auth]:
    """The Prometheus and Alertmanager credentials, once every flag is known to be usable."""
    if not args.timeout > 0:
        raise DoctorCannotRun(f"--timeout {args.timeout:g} must be a positive number of seconds.")
    for flag, url in (("--prometheus", args.prometheus), ("--alertmanager", args.alertmanager)):
        if url is not None and not url.startswith(("http://", "https://")):
            raise DoctorCannotRun(f"{flag} {url} is not an http(s) URL; pass e.g. http://prometheus:9090.")
    secrets = getattr(args, "alertmanager_secrets", None)
    if secrets is not None and not Path(secrets).is_dir():
        raise DoctorCannotRun(
            f"--alertmanager-secrets {secrets} is not a folder; pass the one Alertmanager's secret files are "
            "mounted from (the stack's secrets/alertmanager)."
        )
    return _auths(args)


def _auths(args: argparse.Namespace) -> tuple[Auth, Auth]:
    token = _secret(args.bearer_token_file, "--bearer-token-file") if args.bearer_token_file else None
    token = token or os.environ.get(TOKEN_ENV) or None
    basic = None
    if bool(args.basic_auth_user) != bool(args.basic_auth_password_file):
        raise DoctorCannotRun("--basic-auth-user and --basic-auth-password-file go together; pass both.")
    if args.basic_auth_user:
        basic = (args.basic_auth_user, _secret(args.basic_auth_password_file, "--basic-auth-password-file"))
    if basic and token:
        raise DoctorCannotRun(
            f"pass either a bearer token (--bearer-token-file or {TOKEN_ENV}) or basic auth, not both."
        )
    if args.ca_file and args.insecure_skip_verify:
        raise DoctorCannotRun("pass either --ca-file or --insecure-skip-verify, not both.")
    if args.ca_file and not Path(args.ca_file).is_file():
        raise DoctorCannotRun(f"--ca-file {args.ca_file} is not a readable file; pass the CA bundle (PEM).")
    common = {"ca_file": args.ca_file, "insecure": args.insecure_skip_verify, "timeout": args.timeout}
    auth = Auth(bearer_token=token, basic=basic, **common)
    if args.alertmanager_bearer_token_file:
        am_token = _secret(args.alertmanager_bearer_token_file, "--alertmanager-bearer-token-file")
        return auth, Auth(bearer_token=am_token, **common)
    return auth, auth


def _secret(path: str, flag: str) -> str:
    try:
        value = Path(path).read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise DoctorCannotRun(
            f"cannot read {flag} {path} ({reason}); check the path and its permissions."
        ) from None
    if not value:
        raise DoctorCannotRun(f"{flag} {path} is empty; put the secret in it.")
    return value
