"""The probe against a real vLLM CPU server running an embedding (pooling) model: it serves no
completions (404), so only `--mode embed` gets an answer, and vLLM counts that probe as one
finished request with its prompt tokens and no generated token."""

from __future__ import annotations

import pytest

from tests.support.vllm_server import VllmServer, http_get

from .helpers import samples, series, wait_until
from .test_live_vllm import run_once, vllm_finished, vllm_sample

pytestmark = pytest.mark.vllm

EMBED_MODEL = "tiny-embed"
ONCE = ("--timeout", "30", "--interval", "60")


@pytest.fixture(scope="module")
def pooling_vllm(tmp_path_factory: pytest.TempPathFactory):
    server = VllmServer(
        tmp_path_factory.mktemp("vllm-pooling") / "vllm.log",
        extra_args=("--runner", "pooling", "--convert", "embed"),
        model_name=EMBED_MODEL,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_an_embedding_model_is_probed_with_an_embedding(pooling_vllm: VllmServer) -> None:
    target = f"127.0.0.1:{pooling_vllm.port}"
    labels = {"target": target, "model_name": EMBED_MODEL}

    completion = run_once("--target", pooling_vllm.url, *ONCE)
    assert completion.returncode == 1
    values = samples(completion.stdout)
    assert values[series("vllm_probe_failures_total", reason="http_4xx", **labels)] == 1
    assert "answered HTTP 404 (a pooling model? use --mode embed)" in completion.stderr

    finished, prompt = vllm_finished(pooling_vllm), vllm_sample(pooling_vllm, "vllm:prompt_tokens_total")
    embed = run_once("--target", pooling_vllm.url, "--mode", "embed", *ONCE)
    assert embed.returncode == 0, embed.stderr
    values = samples(embed.stdout)
    assert values[series("vllm_probe_success", **labels)] == 1
    assert values[series("vllm_probe_requests_total", **labels)] == 1
    # The engine did the work: one more finished request (vLLM counts it just after answering),
    # its prompt counted, nothing generated.
    wait_until(lambda: vllm_finished(pooling_vllm) >= finished + 1, timeout=10, what="vLLM's count")
    assert vllm_finished(pooling_vllm) == finished + 1
    assert vllm_sample(pooling_vllm, "vllm:prompt_tokens_total") > prompt
    status, text = http_get(pooling_vllm.metrics_url)
    generated = series("vllm:generation_tokens_total", engine="0", model_name=EMBED_MODEL)
    assert status == 200 and samples(text)[generated] == 0
