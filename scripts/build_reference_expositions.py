"""Build /metrics expositions of older vLLM releases from the per-release metric tables.

`--csv PATH/vllm-metrics-by-version.csv`, or `--source PATH/vllm-X` for a newer release (docs/scripts.md).
"""

from __future__ import annotations

import argparse
import ast
import csv
import re
from pathlib import Path

RELEASES = [("0.9.0", "V0"), ("0.10.0", "V1"), ("0.11.0", "V1"), ("0.13.0", "V1"), ("0.20.0", "V1")]
# Where a V1 release defines the series a default server shows (the table's files, and from
# 0.34 the API server's renderer, whose histogram appears with the first request).
SOURCE_FILES = (
    "vllm/v1/metrics/loggers.py",
    "vllm/v1/spec_decode/metrics.py",
    "vllm/v1/metrics/perf.py",
    "vllm/renderers/metrics.py",
)
CONSTRUCTORS = {
    "_gauge_cls": "gauge",
    "_counter_cls": "counter",
    "_histogram_cls": "histogram",
    "Gauge": "gauge",
    "Counter": "counter",
    "Histogram": "histogram",
}
OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "metrics" / "reference"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
MAX_MODEL_LEN = 4096
ITERATION = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
# fmt: off
FAMILIES = {
    "time_to_first_token": [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                            7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0],
    "inter_token_latency": [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                            10.0, 20.0, 40.0, 80.0],
    "request_latency": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                        240.0, 480.0, 960.0, 1920.0, 7680.0],
    "iteration_tokens": ITERATION,
    "request_params_n": [1, 2, 5, 10, 20],
    "request_num_preemptions": [1, 2, 3, 4, 5, 10, 20],
}
# fmt: on


def vt(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def one_two_five(limit: int) -> list[int]:
    out, mantissa, exponent = [], [1, 2, 5], 0
    while True:
        for m in mantissa:
            value = m * 10**exponent
            if value > limit:
                return out
            out.append(value)
        exponent += 1


def buckets(expr: str, families: dict[str, list[float]] = FAMILIES) -> list[float]:
    expr = expr.strip()
    match = re.match(r"histogram_buckets\('(\w+)'", expr)
    if match:
        family = match.group(1)
        return one_two_five(MAX_MODEL_LEN) if family == "request_tokens" else families[family]
    if expr.startswith("build_1_2_5_buckets"):
        return one_two_five(MAX_MODEL_LEN)
    if "capture_sizes" in expr or "cudagraph" in expr:
        return ITERATION
    return [float(x) for x in ast.literal_eval(expr)]


def labels_of(row: dict, version: str) -> list[str]:
    text, engine = row["labels"], row["engine"]
    base = ["model_name", "engine"] if engine == "V1" and vt(version) >= (0, 8, 3) else ["model_name"]
    if text == "labelnames":
        return base
    if text.startswith("labelnames + "):
        extra = re.findall(r"'(\w+)'", text) or ["finished_reason"]
        return base + extra
    if text.startswith("["):
        return ast.literal_eval(text)
    return []


def fmt(value: float) -> str:
    from prometheus_client.utils import floatToGoString

    return floatToGoString(value)


def render(rows: list[dict], version: str, engine: str, families: dict[str, list[float]] = FAMILIES) -> str:
    lines = [
        f"# Built by scripts/build_reference_expositions.py for vLLM {version}, {engine} engine, from the",
        "# release's metric definitions (names, types, labels, buckets); values are illustrative.",
    ]
    v1 = engine == "V1"
    for row in rows:
        name = row["exposed_samples"].split()[0]
        kind = row["type"]
        cond = row["condition"]
        declared_only = bool(cond) and cond != "type == 'cache_config'"
        if "spec_decode" in name or "lora" in name or name == "vllm:tokens_total":
            declared_only = True  # only filled when that feature runs
        if kind == "histogram":
            family = name[: -len("_bucket")]
        elif kind == "counter":
            family = name[: -len("_total")] if name.endswith("_total") else name
        else:
            family = name
        lines.append(f"# HELP {family if kind != 'counter' else family + '_total'} {family} (reference).")
        lines.append(f"# TYPE {family if kind != 'counter' else family + '_total'} {kind}")
        if declared_only:
            continue
        names = labels_of(row, version)
        if row["labels"] == "metrics_info.keys()":
            label_sets = [
                {
                    "block_size": "16",
                    "cache_dtype": "auto",
                    "num_gpu_blocks": "2048",
                    **({"engine": "0"} if v1 and vt(version) >= (0, 9, 0) else {}),
                }
            ]
        elif "finished_reason" in names:
            reasons = ["stop", "length", "abort"] + (["error"] if v1 and vt(version) >= (0, 13, 0) else [])
            if not v1:
                reasons = ["stop", "length"]  # V0 creates children on first use
            label_sets = [{**_base(names), "finished_reason": r} for r in reasons]
        elif "reason" in names:
            label_sets = [{**_base(names), "reason": r} for r in ("capacity", "deferred")]
        elif "sleep_state" in names:
            label_sets = [
                {**_base(names), "sleep_state": s} for s in ("awake", "weights_offloaded", "discard_all")
            ]
        elif "request_type" in names:
            label_sets = [{**_base(names), "request_type": r} for r in ("chat", "completion")]
        elif "source" in names:
            label_sets = [
                {**_base(names), "source": s}
                for s in ("local_compute", "local_cache_hit", "external_kv_transfer")
            ]
        else:
            label_sets = [_base(names)]
        for labels in label_sets:
            if kind == "histogram":
                total = 0
                for bound in buckets(row["buckets"], families):
                    total = 7 if bound >= 1 else 2
                    lines.append(_sample(f"{family}_bucket", {**labels, "le": fmt(bound)}, total))
                lines.append(_sample(f"{family}_bucket", {**labels, "le": "+Inf"}, 7))
                lines.append(_sample(f"{family}_count", labels, 7))
                lines.append(_sample(f"{family}_sum", labels, 12.5))
            elif kind == "counter":
                lines.append(_sample(f"{family}_total", labels, 42))
            else:
                lines.append(_sample(family, labels, 1 if "info" in family else 0.25))
        if v1 and kind in ("counter", "histogram") and row["labels"] != "metrics_info.keys()":
            # Single-process V1 servers also print _created gauges; V0 disables them.
            lines.append(f"# HELP {family}_created {family} (reference).")
            lines.append(f"# TYPE {family}_created gauge")
            for labels in label_sets:
                lines.append(_sample(f"{family}_created", labels, 1.7e9))
    if v1 and vt(version) >= (0, 8, 5):
        lines.append("# HELP http_requests_total Total number of requests by method, status and handler.")
        lines.append("# TYPE http_requests_total counter")
        for status, count in (("2xx", 40), ("4xx", 2)):
            labels = {"handler": "/v1/completions", "method": "POST", "status": status}
            lines.append(_sample("http_requests_total", labels, count))
    return "\n".join(lines) + "\n"


def _base(names: list[str]) -> dict[str, str]:
    out = {}
    if "model_name" in names:
        out["model_name"] = MODEL
    if "engine" in names:
        out["engine"] = "0"
    return out


def _sample(name: str, labels: dict[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}} {float(value)}" if inner else f"{name} {float(value)}"


def source_rows(root: Path) -> tuple[str, list[dict], dict[str, list[float]]]:
    """The release, its rows as the table would hold them, and its bucket families, read from
    an extracted source distribution."""
    version = re.search(r"^Version: (\S+)$", (root / "PKG-INFO").read_text(), re.M).group(1)
    rows = []
    for relative in SOURCE_FILES:
        path = root / relative
        if path.exists():
            rows += _definitions(ast.parse(path.read_text()), version, relative)
    families = {}
    for node in ast.parse((root / "vllm/v1/metrics/buckets.py").read_text()).body:
        if isinstance(node, ast.AnnAssign) and node.target.id.endswith("_BUCKETS") and node.value:
            families[node.target.id.removesuffix("_BUCKETS").lower()] = list(ast.literal_eval(node.value))
    return version, rows, families


def _definitions(tree: ast.Module, version: str, relative: str) -> list[dict]:
    """One row per metric constructor called with a vllm: name (directly or through a local)."""
    rows = []

    def visit(node: ast.AST, conditions: tuple[str, ...], scope: dict[str, ast.expr]) -> None:
        if isinstance(node, ast.FunctionDef):
            scope = {}
            for inner in ast.walk(node):  # a function's locals, by their (last) assignment
                if isinstance(inner, ast.Assign) and len(inner.targets) == 1:
                    target = inner.targets[0]
                    if isinstance(target, ast.Name):
                        scope[target.id] = inner.value
            conditions = ()
        if isinstance(node, ast.Call):
            row = _row(node, conditions, scope, version, relative)
            if row:
                rows.append(row)
        if isinstance(node, ast.If):
            visit(node.test, conditions, scope)
            for child in node.body:
                visit(child, (*conditions, ast.unparse(node.test)), scope)
            for child in node.orelse:
                visit(child, (*conditions, f"not ({ast.unparse(node.test)})"), scope)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, conditions, scope)

    visit(tree, (), {})
    return rows


def _row(
    call: ast.Call, conditions: tuple[str, ...], scope: dict, version: str, relative: str
) -> dict | None:
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    kind = CONSTRUCTORS.get(called)
    keywords = {k.arg: k.value for k in call.keywords}
    name = keywords.get("name")
    if isinstance(name, ast.Name):  # name = "vllm:cache_config_info", then name=name
        name = scope.get(name.id)
    if kind is None or not isinstance(name, ast.Constant) or not str(name.value).startswith("vllm:"):
        return None
    defined = name.value
    if kind == "counter":
        exposed = defined if defined.endswith("_total") else defined + "_total"
    elif kind == "histogram":
        exposed = " ".join(f"{defined}_{s}" for s in ("bucket", "sum", "count"))
    else:
        exposed = defined
    labels, bounds = keywords.get("labelnames"), keywords.get("buckets")
    # Locals stand for their value (pos_labelnames, ttft_buckets); the parameter `labelnames` stays.
    labels = scope.get(labels.id, labels) if isinstance(labels, ast.Name) else labels
    bounds = scope.get(bounds.id, bounds) if isinstance(bounds, ast.Name) else bounds
    return {
        "version": version,
        "engine": "V1",
        "defined_name": defined,
        "type": kind,
        "exposed_samples": exposed,
        "labels": ast.unparse(labels) if labels is not None else "",
        "buckets": ast.unparse(bounds) if bounds is not None else "",
        "condition": " and ".join(conditions),
        "file": relative,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, help="the per-release table of metric definitions")
    parser.add_argument("--source", type=Path, action="append", default=[], help="an extracted sdist")
    args = parser.parse_args()
    if not args.csv and not args.source:
        parser.error("give --csv, --source or both")
    OUT.mkdir(parents=True, exist_ok=True)
    for root in args.source:
        version, chosen, families = source_rows(root)
        path = OUT / f"vllm-{version}-v1.prom"
        path.write_text(render(chosen, version, "V1", families))
        print(f"wrote {path} ({len(chosen)} series)")
    if not args.csv:
        return
    rows = list(csv.DictReader(args.csv.open()))
    for version, engine in RELEASES:
        chosen = [r for r in rows if r["version"] == version and r["engine"] == engine]
        chosen = [r for r in chosen if "show_hidden" not in r["condition"]]
        path = OUT / f"vllm-{version}-{engine.lower()}.prom"
        path.write_text(render(chosen, version, engine))
        print(f"wrote {path} ({len(chosen)} series)")


if __name__ == "__main__":
    main()
