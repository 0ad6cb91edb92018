"""Capture real /metrics expositions of the vLLM CPU build, for the generator's fast tests.

`python scripts/capture_vllm_metrics.py [spec-decode|data-parallel]`; docs/scripts.md lists what it writes.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.vllm_server import VLLM_VERSION, VllmServer, http_get, send_traffic  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "metrics"


# Server flags per feature capture. The n-gram proposer needs no draft model, so the CPU
# build with the tiny model really speculates (and exposes vllm:spec_decode_*).
FEATURES = {
    "spec-decode": [
        "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}',
    ],
    "data-parallel": ["--data-parallel-size", "2"],
}


def capture_feature(feature: str) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        VllmServer(Path(tmp) / "vllm.log", FEATURES[feature]) as server,
    ):
        # Repetitive prompts give the n-gram proposer something to propose from.
        counts = send_traffic(server, requests=8, errors=False, prompt="one two three one two three one two")
        time.sleep(2)
        status, busy = http_get(server.metrics_url)
        assert status == 200, status
        (OUT / f"vllm-{VLLM_VERSION}-cpu-{feature}.prom").write_text(busy)
        print(
            f"captured vLLM {VLLM_VERSION} with {feature} (ready in {server.started_in:.1f}s), traffic {counts}"
        )


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 1:
        capture_feature(sys.argv[1])
        return
    with tempfile.TemporaryDirectory() as tmp, VllmServer(Path(tmp) / "vllm.log") as server:
        status, idle = http_get(server.metrics_url)
        assert status == 200, status
        (OUT / f"vllm-{VLLM_VERSION}-cpu-idle.prom").write_text(idle)
        counts = send_traffic(server)
        time.sleep(2)  # let the engine publish its last step's stats
        status, busy = http_get(server.metrics_url)
        assert status == 200, status
        (OUT / f"vllm-{VLLM_VERSION}-cpu-traffic.prom").write_text(busy)
        print(f"captured vLLM {VLLM_VERSION} (ready in {server.started_in:.1f}s), traffic {counts}")


if __name__ == "__main__":
    main()
