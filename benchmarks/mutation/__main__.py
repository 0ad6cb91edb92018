"""`make mutation`: every mutant of both bundles' alerting rules against their promtool tests.
Writes docs/mutation.md: `python -m benchmarks.mutation [--report docs/mutation.md] [--workers 2]`;
`--bundle default --alert 'VllmKV.*'` takes a quick look without a report.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

from . import report
from .bundles import DEFAULT, EVERYTHING, REPO, digest, generate_everything
from .equivalents import load_equivalents
from .run import Bundle, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.mutation", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--report", type=Path, default=REPO / "docs" / "mutation.md")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--bundle",
        action="append",
        choices=("default", "everything"),
        help="only this bundle (repeatable; default: both)",
    )
    parser.add_argument(
        "--alert",
        type=re.compile,
        help="only the mutants of alerts whose name matches this regex; prints the survivors, writes no report",
    )
    args = parser.parse_args(argv)
    chosen = args.bundle or ["default", "everything"]
    equivalents = load_equivalents()
    results = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vllm-obs-mutation-") as tmp:
        roots = {
            "default": lambda: (DEFAULT, REPO),
            "everything": lambda: (EVERYTHING, generate_everything(Path(tmp))),
        }
        for name, root in (roots[which]() for which in chosen):
            bundle = Bundle(root)
            mutants = bundle.mutants()
            if args.alert is not None:
                mutants = [m for m in mutants if args.alert.fullmatch(m.alert)]
            print(f"{name}: {len(mutants)} mutants", file=sys.stderr, flush=True)
            outcomes = run(bundle, mutants, args.workers)
            results.append(report.Result(name, digest(root), outcomes, equivalents))
    seconds = time.monotonic() - started
    if args.alert is not None:
        for result in results:
            print(report.summary(result), file=sys.stderr)
            for line in report.survivors(result):
                print(line, file=sys.stderr)
        return 0
    args.report.write_text(report.markdown(results, seconds, args.workers), "utf-8")
    for result in results:
        print(report.summary(result), file=sys.stderr)
    print(f"wrote {args.report} ({seconds / 60:.1f} min)", file=sys.stderr)
    return 0 if all(r.kill_rate >= report.TARGET for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
