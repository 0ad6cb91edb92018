"""Read an exposition from a live /metrics URL or a saved file, with clear failures."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import requests
import urllib3

from . import __version__
from .errors import BundleError

# vLLM's /metrics is a few hundred kB at most; refuse anything absurd instead of
# filling memory with a wrong URL's response.
MAX_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024


def read_url(url: str, *, timeout: float, bearer_token: str | None, verify_tls: bool) -> str:
    if not url.startswith(("http://", "https://")):
        raise BundleError(f"--metrics-url {url} is not an http(s) URL; pass e.g. http://HOST:8000/metrics.")
    headers = {
        "Accept": "text/plain;version=0.0.4",
        "User-Agent": f"vllm-obs/{__version__}",
        # Content-Length then counts the bytes we read, which is how a cut body shows.
        "Accept-Encoding": "identity",
    }
    if bearer_token:
        headers["Authorization"] = f"Bearer {bearer_token}"
    try:
        with warnings.catch_warnings():
            # The user asked for no verification; urllib3's warning would repeat that to them.
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            with requests.get(
                url, headers=headers, timeout=timeout, verify=verify_tls, stream=True
            ) as response:
                if response.status_code != 200:
                    raise BundleError(_http_status_message(url, response.status_code))
                declared = response.headers.get("Content-Length")
                content_type = response.headers.get("Content-Type", "")
                body = _read_capped(response, url)
    except requests.exceptions.ChunkedEncodingError:
        # urllib3 enforces Content-Length: a body cut short raises IncompleteRead here.
        raise BundleError(
            f"{url} closed the connection before sending the whole body, so the exposition is "
            "truncated; fetch it again."
        ) from None
    except requests.exceptions.Timeout:
        raise BundleError(_timeout_message(url, timeout)) from None
    except requests.exceptions.SSLError as exc:
        if "CERTIFICATE" not in str(exc).upper():
            raise BundleError(
                f"the TLS handshake with {url} failed ({_reason(exc)}); check that the server speaks "
                "https on that port, or use http://."
            ) from None
        raise BundleError(
            f"the TLS certificate of {url} was refused ({_reason(exc)}); fix the certificate or pass "
            "--insecure-skip-verify."
        ) from None
    except requests.exceptions.ConnectionError as exc:
        raise BundleError(_connection_message(url, exc)) from None
    except requests.exceptions.RequestException as exc:
        raise BundleError(
            f"{url} did not answer with valid HTTP ({type(exc).__name__}); check the URL and port."
        ) from None
    if declared and declared.isdigit() and int(declared) != len(body):
        raise BundleError(
            f"{url} sent {len(body)} of the {declared} bytes it announced, so the exposition is "
            "truncated; fetch it again."
        )
    if "text/html" in content_type.lower():
        raise BundleError(
            f"{url} returned an HTML page, not a Prometheus exposition; point at vLLM's /metrics "
            "path itself, not a proxy's login or error page."
        )
    return _decode(body, url)


def _read_capped(response: requests.Response, url: str) -> bytes:
    body = bytearray()
    for chunk in response.iter_content(_CHUNK):
        body += chunk
        if len(body) > MAX_BYTES:
            raise BundleError(
                f"{url} returned more than {MAX_BYTES // 2**20} MiB; that is not a vLLM /metrics page."
            )
    return bytes(body)


def read_file(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            body = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise BundleError(f"--metrics-file {path} does not exist; check the path.") from None
    except IsADirectoryError:
        raise BundleError(f"--metrics-file {path} is a directory; pass the saved exposition file.") from None
    except PermissionError:
        raise BundleError(
            f"--metrics-file {path} is not readable (permission denied); fix its permissions."
        ) from None
    except OSError as exc:
        raise BundleError(f"cannot read --metrics-file {path}: {exc.strerror}.") from None
    if len(body) > MAX_BYTES:
        raise BundleError(
            f"{path} is larger than {MAX_BYTES // 2**20} MiB; that is not a vLLM /metrics page."
        )
    return _decode(body, path)


def read_token_file(path: str) -> str:
    try:
        token = Path(path).read_text("utf-8").strip()
    except OSError as exc:
        raise BundleError(f"cannot read --bearer-token-file {path}: {exc.strerror}.") from None
    if not token:
        raise BundleError(f"--bearer-token-file {path} is empty; put the token in it.")
    return token


def token_from_env() -> str | None:
    return os.environ.get("VLLM_OBS_BEARER_TOKEN") or None


def _decode(body: bytes, origin: str) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(
            f"{origin} is not UTF-8 text (bad byte at offset {exc.start}); it is not a Prometheus "
            "exposition or it was corrupted, so save or fetch it again."
        ) from None


def _http_status_message(url: str, status: int) -> str:
    if status in (401, 403):
        return (
            f"{url} answered HTTP {status} (not authorised); pass a token with "
            "--bearer-token-file or VLLM_OBS_BEARER_TOKEN."
        )
    if status == 404:
        return f"{url} answered HTTP 404 (no such page); vLLM serves its metrics at /metrics on the API port."
    if status >= 500:
        return (
            f"{url} answered HTTP {status} (server error); check the vLLM server's log and "
            "that it has finished starting."
        )
    return f"{url} answered HTTP {status}; expected 200 from vLLM's /metrics."


def _timeout_message(url: str, timeout: float) -> str:
    return (
        f"{url} did not answer within {timeout:g} s; check the server is not overloaded or raise --timeout."
    )


def _reason(exc: BaseException) -> str:
    """The innermost cause's text: requests wraps urllib3, which wraps the socket error."""
    while exc.__context__ is not None or (exc.args and isinstance(exc.args[0], BaseException)):
        inner = exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else exc.__context__
        if inner is None or inner is exc:
            break
        exc = inner
    reason = getattr(exc, "reason", None)
    return " ".join(str(reason if reason is not None else exc).split())[:200]


def _connection_message(url: str, exc: requests.exceptions.ConnectionError) -> str:
    text = str(exc)
    if "refused" in text.lower():
        return f"nothing is listening at {url} (connection refused); check that vLLM is running and the host and port."
    if "resolve" in text.lower() or "not known" in text or "NameResolutionError" in text:
        return f"the host in {url} cannot be resolved; check the host name."
    if "timed out" in text.lower():
        return f"{url} did not answer in time; check the server is not overloaded or raise --timeout."
    if "RemoteDisconnected" in text or "BadStatusLine" in text or "ProtocolError" in text:
        return f"{url} did not answer with valid HTTP ({_reason(exc)}); check the URL and port."
    return f"cannot reach {url} ({_reason(exc)}); check the URL and the network."
