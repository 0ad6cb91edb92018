"""Build the expositions a platform would serve for the same vLLM server, from a real capture.

Writes tests/fixtures/metrics/platforms/ (`python scripts/build_platform_expositions.py`); docs/scripts.md lists them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "fixtures" / "metrics" / "vllm-0.32.0-cpu-traffic.prom"
OUT = ROOT / "tests" / "fixtures" / "metrics" / "platforms"

# Ray's global tags, as a vLLM-on-Ray scrape shows them (vLLM PR 24267), with made-up values.
RAY_LABELS = {
    "Component": "core_worker",
    "NodeAddress": "10.1.113.171",
    "ReplicaId": "3r4e76ag",
    "SessionName": "session_2026-11-30_16-00-00_000000_3579",
    "Version": "2.52.0",
    "WorkerId": "6f8b9bc4ba0fda1ef6769ce262129be2b522f90a31a593ec37379267",
}
KSERVE_LABELS = {
    "configuration_name": "tiny-llama-predictor",
    "revision_name": "tiny-llama-predictor-00001",
    "service_name": "tiny-llama-predictor",
}
LLMISVC_LABELS = {"llm_isvc_component": "workload", "llm_isvc_name": "tiny-llama", "llm_isvc_role": "decode"}
KSERVE_OWN = """# HELP request_predict_seconds predict latency
# TYPE request_predict_seconds histogram
request_predict_seconds_bucket{le="0.005",model_name="tiny-llama"} 0.0
request_predict_seconds_bucket{le="0.5",model_name="tiny-llama"} 7.0
request_predict_seconds_bucket{le="+Inf",model_name="tiny-llama"} 8.0
request_predict_seconds_count{model_name="tiny-llama"} 8.0
request_predict_seconds_sum{model_name="tiny-llama"} 1.2
"""

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>.*)$")
META = re.compile(r"^# (?P<kind>HELP|TYPE) (?P<name>\S+)(?P<rest>.*)$")


def with_labels(labels: str | None, extra: dict[str, str]) -> str:
    parts = [labels] if labels else []
    parts += [f'{k}="{v}"' for k, v in extra.items()]
    return "{" + ",".join(parts) + "}"


def convert(text: str, rename, keep, extra: dict[str, str]) -> str:
    out = []
    for line in text.splitlines():
        meta = META.match(line)
        sample = None if meta else SAMPLE.match(line)
        name = meta.group("name") if meta else sample.group("name") if sample else None
        if name is None or not keep(name):
            continue
        if meta:
            out.append(f"# {meta.group('kind')} {rename(name)}{meta.group('rest')}")
        else:
            out.append(f"{rename(name)}{with_labels(sample.group('labels'), extra)} {sample.group('value')}")
    return "\n".join(out) + "\n"


def vllm_only(name: str) -> bool:
    return name.startswith("vllm:") and not name.endswith("_created")


def main() -> None:
    text = SOURCE.read_text()
    OUT.mkdir(parents=True, exist_ok=True)
    header = f"# Constructed by scripts/build_platform_expositions.py from {SOURCE.name}.\n"
    ray = convert(text, lambda n: "ray_vllm_" + n[len("vllm:") :], vllm_only, RAY_LABELS)
    (OUT / "vllm-0.32.0-cpu-traffic-ray.prom").write_text(header + ray)
    ray_colon = convert(text, lambda n: "ray_" + n, vllm_only, RAY_LABELS)
    (OUT / "vllm-0.32.0-cpu-traffic-ray-colon.prom").write_text(header + ray_colon)

    def app(name: str) -> bool:
        return not name.endswith("_created")

    kserve = convert(text, lambda n: n, app, KSERVE_LABELS)
    (OUT / "vllm-0.32.0-cpu-traffic-kserve.prom").write_text(header + KSERVE_OWN + kserve)
    plain = convert(text, lambda n: n, app, {})
    llmisvc = convert(text, lambda n: "kserve_" + n, app, LLMISVC_LABELS)
    (OUT / "vllm-0.32.0-cpu-traffic-kserve-llmisvc.prom").write_text(header + plain + llmisvc)
    print(f"wrote {', '.join(sorted(p.name for p in OUT.glob('*.prom')))}", file=sys.stderr)


if __name__ == "__main__":
    main()
