"""One probe cycle against one vLLM: `GET <health-path>`, then one single-token request, and after a
failure `GET /metrics` for the engine's progress counters (progress.py). Each target has its own
`requests.Session`, used by one thread at a time. A failure is returned, never retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import requests
from requests.auth import AuthBase

from . import __version__
from .outcome import (
    BAD_BODY,
    HTTP_4XX,
    TIMEOUT,
    Outcome,
    answer_error,
    exception_detail,
    exception_reason,
    first_model_id,
    status_reason,
)
from .progress import engine_progress
from .targets import Target

PROMPT = "ping"
MAX_BODY_BYTES = 1 << 20  # a one-token answer is under 1 KiB, a base64 embedding tens of KiB
MAX_METRICS_BYTES = 32 << 20  # vLLM's /metrics: tens of KiB, more with many models or adapters
HEALTH_TIMEOUT = 2.0  # /health does no inference; longer than this is unhealthy
METRICS_TIMEOUT = 2.0  # /metrics does no inference either
METRICS_PATH = "/metrics"
CHUNK = 16 << 10


class BearerAuth(AuthBase):
    """`Authorization: Bearer KEY` on every request, or no Authorization without a key.

    Always set as the session's auth, so that requests never sends a ~/.netrc entry instead.
    """

    def __init__(self, key: str | None) -> None:
        self.key = key

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        if self.key:
            request.headers["Authorization"] = f"Bearer {self.key}"
        return request


@dataclass(frozen=True)
class Settings:
    mode: str = "completion"  # or "chat", or "embed" for a pooling model
    timeout: float = 10.0
    health_path: str = "/health"
    model: str | None = None  # None: discover from /v1/models
    api_key: str | None = None


class DeadlineExceeded(Exception):
    """The probe's time budget ran out between socket reads."""


class OversizedBody(Exception):
    """A 2xx body larger than the answer asked for can be."""


@dataclass(frozen=True)
class Cycle:
    outcome: Outcome
    model: str | None  # the model name sent (None if none was known)
    health_up: bool
    discovered: bool = False  # the model came from /v1/models in this cycle
    # After a failure that counts for readiness: the engine's progress counters (None: unread).
    progress: float | None = None
    progress_missing: str | None = None  # why progress is None, for the log


class Canary:
    def __init__(self, target: Target, settings: Settings, clock: Callable[[], float] = time.monotonic):
        self.target = target
        self.settings = settings
        self.clock = clock
        self.model = settings.model
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"vllm-probe/{__version__}"
        self.session.auth = BearerAuth(settings.api_key)

    # -- one cycle -----------------------------------------------------------------------

    def run(self) -> Cycle:
        health_up = self.check_health()
        discovered = False
        deadline = self.clock() + self.settings.timeout
        if self.model is None:
            model, failure = self.discover(deadline)
            if failure is not None:
                return self._failed(failure, health_up)
            self.model, discovered = model, True
        model = self.model
        outcome = self.request(model, deadline)
        if outcome.status == 404 and self.settings.model is None:
            self.model = None  # the served name changed: ask /v1/models again next cycle
        if outcome.ok or outcome.reason == HTTP_4XX:
            return Cycle(outcome, model, health_up, discovered)
        progress, missing = self.read_progress()
        return Cycle(outcome, model, health_up, discovered, progress, missing)

    def _failed(self, outcome: Outcome, health_up: bool) -> Cycle:
        progress, missing = (None, None) if outcome.reason == HTTP_4XX else self.read_progress()
        return Cycle(outcome, None, health_up, progress=progress, progress_missing=missing)

    def read_progress(self) -> tuple[float | None, str | None]:
        """The engine's progress counters from the target's /metrics, or None and why not."""
        deadline = self.clock() + min(METRICS_TIMEOUT, self.settings.timeout)
        try:
            status, body = self._exchange("GET", METRICS_PATH, None, deadline, MAX_METRICS_BYTES)
        except Exception as exc:  # unread progress only keeps the target from looking busy
            return None, f"GET {METRICS_PATH}: {exception_detail(exc)}"
        if status != 200:
            return None, f"GET {METRICS_PATH} answered HTTP {status}"
        progress = engine_progress(body.decode("utf-8", "replace"))
        if progress is None:
            return None, f"GET {METRICS_PATH} shows no engine progress counter"
        return progress, None

    def check_health(self) -> bool:
        timeout = min(HEALTH_TIMEOUT, self.settings.timeout)
        try:
            status, _ = self._exchange("GET", self.settings.health_path, None, self.clock() + timeout)
        except Exception:  # any transport failure means "not healthy", never a dead worker
            return False
        return status == 200

    def discover(self, deadline: float) -> tuple[str | None, Outcome | None]:
        try:
            status, body = self._exchange("GET", "/v1/models", None, deadline)
        except Exception as exc:
            return None, self._failure(exc, "GET /v1/models")
        if not 200 <= status < 300:
            return None, Outcome.failure(
                status_reason(status), f"GET /v1/models answered HTTP {status}", status
            )
        model = first_model_id(body)
        if model is None:
            return None, Outcome.failure(BAD_BODY, "GET /v1/models answered no model id")
        return model, None

    def request(self, model: str, deadline: float) -> Outcome:
        if self.settings.mode == "embed":
            # A pooling model serves no completions (404); base64 keeps a 4096-float answer ~22 KiB.
            path = "/v1/embeddings"
            payload = {"model": model, "input": PROMPT, "encoding_format": "base64"}
        elif self.settings.mode == "chat":
            path = "/v1/chat/completions"
            payload = {
                "model": model,
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": 1,
                "temperature": 0,
            }
        else:
            path = "/v1/completions"
            payload = {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0}
        started = self.clock()
        try:
            status, body = self._exchange("POST", path, payload, deadline)
        except Exception as exc:
            return self._failure(exc, f"POST {path}")
        latency = self.clock() - started
        if not 200 <= status < 300:
            detail = f"POST {path} answered HTTP {status}"
            if status == 404:
                detail += self._not_found_hint()
            return Outcome.failure(status_reason(status), detail, status)
        problem = answer_error(body, self.settings.mode)
        if problem is not None:
            return Outcome.failure(BAD_BODY, f"POST {path} answered HTTP {status} but {problem}", status)
        return Outcome.success(latency, status)

    def _not_found_hint(self) -> str:
        """What a 404 to the request most likely means: vLLM registers /v1/embeddings only for
        pooling models and the completion routes only for generating ones."""
        if self.settings.mode == "embed":
            return " (a wrong --model or path, or a generating model: drop --mode embed)"
        if self.settings.model is not None:
            return " (a wrong --model or path, or a pooling model: use --mode embed)"
        return " (a pooling model? use --mode embed)"

    # -- transport -------------------------------------------------------------------------

    def _exchange(
        self, method: str, path: str, payload: dict | None, deadline: float, limit: int = MAX_BODY_BYTES
    ) -> tuple[int, bytes]:
        """One request with everything (connect, each read, the whole body) inside `deadline`."""
        remaining = deadline - self.clock()
        if remaining <= 0:
            raise DeadlineExceeded(f"no time left for {method} {path}")
        with self.session.request(
            method,
            self.target.url(path),
            json=payload,
            timeout=(remaining, remaining),
            stream=True,
            allow_redirects=False,
        ) as response:
            body = bytearray()
            if 200 <= response.status_code < 300:
                for chunk in response.iter_content(CHUNK):
                    body += chunk
                    if len(body) > limit:
                        raise OversizedBody(f"{method} {path} answered more than {limit} bytes")
                    if self.clock() > deadline:
                        raise DeadlineExceeded(f"{method} {path} was still sending its body")
            if self.clock() > deadline:
                raise DeadlineExceeded(f"{method} {path} answered after the timeout")
            return response.status_code, bytes(body)

    def _failure(self, exc: BaseException, what: str) -> Outcome:
        if isinstance(exc, DeadlineExceeded):
            return Outcome.failure(TIMEOUT, str(exc))
        if isinstance(exc, OversizedBody):
            return Outcome.failure(BAD_BODY, str(exc))
        reason = exception_reason(exc)
        if reason == TIMEOUT:
            return Outcome.failure(TIMEOUT, f"{what}: no answer within {self.settings.timeout:g} s")
        return Outcome.failure(reason, f"{what}: {exception_detail(exc)}")
