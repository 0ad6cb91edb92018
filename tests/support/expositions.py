"""/metrics expositions built from the catalog, for features no server on this machine runs:
`catalog_exposition` prints a release's series with the named features on, as prometheus_client
does, with values growing with `t` so rates move. Names, types, labels and buckets are the release's."""

from __future__ import annotations

from vllm_obs.catalog import Catalog
from vllm_obs.releases import parse_release

MODEL = "tiny-llama"
# Label values the catalog leaves open, per (series, label) or per label.
VALUES: dict[tuple[str, str] | str, tuple[str, ...]] = {
    ("vllm:num_requests_waiting_by_reason", "reason"): ("capacity", "deferred"),
    ("vllm:admission_rejections_total", "reason"): ("max_num_queued_reqs", "max_num_queued_tokens"),
    ("vllm:prompt_tokens_by_source_total", "source"): (
        "local_compute",
        "local_cache_hit",
        "external_kv_transfer",
    ),
    ("vllm:prompt_tokens_cached_by_source_total", "source"): (
        "device",
        "host",
        "disk",
        "p2p",
        "external_unspecified",
    ),
    ("vllm:num_requests_kv_fetch_by_stage", "stage"): (
        "waiting_to_start",
        "in_progress",
        "completed_waiting",
    ),
    ("vllm:engine_sleep_state", "sleep_state"): ("awake", "weights_offloaded", "discard_all"),
    ("vllm:watermark_requests_total", "status"): ("watermarked",),
    "position": ("0", "1", "2"),
    "handler": ("/v1/completions",),
    "method": ("POST",),
}
# vllm:lora_requests_info: one label set (the current adapters), its value the time it was set.
LORA = {
    "max_lora": "4",
    "running_lora_adapters": "sql-adapter,chat-adapter",
    "waiting_lora_adapters": "summary-adapter",
}
CACHE_CONFIG = {
    "block_size": "16",
    "num_gpu_blocks": "2048",
    "cache_dtype": "auto",
    "enable_prefix_caching": "True",
}


def catalog_exposition(
    release: str = "0.33.0",
    features: tuple[str, ...] = (),
    t: float = 0.0,
    engines: tuple[str, ...] = ("0",),
    start: float = 1_700_000_000.0,
) -> str:
    catalog = Catalog.load()
    families = catalog.families(parse_release(release), "v1", features=features)
    lines: list[str] = []
    for name, spec in sorted(families.items()):
        labels = [label for label in spec.labels if label != "*"]
        sets = _label_sets(name, labels, spec.label_values, engines)
        base = name.removesuffix("_total") if spec.type == "counter" else name
        exposed = base + "_total" if spec.type == "counter" else name
        lines += [f"# HELP {exposed} {base} (built from the catalog).", f"# TYPE {exposed} {spec.type}"]
        for i, labelset in enumerate(sets):
            value = _value(name, spec.type, labelset, i, t, start)
            if spec.type == "histogram":
                lines += _histogram(name, labelset, spec.buckets or _one_two_five(4096), value)
            else:
                lines.append(f"{exposed}{_fmt(labelset)} {value}")
    return "\n".join(lines) + "\n"


def _label_sets(name: str, labels: list[str], known: dict, engines: tuple[str, ...]) -> list[dict]:
    if name == "vllm:lora_requests_info":
        return [dict(LORA)]
    if name == "vllm:cache_config_info":
        return [{**CACHE_CONFIG, "engine": e} for e in engines]
    sets: list[dict] = [{}]
    for label in labels:
        if label == "model_name":
            values: tuple[str, ...] = (MODEL,)
        elif label == "engine":
            values = engines
        else:
            values = tuple(known.get(label, ())) or VALUES.get((name, label)) or VALUES.get(label) or ("x",)
        sets = [{**s, label: v} for s in sets for v in values]
    return sets


def _value(name: str, kind: str, labels: dict, i: int, t: float, start: float) -> float:
    if name == "vllm:lora_requests_info":
        return start + t  # set_to_current_time
    if kind == "gauge":
        if name.endswith(("_perc", "usage_perc")):
            return 0.4 + 0.1 * i
        if name == "vllm:engine_sleep_state":
            return 1.0 if labels.get("sleep_state") == "awake" else 0.0
        if name.startswith("process_"):
            return {"process_max_fds": 65536.0, "process_start_time_seconds": start}.get(name, 100.0 + t)
        return 1.0 + i
    # Counters and histogram counts grow: a steady rate from the start.
    return round((2.0 + i) * (t + 60.0), 3)


def _histogram(name: str, labels: dict, bounds: tuple[float, ...] | list[float], count: float) -> list[str]:
    out = []
    finite = list(bounds)
    for j, bound in enumerate(finite):
        share = (j + 1) / (len(finite) + 1)
        out.append(f"{name}_bucket{_fmt({**labels, 'le': _bound(bound)})} {round(count * share, 3)}")
    out.append(f"{name}_bucket{_fmt({**labels, 'le': '+Inf'})} {count}")
    middle = finite[len(finite) // 2] if finite else 1.0
    out.append(f"{name}_sum{_fmt(labels)} {round(count * middle, 3)}")
    out.append(f"{name}_count{_fmt(labels)} {count}")
    return out


def _one_two_five(limit: int) -> list[float]:
    out, exponent = [], 0
    while True:
        for m in (1, 2, 5):
            if m * 10**exponent > limit:
                return out
            out.append(float(m * 10**exponent))
        exponent += 1


def _bound(value: float) -> str:
    return repr(float(value))


def _fmt(labels: dict) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return "{" + inner + "}"
