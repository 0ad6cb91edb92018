"""What one probe came to: success with a latency, or a failure with a reason from a fixed set.
The reasons are the only `reason` label values: the exporters' contract fixes the set, the names
here are checked against it at import, and none is ever taken from an error message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import requests
import urllib3.exceptions

from .contract import closed_values

TIMEOUT = "timeout"
REFUSED = "refused"
HTTP_4XX = "http_4xx"
HTTP_5XX = "http_5xx"
BAD_BODY = "bad_body"
ERROR = "error"  # any other failure: DNS, TLS, reset, a redirect, a malformed request
REASONS = closed_values(
    "reason", "vllm_probe_failures", named=(TIMEOUT, REFUSED, HTTP_4XX, HTTP_5XX, BAD_BODY, ERROR)
)
"""Values of the `reason` label of vllm_probe_failures, in exposition order."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    reason: str | None = None  # one of REASONS when not ok
    detail: str = ""  # for the log line only, never a label
    latency: float | None = None  # seconds, for a success
    status: int | None = None  # the HTTP status, when there was an answer

    @staticmethod
    def success(latency: float, status: int) -> Outcome:
        return Outcome(True, latency=latency, status=status)

    @staticmethod
    def failure(reason: str, detail: str, status: int | None = None) -> Outcome:
        assert reason in REASONS, reason
        return Outcome(False, reason=reason, detail=detail, status=status)


def status_reason(status: int) -> str:
    if 400 <= status < 500:
        return HTTP_4XX
    if 500 <= status < 600:
        return HTTP_5XX
    return ERROR  # 1xx/3xx: the probe follows no redirects, so this is not an answer


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and everything it wraps (requests and urllib3 nest them several deep)."""
    todo, seen = [exc], set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        nested = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        todo.extend(e for e in nested if isinstance(e, BaseException))


def exception_reason(exc: BaseException) -> str:
    causes = list(_causes(exc))
    if any(isinstance(e, ConnectionRefusedError) for e in causes):
        return REFUSED
    for e in causes:
        # urllib3 derives NewConnectionError (refused, unreachable) from its timeout class.
        if isinstance(e, urllib3.exceptions.NewConnectionError):
            continue
        if isinstance(e, (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
            return TIMEOUT
    return ERROR


def exception_detail(exc: BaseException) -> str:
    """A short description for the log: the innermost message, one line, bounded."""
    innermost = exc
    for cause in _causes(exc):
        if str(cause):
            innermost = cause
    text = " ".join(str(innermost).split()) or type(innermost).__name__
    return text[:200]


def answer_error(body: bytes, mode: str) -> str | None:
    """None if `body` is a valid answer of the mode's endpoint, else what is wrong with it."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "the body is not JSON"
    if not isinstance(document, dict):
        return "the body is not a JSON object"
    if mode == "embed":
        data = document.get("data")
        if not isinstance(data, list) or not data or not isinstance(data[0], dict):
            return "the body has no data"
        vector = data[0].get("embedding")
        # base64 (as asked for) or a list of floats: either is the engine's answer.
        if not isinstance(vector, (str, list)) or not vector:
            return "the first datum has no embedding"
        return None
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices:
        return "the body has no choices"
    first = choices[0]
    if not isinstance(first, dict):
        return "the first choice is not an object"
    if mode == "chat":
        if not isinstance(first.get("message"), dict):
            return "the first choice has no message"
    elif not isinstance(first.get("text"), str):
        return "the first choice has no text"
    return None


def first_model_id(body: bytes) -> str | None:
    """The first `data[].id` of a /v1/models answer, or None if there is none."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return None
    model = data[0].get("id")
    return model if isinstance(model, str) and model.strip() else None
