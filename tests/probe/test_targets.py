"""The `target` label of each --target form, and what counts as a valid answer."""

from __future__ import annotations

import pytest
from vllm_probe.outcome import answer_error, first_model_id
from vllm_probe.targets import Target, TargetError, parse_target, parse_targets


@pytest.mark.parametrize(
    ("value", "instance", "base"),
    [
        ("http://vllm:8000", "vllm:8000", "http://vllm:8000"),
        ("http://vllm:8000/", "vllm:8000", "http://vllm:8000"),
        ("http://vllm", "vllm:80", "http://vllm"),
        ("https://vllm.example.org", "vllm.example.org:443", "https://vllm.example.org"),
        ("http://10.0.0.7:8000", "10.0.0.7:8000", "http://10.0.0.7:8000"),
        ("http://[fd00::7]:8000", "[fd00::7]:8000", "http://[fd00::7]:8000"),
        ("http://gateway:8080/llama/", "gateway:8080", "http://gateway:8080/llama"),
        ("llama-0=http://vllm:8000", "llama-0", "http://vllm:8000"),
        (" llama-0 = http://vllm:8000 ", "llama-0", "http://vllm:8000"),
    ],
)
def test_target_label_and_base_url(value: str, instance: str, base: str) -> None:
    assert parse_target(value) == Target(instance, base)


def test_request_urls_keep_a_path_prefix() -> None:
    assert parse_target("http://gateway:8080/llama").url("/v1/completions") == (
        "http://gateway:8080/llama/v1/completions"
    )


def test_the_same_server_twice_needs_names() -> None:
    with pytest.raises(TargetError, match="two targets have the label 'vllm:80'"):
        parse_targets(["http://vllm", "http://vllm:80/"])
    assert [t.instance for t in parse_targets(["a=http://vllm", "b=http://vllm:80"])] == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "mode", "problem"),
    [
        (b'{"choices": [{"text": "!"}]}', "completion", None),
        (b'{"choices": [{"text": ""}]}', "completion", None),  # one token may decode to nothing
        (b'{"choices": [{"message": {"role": "assistant", "content": null}}]}', "chat", None),
        (b'{"choices": [{"message": {"content": "!"}}]}', "completion", "the first choice has no text"),
        (b'{"choices": [{"text": "!"}]}', "chat", "the first choice has no message"),
        (b'{"choices": []}', "completion", "the body has no choices"),
        (b'{"object": "error"}', "completion", "the body has no choices"),
        (b'{"choices": ["!"]}', "completion", "the first choice is not an object"),
        (b"[1, 2]", "completion", "the body is not a JSON object"),
        (b"<html>", "completion", "the body is not JSON"),
        (b"", "completion", "the body is not JSON"),
        (b"\xff\xfe", "completion", "the body is not JSON"),
        (b'{"data": [{"index": 0, "embedding": "Ks5iPJrN"}]}', "embed", None),  # base64
        (b'{"data": [{"embedding": [0.01, -0.1]}]}', "embed", None),
        (b'{"data": [{"embedding": ""}]}', "embed", "the first datum has no embedding"),
        (b'{"data": [{"object": "embedding"}]}', "embed", "the first datum has no embedding"),
        (b'{"data": []}', "embed", "the body has no data"),
        (b'{"choices": [{"text": "!"}]}', "embed", "the body has no data"),
    ],
)
def test_what_counts_as_an_answer(body: bytes, mode: str, problem: str | None) -> None:
    assert answer_error(body, mode) == problem


@pytest.mark.parametrize(
    ("body", "model"),
    [
        (b'{"data": [{"id": "llama"}, {"id": "lora-a"}]}', "llama"),
        (b'{"data": []}', None),
        (b'{"data": [{"id": ""}]}', None),
        (b'{"data": [{"id": 7}]}', None),
        (b'{"data": {"id": "x"}}', None),
        (b"<html>", None),
    ],
)
def test_model_discovery_takes_the_first_id(body: bytes, model: str | None) -> None:
    assert first_model_id(body) == model
