"""The `vllm-obs doctor` flags; the work is imported only when the command runs, and needs
the `doctor` extra (prometheus-api-client), which the exporter images do not carry."""

from __future__ import annotations

import argparse

from .access import TOKEN_ENV, validate
from .findings import DoctorCannotRun


def add_doctor_command(sub: argparse._SubParsersAction) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="check a live Prometheus and Alertmanager against a bundle: why a panel is empty or an alert cannot fire",
        description=(
            "Check the running stack against the bundle on disk: targets up, every series the rules and "
            "panels read present (renames explained), rules loaded and current, the label joins alerts "
            "depend on, the alerting path, every panel, and the servers' start-up times. Exit 0 when "
            "healthy (warnings allowed), 1 when something is wrong, 2 when the doctor cannot run."
        ),
    )
    doctor.add_argument(
        "--prometheus", required=True, metavar="URL", help="Prometheus API base URL, with any path prefix"
    )
    doctor.add_argument(
        "--alertmanager", metavar="URL", help="Alertmanager base URL (its v2 API), with any prefix"
    )
    doctor.add_argument(
        "--bundle", default=".", metavar="DIR", help="the bundle to check against (default: .)"
    )
    doctor.add_argument("--config", metavar="FILE", help="the config the bundle was generated with")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON (for CI)")
    doctor.add_argument("--timeout", type=float, default=30.0, metavar="S", help="per request (default 30)")
    doctor.add_argument(
        "--bearer-token-file", metavar="PATH", help=f"send this bearer token (or set {TOKEN_ENV})"
    )
    doctor.add_argument(
        "--basic-auth-user", metavar="USER", help="basic auth user (with --basic-auth-password-file)"
    )
    doctor.add_argument(
        "--basic-auth-password-file", metavar="PATH", help="file holding the basic auth password"
    )
    doctor.add_argument("--ca-file", metavar="PATH", help="CA bundle that signed the server certificates")
    doctor.add_argument("--insecure-skip-verify", action="store_true", help="do not verify TLS certificates")
    doctor.add_argument(
        "--alertmanager-bearer-token-file",
        metavar="PATH",
        help="a separate bearer token for Alertmanager (default: the Prometheus credentials)",
    )
    doctor.add_argument(
        "--alertmanager-secrets",
        metavar="DIR",
        help="the folder Alertmanager's secret files are mounted from (the stack's secrets/alertmanager): "
        "every key or URL file its receivers name must be there and not empty",
    )
    doctor.add_argument(
        "--kubernetes-manifest",
        metavar="FILE",
        help="a Deployment YAML: check its startupProbe/livenessProbe against the measured start-up times",
    )
    doctor.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    auth, am_auth = validate(args)
    try:
        from .run import run  # the clients and checks load only for this command
    except ModuleNotFoundError as exc:
        if exc.name != "prometheus_api_client":
            raise
        raise DoctorCannotRun(
            "vllm-obs doctor needs the prometheus-api-client package; install the doctor extra: "
            "pip install 'vllm-obs[doctor]'."
        ) from None
    return run(args, auth, am_auth)
