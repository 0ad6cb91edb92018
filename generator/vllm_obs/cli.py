"""The `vllm-obs` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .bundle import build_bundle
from .catalog import Catalog
from .config import default_config_text, load_config
from .doctor.command import add_doctor_command
from .errors import BundleError
from .fetch import read_file, read_token_file, read_url, token_from_env
from .rules.alert_table import alert_table
from .source import MetricSource, from_catalog, from_exposition
from .writer import check_bundle, write_bundle

DEFAULT_OUT = "vllm-obs-bundle"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except BundleError as exc:
        print(f"vllm-obs: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-obs",
        description="Generate Prometheus rules, Alertmanager routing and Grafana dashboards for vLLM.",
    )
    parser.add_argument("--version", action="version", version=f"vllm-obs {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    gen = sub.add_parser(
        "generate",
        help="build a bundle from a live server, a saved exposition, or the embedded catalog",
        description=(
            "Build a bundle for the metric names a vLLM server really exposes. With no source, "
            "use the embedded catalog of the newest supported release."
        ),
    )
    source = gen.add_mutually_exclusive_group()
    source.add_argument(
        "--metrics-url", metavar="URL", help="a running vLLM's /metrics, e.g. http://HOST:8000/metrics"
    )
    source.add_argument("--metrics-file", metavar="PATH", help="a saved /metrics exposition")
    source.add_argument("--vllm-version", metavar="X.Y.Z", help="the embedded catalog of that vLLM release")
    gen.add_argument(
        "--engine",
        choices=("v0", "v1"),
        help="with --vllm-version: the engine (default: the release's default)",
    )
    gen.add_argument(
        "--feature",
        action="append",
        default=[],
        metavar="NAME",
        help="with the catalog: a server feature that is on (spec_decode, lora, nixl, kv_offload...); repeatable",
    )
    gen.add_argument("--config", metavar="FILE", help="YAML config; see `vllm-obs default-config`")
    gen.add_argument(
        "--out", metavar="DIR", default=DEFAULT_OUT, help=f"output directory (default: {DEFAULT_OUT})"
    )
    gen.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if DIR differs from what would be generated",
    )
    gen.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="--metrics-url timeout in seconds (default 10)",
    )
    gen.add_argument(
        "--bearer-token-file",
        metavar="PATH",
        help="--metrics-url: send this token (or set VLLM_OBS_BEARER_TOKEN)",
    )
    gen.add_argument(
        "--insecure-skip-verify", action="store_true", help="--metrics-url: do not verify the TLS certificate"
    )
    gen.set_defaults(run=_generate)

    defaults = sub.add_parser(
        "default-config", help="print every config knob with its default and documentation"
    )
    defaults.set_defaults(run=lambda args: print(default_config_text(), end="") or 0)

    table = sub.add_parser(
        "alert-table", help="print every alert with its severities and knobs (docs/alert-table.md)"
    )
    table.set_defaults(run=lambda args: print(alert_table(Catalog.load()), end="") or 0)

    releases = sub.add_parser("releases", help="list the vLLM releases and engines the catalog covers")
    releases.set_defaults(run=_releases)

    add_doctor_command(sub)
    return parser


def _load_source(args: argparse.Namespace, catalog: Catalog) -> tuple[MetricSource, list[str]]:
    notes: list[str] = []
    if args.engine and not args.vllm_version:
        raise BundleError(
            "--engine only applies with --vllm-version; a live or saved exposition shows its own engine."
        )
    if args.feature and (args.metrics_url or args.metrics_file):
        raise BundleError(
            "--feature only applies to the embedded catalog; a live or saved exposition shows its own features."
        )
    features = tuple(dict.fromkeys(args.feature))
    if args.metrics_url:
        token = read_token_file(args.bearer_token_file) if args.bearer_token_file else token_from_env()
        text = read_url(
            args.metrics_url,
            timeout=args.timeout,
            bearer_token=token,
            verify_tls=not args.insecure_skip_verify,
        )
        return from_exposition(text, args.metrics_url, catalog), notes
    if args.metrics_file:
        return from_exposition(read_file(args.metrics_file), args.metrics_file, catalog), notes
    if args.vllm_version:
        release, note = catalog.release(args.vllm_version)
        if note:
            notes.append(note)
        return from_catalog(catalog, release, args.engine, features), notes
    return from_catalog(catalog, catalog.newest, None, features), notes


def _warn(lines: list[str]) -> None:
    for line in lines:
        print(f"vllm-obs: warning: {line}", file=sys.stderr)


def _generate(args: argparse.Namespace) -> int:
    catalog = Catalog.load()
    cfg = load_config(args.config)
    source, notes = _load_source(args, catalog)
    bundle = build_bundle(source, catalog, cfg)
    out = Path(args.out)
    if args.check:
        problems = check_bundle(bundle.files, out)
        _warn(notes + bundle.warnings)
        if problems:
            print(
                f"vllm-obs: {out} is stale: "
                + "; ".join(problems)
                + ". Regenerate it with `vllm-obs generate`.",
                file=sys.stderr,
            )
            return 1
        print(
            f"vllm-obs: {out} is up to date ({len(bundle.files)} files, {source.summary}).", file=sys.stderr
        )
        return 0
    removed = write_bundle(bundle.files, out)
    # After the write: an error is then the only thing a failed run prints.
    _warn(notes + bundle.warnings)
    extra = f", removed {len(removed)} no longer generated" if removed else ""
    print(f"vllm-obs: wrote {len(bundle.files)} files to {out}{extra} for {source.summary}.", file=sys.stderr)
    return 0


def _releases(args: argparse.Namespace) -> int:
    catalog = Catalog.load()
    for release in catalog.releases:
        default = " (default)" if release.version == catalog.default_release else ""
        print(f"{release.text:10} engines: {', '.join(release.engines)}{default}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
