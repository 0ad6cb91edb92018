"""The `vllm-obs doctor` command: flags, then the checks in order, then the report."""

from __future__ import annotations

import argparse
import sys
import time

from ..catalog import Catalog
from ..config import load_config
from . import bundle_view, output
from .access import Auth
from .checks import alerting, kube_probes, label_joins, panels, rule_groups, series, startups, targets
from .clients import AlertmanagerClient, PrometheusClient
from .context import Context
from .findings import Report

# Each family leaves facts the later ones use to explain what they find.
CHECKS = (
    ("targets", targets.run),
    ("names", series.run),
    ("rules", rule_groups.run),
    ("labels", label_joins.run),
    ("alerting", alerting.run),
    ("dashboards", panels.run),
    ("lifecycle", startups.run),
)


def run(args: argparse.Namespace, auth: Auth, am_auth: Auth) -> int:
    """The checks, once command.py has validated the flags and read the credentials."""
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
        alertmanager_secrets=args.alertmanager_secrets,
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
