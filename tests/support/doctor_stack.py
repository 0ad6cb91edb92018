"""A monitoring stack on loopback for the `vllm-obs doctor` tests: real Prometheus, Alertmanager, log
exporter and canary probe, and a webhook receiver. The vLLM is the real server or a stand-in serving
a saved real 0.32 exposition, for cases that break the monitoring rather than vLLM."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
import yaml
from vllm_obs.cli import main as vllm_obs
from vllm_obs.doctor import output
from vllm_obs.doctor.findings import Finding, Report

from .loopback import LoopbackServer, Page
from .monitoring import Alertmanager, Prometheus, binary
from .vllm_server import free_port, http_get

FIXTURES = Path(__file__).parent.parent / "fixtures"
TRAFFIC_EXPOSITION = FIXTURES / "metrics" / "vllm-0.32.0-cpu-traffic.prom"
NORMAL_LOG = FIXTURES / "logs" / "vllm-0.32.0-cpu-normal.log"
READY_LINE = "Application startup complete."


# -- loopback HTTP ---------------------------------------------------------------------


def exposition_server(path: Path = TRAFFIC_EXPOSITION) -> LoopbackServer:
    """A stand-in for vLLM's /metrics: a saved exposition of a real vLLM 0.32.0."""
    return LoopbackServer({"/metrics": Page(200, path.read_text())})


# -- exporter and probe processes ------------------------------------------------------


def _wait_http(url: str, process: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {process.returncode}:\n{log.read_text()[-2000:]}")
        with contextlib.suppress(OSError):
            if http_get(url, timeout=2)[0] == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready in {timeout}s:\n{log.read_text()[-2000:]}")


@contextlib.contextmanager
def _process(command: list[str], url: str, log: Path) -> Iterator[None]:
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        _wait_http(url, process, log)
        yield
    finally:
        process.terminate()
        process.wait(timeout=15)


@contextlib.contextmanager
def log_exporter(log: Path, workdir: Path) -> Iterator[str]:
    """The real vllm-log-exporter following `log`; yields its host:port."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm_log_exporter.cli",
        "--log-file",
        str(log),
        "--listen",
        f"127.0.0.1:{port}",
    ]
    with _process(command, f"http://127.0.0.1:{port}/metrics", workdir / f"exporter-{port}.out"):
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def canary_probe(target_url: str, workdir: Path) -> Iterator[str]:
    """The real vllm-probe sending target_url a one-token request every 2 s; yields its host:port."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm_probe",
        "--target",
        target_url,
        "--listen",
        f"127.0.0.1:{port}",
        "--interval",
        "2",
        "--timeout",
        "1.5",
    ]
    with _process(command, f"http://127.0.0.1:{port}/metrics", workdir / f"probe-{port}.out"):
        yield f"127.0.0.1:{port}"


def ready_log(path: Path, source: Path = NORMAL_LOG) -> Path:
    """A real vLLM 0.32 log cut just after `Application startup complete.`: a server that is up."""
    lines = source.read_text("utf-8").splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if READY_LINE in line)
    path.write_text("".join(lines[: end + 1]), "utf-8")
    return path


# -- Prometheus with web options --------------------------------------------------------


@dataclass
class WebPrometheus(Prometheus):
    """Prometheus with web flags: a route prefix (as behind a proxy) and a web config (auth, TLS)."""

    prefix: str = ""
    web_config: Path | None = None
    auth: tuple[str, str] | None = None
    scheme: str = "http"
    ca_file: str | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}{self.prefix}"

    def command(self) -> list[str]:
        # Alerts are resent every resend-delay (1m by default); the first send can fall before the
        # Alertmanager is discovered, so resend quickly for the tests to see them arrive.
        out = super().command() + ["--web.enable-lifecycle", "--rules.alert.resend-delay=1s"]
        if self.prefix:
            out.append(f"--web.route-prefix={self.prefix}")
        if self.web_config:
            out.append(f"--web.config.file={self.web_config}")
        return out

    def __enter__(self) -> WebPrometheus:
        log = self.log.open("wb")
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(requests.RequestException):
                if self.get("/-/ready").status_code == 200:
                    return self
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready:\n{self.log.read_text()[-3000:]}")

    def get(self, path: str, **params: str) -> requests.Response:
        return requests.get(
            self.url + path, params=params, auth=self.auth, verify=self.ca_file or True, timeout=10
        )

    def api(self, path: str, **params: str):
        response = self.get(path, **params)
        assert response.status_code == 200, response.text[:500]
        return response.json()["data"]


def write_prometheus_config(bundle: Path, edit: Callable[[dict], None] | None = None) -> Path:
    """The bundle's prometheus.yml, edited, next to it (rule_files stay relative to it)."""
    config = yaml.safe_load((bundle / "prometheus" / "prometheus.yml").read_text())
    if edit:
        edit(config)
    path = bundle / "prometheus" / "prometheus-running.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def settle(prom: WebPrometheus, bundle: Path, timeout: float = 60, scrapes: bool = True) -> None:
    """Wait until every target was scraped once (unless not scrapes) and every rule group of the
    bundle evaluated once. Prometheus finds its targets a few seconds after it is ready: every
    scrape pool of its config must be there first, or "every target" is none."""
    groups = set()
    for path in (bundle / "alerts").glob("*.rules.yml"):
        groups |= {g["name"] for g in yaml.safe_load(path.read_text())["groups"]}
    pools = {
        job["job_name"]
        for job in yaml.safe_load(prom.config.read_text()).get("scrape_configs") or []
        if any(static.get("targets") for static in job.get("static_configs") or [])
    }
    deadline = time.monotonic() + timeout
    settled_at = None
    while time.monotonic() < deadline:
        targets = prom.api("/api/v1/targets")["activeTargets"]
        loaded = prom.api("/api/v1/rules")["groups"]
        found = pools <= {t["scrapePool"] for t in targets}
        scraped = found and (not scrapes or all(t["health"] != "unknown" for t in targets))
        evaluated = {g["name"] for g in loaded if not g["lastEvaluation"].startswith("0001")}
        if scraped and (groups & {g["name"] for g in loaded}) <= evaluated:
            # A scrape that timed out (a loaded machine, two test workers) leaves a target
            # down and the doctor, rightly, calls its series unknown: give every target a
            # moment to come up; a stack that keeps one down on purpose still settles.
            settled_at = settled_at or time.monotonic()
            up = all(t["health"] == "up" for t in targets)
            if not scrapes or up or time.monotonic() - settled_at > 15:
                return
        time.sleep(0.3)
    raise AssertionError("the stack did not settle: targets unscraped or rule groups not evaluated")


# -- the bundle and the doctor -----------------------------------------------------------


def stack_config(
    vllm: list[str],
    *,
    exporters: list[tuple[str, str]] = (),  # (exporter host:port, the vLLM instance it watches)
    probes: list[str] = (),
    alertmanager: str | None = None,
    webhook: str | None = None,
    interval: str = "1s",
    prometheus: str | None = None,  # host:port Prometheus scrapes itself at
) -> dict:
    config: dict = {
        "prometheus": {
            "vllm_targets": list(vllm),
            "log_exporters": [{"target": t, "vllm_instance": i} for t, i in exporters],
            "probes": list(probes),
            "alertmanagers": [alertmanager] if alertmanager else [],
            "prometheus_targets": [prometheus] if prometheus else [],
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        }
    }
    if webhook:
        config["alertmanager"] = {
            severity: {"type": "webhook", "url": f"{webhook}/{severity}"}
            for severity in ("critical", "warning", "watchdog")
        }
    return config


def generate(out: Path, config: dict, *source: str) -> Path:
    path = out.parent / f"{out.name}-config.yml"
    path.write_text(yaml.safe_dump(config))
    code = vllm_obs(["generate", "--out", str(out), "--config", str(path), *source])
    assert code == 0, f"vllm-obs generate exited {code}"
    return out


@dataclass
class DoctorRun:
    code: int
    out: str
    err: str
    report: dict = field(default_factory=dict)

    def lines(self, status: str) -> list[str]:
        tag = {"fail": "FAIL", "warn": "WARN", "ok": "ok", "info": "info", "skip": "skip"}[status]
        return [line.strip() for line in self.out.splitlines() if line.strip().startswith(tag + " ")]

    def checks(self, status: str | None = None, family: str | None = None) -> list[dict]:
        return [
            c
            for c in self.report.get("checks", [])
            if (status is None or c["status"] == status) and (family is None or c["family"] == family)
        ]

    def text_of(self, status: str, family: str | None = None) -> str:
        return "\n".join(
            f"{c['subject']}: {c['message']} {c.get('action', '')}" for c in self.checks(status, family)
        )


def doctor(*args: str) -> DoctorRun:
    """Run `vllm-obs doctor` in this process; with --json the report is parsed too."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = vllm_obs(["doctor", *args])
    run = DoctorRun(code, out.getvalue(), err.getvalue())
    if "--json" in args and code in (0, 1):
        run.report = json.loads(run.out)
    return run


def doctor_both(*args: str) -> DoctorRun:
    """One run with --json, and the text report rendered from the same findings."""
    run = doctor(*args, "--json")
    if run.report:
        data = run.report
        report = Report(data["prometheus"], data["alertmanager"], data["bundle"], data["bundle_source"])
        for check in data["checks"]:
            report.add(
                Finding(
                    check["family"],
                    check["status"],
                    check["subject"],
                    check["message"],
                    check.get("action", ""),
                    check.get("items", []),
                )
            )
        run.out = output.text(report)
    return run


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30, every: float = 0.3) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Stack:
    bundle: Path
    prom: WebPrometheus
    am: Alertmanager | None
    vllm: str  # the vLLM target's host:port
    exporter: str | None
    webhook: LoopbackServer | None
    vllm_server: LoopbackServer | None = None  # the stand-in, whose pages a test may change

    def doctor(self, *args: str, alertmanager: bool = True) -> DoctorRun:
        """The doctor's report once every scrape of the stack's servers answered while it looked: one
        scrape timing out on a loaded machine leaves its job unchecked, which no test is about, so the
        doctor looks again (a few times, a second apart) until every target is up."""
        base = ["--prometheus", self.prom.url, "--bundle", str(self.bundle)]
        if self.am and alertmanager:
            base += ["--alertmanager", self.am.url]
        return doctor_settled(*base, *args)


# The jobs a stand-in stack runs: always serving, so a down target there is a scrape that timed out.
# Its Prometheus and Alertmanager scrape themselves too (the pipeline's own jobs), on the same 1 s clock.
STAND_IN_JOBS = (
    "vLLM (job vllm)",
    "log exporter (job vllm-log-exporter)",
    "canary probe (job vllm-probe)",
    "Prometheus itself (job prometheus)",
    "Alertmanager itself (job alertmanager)",
)


def doctor_settled(*args: str) -> DoctorRun:
    """doctor_both, looked again (a few times, a second apart) while its own report shows a
    stack server's scrape failed: see Stack.doctor."""
    for _ in range(5):
        run = doctor_both(*args)
        if not _a_scrape_failed(run):
            break
        time.sleep(1)
    return run


# The same failed scrape seen by a later check of the same run (the checks query one after
# another, so the Targets check may have seen the target up a moment before).
STAND_IN_DOWN = tuple(
    f"no target of job {job} is up"
    for job in ("vllm", "vllm-log-exporter", "vllm-probe", "prometheus", "alertmanager")
)


def _a_scrape_failed(run: DoctorRun) -> bool:
    return any(
        (
            c["family"] == "targets"
            and c["subject"] in STAND_IN_JOBS
            and c["status"] in ("fail", "warn")
            and ("down" in c["message"] or "not scraped yet" in c["message"])
        )
        or any(down in c["message"] for down in STAND_IN_DOWN)
        or "failed while the doctor looked" in c["message"]
        for c in run.report.get("checks", [])
    )


@contextlib.contextmanager
def stand_in_stack(
    tmp: Path,
    *,
    source: tuple[str, ...] = ("--metrics-file", str(TRAFFIC_EXPOSITION)),
    exporter_instance: str | None = None,
    alertmanager: bool = True,
    alerting: bool = True,
    prometheus_edit: Callable[[dict], None] | None = None,
    bundle_edit: Callable[[Path], None] | None = None,
    log: Path | None = None,
    wait_for_scrapes: bool = True,
    wait_for_watchdog: bool = True,
    **web: object,
) -> Iterator[Stack]:
    """A stand-in vLLM, the real log exporter on a real log, real Prometheus and Alertmanager with a
    generated bundle. exporter_instance: its series' instance; alerting=False: no Alertmanager;
    prometheus_edit/bundle_edit: change the running config/the bundle on disk; web: WebPrometheus options."""
    with contextlib.ExitStack() as stack:
        vllm = stack.enter_context(exposition_server())
        webhook = stack.enter_context(LoopbackServer())
        exporter = stack.enter_context(log_exporter(log or ready_log(tmp / "vllm.log"), tmp))
        am_port, prom_port = free_port(), free_port()
        config = stack_config(
            [vllm.address],
            exporters=[(exporter, exporter_instance or vllm.address)],
            alertmanager=f"127.0.0.1:{am_port}" if alerting else None,
            webhook=webhook.url,
            prometheus=f"127.0.0.1:{prom_port}",
        )
        bundle = generate(tmp / "bundle", config, *source)
        if bundle_edit:
            bundle_edit(bundle)
        am = None
        if alertmanager:
            am = stack.enter_context(Alertmanager(bundle / "alerts" / "alertmanager.yml", tmp, port=am_port))
        prom_config = write_prometheus_config(bundle, prometheus_edit)
        prom = stack.enter_context(WebPrometheus(prom_config, tmp, port=prom_port, **web))  # type: ignore[arg-type]
        settle(prom, bundle, scrapes=wait_for_scrapes)
        if wait_for_watchdog and am and alerting:
            wait_until(
                lambda: any(a["labels"].get("alertname") == "WatchdogVllmObs" for a in am.alerts()),
                "the Watchdog alert to reach Alertmanager",
            )
        elif wait_for_watchdog:
            wait_until(
                lambda: bool(
                    prom.api("/api/v1/query", query='ALERTS{alertname="WatchdogVllmObs"}')["result"]
                ),
                "the Watchdog alert to fire in Prometheus",
            )
        yield Stack(bundle, prom, am, vllm.address, exporter, webhook, vllm)


class TokenProxy:
    """A reverse proxy on loopback that wants a bearer token and serves its upstream under a
    path prefix, as operators put Prometheus or Alertmanager behind one (oauth2-proxy, an
    ingress): https://host/prometheus/api/v1/... -> upstream/api/v1/...
    """

    def __init__(self, upstream: str, token: str, prefix: str = "/prometheus") -> None:
        self.upstream, self.token, self.prefix = upstream.rstrip("/"), token, prefix
        self.port = free_port()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if not self.path.startswith(proxy.prefix + "/"):
                    return self._send(404, b"not found\n", "text/plain")
                if self.headers.get("Authorization") != f"Bearer {proxy.token}":
                    return self._send(401, b'{"error": "unauthorised"}', "application/json")
                upstream = requests.get(proxy.upstream + self.path[len(proxy.prefix) :], timeout=30)
                self._send(upstream.status_code, upstream.content, upstream.headers.get("Content-Type", ""))

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def __enter__(self) -> TokenProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def self_signed(workdir: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (it is its own CA) and its key, made with openssl."""
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        [
            binary("openssl"),
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key
