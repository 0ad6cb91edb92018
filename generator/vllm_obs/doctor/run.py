"""The `vllm-obs doctor` command: flags, then the checks in order, then the report."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..catalog import Catalog
from ..config import load_config
from . import alerting, bundle_view, dashboards, kube_probes, labels, lifecycle, names, output, rules, targets
from .clients import AlertmanagerClient, Auth, PrometheusClient
from .command import TOKEN_ENV
from .context import Context
from .findings import DoctorCannotRun, Report

# Each family leaves facts the later ones use to explain what they find.
CHECKS = (
    ("targets", targets.run),
    ("names", names.run),
    ("rules", rules.run),
    ("labels", labels.run),
    ("alerting", alerting.run),
    ("dashboards", dashboards.run),
    ("lifecycle", lifecycle.run),
)


def run(args: argparse.Namespace) -> int:
    if not args.timeout > 0:
        raise DoctorCannotRun(f"--timeout {args.timeout:g} must be a positive number of seconds.")
    auth, am_auth = _auths(args)
    for flag, url in (("--prometheus", args.prometheus), ("--alertmanager", args.alertmanager)):
        if url is not None and not url.startswith(("http://", "https://")):
            raise DoctorCannotRun(f"{flag} {url} is not an http(s) URL; pass e.g. http://prometheus:9090.")
    catalog = Catalog.load()
    config = load_config(args.config) if args.config else None
    view = bundle_view.load(args.bundle, catalog)
    if args.kubernetes_manifest:
        kube_probes.read(args.kubernetes_manifest)  # bad input stops the run before any output
    prom = PrometheusClient(args.prometheus, auth)
    am = AlertmanagerClient(args.alertmanager, am_auth) if args.alertmanager else None
    report = Report(
        prometheus=prom.url,
        alertmanager=am.url if am else None,
        bundle=str(view.root),
        bundle_source=view.release.describe() if view.release else view.source or "unknown source",
    )
    ctx = Context(
        view=view,
        catalog=catalog,
        prom=prom,
        report=report,
        am=am,
        config=config,
        kubernetes_manifest=args.kubernetes_manifest,
    )
    try:
        prom.check_reachable()
        for family, check in CHECKS:
            started = time.monotonic()
            check(ctx)
            report.timings[family] = time.monotonic() - started
    finally:
        report.requests = {"prometheus": prom.session.requests_made}
        if am:
            report.requests["alertmanager"] = am.session.requests_made
        prom.close()
        if am:
            am.close()
    sys.stdout.write(output.as_json(report) if args.json else output.text(report))
    return report.exit_code


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
