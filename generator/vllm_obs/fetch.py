"""Read an exposition from a live /metrics URL or a saved file, with clear failures."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

from .errors import BundleError

# vLLM's /metrics is a few hundred kB at most; refuse anything absurd instead of
# filling memory with a wrong URL's response.
MAX_BYTES = 64 * 1024 * 1024


def read_url(url: str, *, timeout: float, bearer_token: str | None, verify_tls: bool) -> str:
    if not url.startswith(("http://", "https://")):
        raise BundleError(f"--metrics-url {url} is not an http(s) URL; pass e.g. http://HOST:8000/metrics.")
    headers = {"Accept": "text/plain;version=0.0.4", "User-Agent": "vllm-obs"}
    if bearer_token:
        headers["Authorization"] = f"Bearer {bearer_token}"
    context = None
    if url.startswith("https://") and not verify_tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            body = response.read(MAX_BYTES + 1)
            declared = response.headers.get("Content-Length")
            content_type = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        raise BundleError(_http_status_message(url, exc.code)) from None
    except http.client.IncompleteRead as exc:
        raise BundleError(
            f"{url} closed the connection after {len(exc.partial)} bytes, so the exposition is "
            "truncated; fetch it again."
        ) from None
    except http.client.HTTPException as exc:
        raise BundleError(
            f"{url} did not answer with valid HTTP ({type(exc).__name__}); check the URL and port."
        ) from None
    except urllib.error.URLError as exc:
        raise BundleError(_connection_message(url, exc.reason, timeout)) from None
    except TimeoutError:
        raise BundleError(
            f"{url} did not answer within {timeout:g} s; check the server is not overloaded "
            "or raise --timeout."
        ) from None
    except (ConnectionError, OSError) as exc:
        raise BundleError(_connection_message(url, exc, timeout)) from None
    if len(body) > MAX_BYTES:
        raise BundleError(
            f"{url} returned more than {MAX_BYTES // 2**20} MiB; that is not a vLLM /metrics page."
        )
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


def _connection_message(url: str, reason: object, timeout: float) -> str:
    text = str(reason)
    if isinstance(reason, (TimeoutError, socket.timeout)) or "timed out" in text:
        return f"{url} did not answer within {timeout:g} s; check the server is not overloaded or raise --timeout."
    if isinstance(reason, ConnectionRefusedError) or "refused" in text:
        return f"nothing is listening at {url} (connection refused); check that vLLM is running and the host and port."
    if isinstance(reason, socket.gaierror) or "Name or service not known" in text or "not known" in text:
        return f"the host in {url} cannot be resolved; check the host name."
    if isinstance(reason, ssl.SSLError) or "CERTIFICATE" in text.upper():
        return f"the TLS certificate of {url} was refused ({text}); fix the certificate or pass --insecure-skip-verify."
    return f"cannot reach {url} ({text}); check the URL and the network."
