"""Talk to Prometheus (prometheus-api-client) and Alertmanager (its v2 API), authenticating one way:
bearer token, basic auth, private CA or no verification, and a URL path prefix. A failure of the
doctor's own input raises DoctorCannotRun; one call's failure raises ApiError, which checks report.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests
import urllib3
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from .. import __version__
from .access import Auth
from .findings import DoctorCannotRun

# Concurrent queries: enough to hide round trips, few enough not to load a busy Prometheus.
WORKERS = 4


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status  # 0: no HTTP answer (a timeout)
        self.message = message

    @property
    def describe(self) -> str:
        return f"HTTP {self.status}: {self.message}" if self.status else self.message


class CountedSession(requests.Session):
    """A session that counts its HTTP requests (the report says how many a run made)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests_made = 0
        self._lock = threading.Lock()

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        with self._lock:
            self.requests_made += 1
        return super().send(request, **kwargs)


def _session(auth: Auth, service: str, base: str) -> CountedSession:
    session = CountedSession()
    session.headers["User-Agent"] = f"vllm-obs-doctor/{__version__}"
    if auth.bearer_token:
        session.headers["Authorization"] = f"Bearer {auth.bearer_token}"
    if auth.basic:
        session.auth = auth.basic
    # Every call passes this on explicitly too: requests lets REQUESTS_CA_BUNDLE override a
    # session's own setting otherwise.
    session.verify = False if auth.insecure else (auth.ca_file or True)
    if auth.insecure:
        # The user asked for no verification; a warning on every call would only repeat that.
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    session.hooks["response"].append(_refuse_foreign(service, base, auth))
    return session


def _refuse_foreign(service: str, base: str, auth: Auth) -> Callable:
    """A response hook: a refused login or an HTML page means the doctor cannot go on."""

    def hook(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        if response.status_code in (401, 403):
            how = (
                "pass --bearer-token-file (or VLLM_OBS_PROMETHEUS_TOKEN) or --basic-auth-user with "
                "--basic-auth-password-file"
                if service == "Prometheus"
                else "pass --alertmanager-bearer-token-file, or the credentials it shares with Prometheus "
                "(--bearer-token-file, --basic-auth-user)"
            )
            raise DoctorCannotRun(
                f"{service} at {base} answered HTTP {response.status_code} (not authorised); {how}."
            )
        if "text/html" in response.headers.get("Content-Type", "").lower():
            raise DoctorCannotRun(
                f"{base} answered with an HTML page (HTTP {response.status_code}), not the {service} API; "
                "pass the URL the API itself lives under (with its path prefix, e.g. https://host/prometheus) "
                "and credentials the proxy in front of it accepts."
            )

    return hook


def _call(service: str, base: str, timeout: float, call: Callable[[], Any]) -> Any:
    """Run one HTTP call, turning transport failures into one sentence."""
    try:
        return call()
    except requests.exceptions.SSLError as exc:
        hint = (
            "pass --ca-file with the CA that signed it, or --insecure-skip-verify"
            if "CERTIFICATE" in str(exc).upper()
            else "check that it speaks https on that port, or use http://"
        )
        raise DoctorCannotRun(
            f"the TLS connection to {service} at {base} failed ({_reason(exc)}); {hint}."
        ) from None
    except requests.exceptions.Timeout:
        raise ApiError(0, f"no answer within {timeout:g} s") from None
    except requests.exceptions.ConnectionError as exc:
        # With retries on, urllib3 reports a read that timed out as a connection error.
        if isinstance(_innermost(exc), urllib3.exceptions.ReadTimeoutError):
            raise ApiError(0, f"no answer within {timeout:g} s") from None
        text = str(exc).lower()
        what = (
            "connection refused"
            if "refused" in text
            else ("unknown host" if "resolve" in text else _reason(exc))
        )
        raise DoctorCannotRun(
            f"cannot reach {service} at {base} ({what}); check the URL, that it runs, and the network."
        ) from None


def _innermost(exc: BaseException) -> BaseException:
    """The failure under requests' and urllib3's wrappers (MaxRetryError keeps it in .reason)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "reason", None)
        if isinstance(inner, BaseException):
            exc = inner
        elif exc.args and isinstance(exc.args[0], BaseException):
            exc = exc.args[0]
        else:
            break
    return exc


def _reason(exc: BaseException) -> str:
    while exc.__context__ is not None and exc.__context__ is not exc:
        exc = exc.__context__
    return " ".join(str(getattr(exc, "reason", None) or exc).split())[:160]


def _error_text(body: bytes | str) -> str:
    try:
        data = json.loads(body)
    except (ValueError, TypeError):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
        return " ".join(text.split())[:200] or "no body"
    if isinstance(data, dict):
        return str(data.get("error") or data.get("message") or data)[:300]
    return str(data)[:300]


class PrometheusClient:
    def __init__(self, url: str, auth: Auth) -> None:
        self.url = url.rstrip("/")
        self.auth = auth
        self.session = _session(auth, "Prometheus", self.url)
        # The client library keeps only repr(body) of a failed call; keep the response itself.
        self._failed = threading.local()
        self.session.hooks["response"].append(self._remember_failure)
        retry = Retry(
            total=2,
            connect=1,
            read=0,
            status=2,
            backoff_factor=0.3,
            status_forcelist=(502, 503, 504),
            allowed_methods=None,
            raise_on_status=False,
        )
        self.api = PrometheusConnect(url=self.url, session=self.session, retry=retry, timeout=auth.timeout)

    def check_reachable(self) -> None:
        """One trivial query: the URL, its prefix and the credentials must all be right."""
        try:
            result = self.query("vector(1)")
        except ApiError as exc:
            if exc.status == 404:
                raise DoctorCannotRun(
                    f"{self.url} has no Prometheus API (HTTP 404 for /api/v1/query); pass the URL the API "
                    "lives under, with its path prefix (Thanos Query: the root; Mimir: .../prometheus)."
                ) from None
            if exc.status == 0:
                raise DoctorCannotRun(
                    f"Prometheus at {self.url} gave {exc.message} to a trivial query; check it is not overloaded, or raise --timeout."
                ) from None
            raise DoctorCannotRun(
                f"Prometheus at {self.url} refused a trivial query (HTTP {exc.status}: {exc.message}); check the URL."
            ) from None
        if not isinstance(result, list):
            raise DoctorCannotRun(
                f"{self.url} did not answer like the Prometheus API; check the URL and its path prefix."
            )

    def query(self, expr: str) -> list[dict]:
        def call() -> list[dict]:
            try:
                return self.api.custom_query(expr)
            except PrometheusApiClientException as exc:
                raise self._api_error(exc) from None
            except (ValueError, KeyError, TypeError):
                raise DoctorCannotRun(
                    f"{self.url} answered a query with something that is not Prometheus API JSON; check the URL "
                    "and its path prefix."
                ) from None

        return _call("Prometheus", self.url, self.auth.timeout, call)

    def query_many(self, exprs: Sequence[str]) -> list[list[dict] | ApiError]:
        """Run queries concurrently; each result is the samples or the ApiError it gave."""

        def one(expr: str) -> list[dict] | ApiError:
            try:
                return self.query(expr)
            except ApiError as exc:
                return exc

        if len(exprs) <= 1:
            return [one(e) for e in exprs]
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            return list(pool.map(one, exprs))

    def targets(self, scrape_pool: str) -> list[dict]:
        """The active targets of one scrape pool (a Prometheus older than 2.42 sends them all)."""

        def call() -> list[dict]:
            try:
                return self.api.get_targets(state="active", scrape_pool=scrape_pool)["activeTargets"]
            except PrometheusApiClientException as exc:
                raise self._api_error(exc) from None

        return _call("Prometheus", self.url, self.auth.timeout, call)

    def get(self, path: str, params: dict | None = None) -> Any:
        """GET an API path the client library has no method for; returns its `data`."""

        def call() -> Any:
            response = self.session.get(
                self.url + path, params=params, timeout=self.auth.timeout, verify=self.session.verify
            )
            if response.status_code != 200:
                raise ApiError(response.status_code, _error_text(response.content))
            try:
                return response.json()["data"]
            except (ValueError, KeyError):
                raise ApiError(response.status_code, "the answer is not Prometheus API JSON") from None

        return _call("Prometheus", self.url, self.auth.timeout, call)

    def _remember_failure(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        self._failed.response = response if response.status_code != 200 else None

    def _api_error(self, exc: PrometheusApiClientException) -> ApiError:
        response = getattr(self._failed, "response", None)
        if response is None:
            return ApiError(0, str(exc)[:300])
        return ApiError(response.status_code, _error_text(response.content))

    def close(self) -> None:
        self.api.close()


class AlertmanagerClient:
    def __init__(self, url: str, auth: Auth) -> None:
        self.url = url.rstrip("/")
        self.auth = auth
        self.session = _session(auth, "Alertmanager", self.url)

    def get(self, path: str, params: dict | None = None) -> Any:
        def call() -> Any:
            response = self.session.get(
                self.url + path, params=params, timeout=self.auth.timeout, verify=self.session.verify
            )
            if response.status_code != 200:
                raise ApiError(response.status_code, _error_text(response.content))
            try:
                return response.json()
            except ValueError:
                raise ApiError(response.status_code, "the answer is not JSON") from None

        return _call("Alertmanager", self.url, self.auth.timeout, call)

    def close(self) -> None:
        self.session.close()
