"""The rules a stack safe to leave running follows, as functions that list what breaks them. Each
takes a parsed compose or Kubernetes document, so tests run it on the real files (nothing reported)
and on mutated copies (the broken rule reported): a rule that cannot fail is no rule."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from .stackfiles import container_port, host_ip, interpolate, variables

BIND_VARIABLE = "VLLM_OBS_BIND_ADDRESS"
LOOPBACK = "127.0.0.1"
# What the README has the user set (the CPU override requires an image); nothing else.
USER_ENV = {"VLLM_IMAGE": "example.org/vllm-cpu:latest"}

# Names that hold a credential. *_FILE names hold a path to one, which is what we want.
SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|TOKEN|SECRET|API_?KEY|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY)", re.I)
SECRET_FLAG = re.compile(r"^--?[a-z0-9-]*(password|passwd|token|secret|api-key|apikey|credential)$", re.I)
FILE_SUFFIX = re.compile(r"(_FILE|__FILE|-file)$", re.I)

# What each service's healthcheck must ask, inside its container.
HEALTH_ENDPOINTS = {
    "vllm": "/health",
    "vllm-log-exporter": "/metrics",
    "vllm-probe": "/metrics",
    "dcgm-exporter": "/health",
    "prometheus": "/-/ready",
    "alertmanager": "/-/ready",
    "grafana": "/api/health",
}
# Services that need another one healthy before they are of use.
NEEDS_HEALTHY = {"grafana": {"prometheus"}}
# The sidecars report a vLLM that fails to start or dies: they must never wait for its health.
REPORTS_ON_VLLM = {"vllm-log-exporter", "vllm-probe"}
SECRET_MOUNT = "/run/secrets/"


def _services(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    return doc.get("services", {})


def _words(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


def _flag(words: list[str], name: str) -> str | None:
    """Value of --name=VALUE or --name VALUE."""
    for i, word in enumerate(words):
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
        if word == name and i + 1 < len(words):
            return words[i + 1]
    return None


def _environment(service: Mapping[str, Any]) -> dict[str, Any]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return {item.split("=", 1)[0]: (item.split("=", 1)[1] if "=" in item else None) for item in env}
    return dict(env)


# -- compose --------------------------------------------------------------------------------


def published_ports(doc: Mapping[str, Any]) -> list[str]:
    """Every published port on 127.0.0.1 by default, and one variable opens them all."""
    problems = []
    if not any(_services(doc)[s].get("ports") for s in _services(doc)):
        return ["no service publishes a port: the stack cannot be reached at all"]
    closed = interpolate(doc, USER_ENV)
    opened = interpolate(doc, {**USER_ENV, BIND_VARIABLE: "0.0.0.0"})
    for name, service in _services(closed).items():
        if service.get("network_mode") == "host":
            problems.append(f"{name}: network_mode host publishes every port on every interface")
        for spec, spec_open in zip(
            service.get("ports", []), _services(opened)[name].get("ports", []), strict=True
        ):
            if host_ip(spec) != LOOPBACK:
                problems.append(f"{name}: port {spec!r} is not bound to {LOOPBACK} by default")
            elif host_ip(spec_open) != "0.0.0.0":
                problems.append(f"{name}: port {spec!r} does not follow {BIND_VARIABLE}")
    return problems


def literal_secrets(doc: Mapping[str, Any], text: str) -> list[str]:
    """No password, token or key in the file: not literal, not as a ${VAR:-default} fallback."""
    problems = []
    for variable in variables(text):
        if SECRET_NAME.search(variable.name) and variable.op in (":-", "-"):
            problems.append(f"${{{variable.name}{variable.op}...}} gives a secret a default value")
    for name, service in _services(doc).items():
        for key, value in _environment(service).items():
            if not SECRET_NAME.search(key) or FILE_SUFFIX.search(key):
                continue
            if value not in (None, "") and not _is_passthrough(str(value), key):
                problems.append(f"{name}: environment {key} carries a value; read it from a secret file")
        for field in ("command", "entrypoint"):
            words = _words(service.get(field))
            for word in words:
                flag = word.split("=", 1)[0]
                if SECRET_FLAG.match(flag) and not FILE_SUFFIX.search(flag):
                    problems.append(f"{name}: {field} passes {flag} on the command line; use a file")
        healthcheck = " ".join(_words((service.get("healthcheck") or {}).get("test")))
        if re.search(r"(Authorization|Bearer|password=)", healthcheck, re.I):
            problems.append(f"{name}: the healthcheck carries a credential")
    return problems


def _is_passthrough(value: str, key: str) -> bool:
    """`KEY: ${KEY}` passes the shell's value through without a default: allowed."""
    refs = variables(value)
    return value.strip().startswith("$") and len(refs) == 1 and refs[0].op is None


def secrets_as_files(doc: Mapping[str, Any]) -> list[str]:
    """Grafana's password and vLLM's key come from secret files that git never tracks."""
    problems = []
    services = _services(doc)
    declared = doc.get("secrets", {})
    for name, secret in declared.items():
        path = str(secret.get("file", ""))
        if not path.startswith("./secrets/"):
            problems.append(f"secret {name} is not a file under ./secrets/ (where make secrets writes)")
    for name, service in services.items():
        mounted = {s if isinstance(s, str) else s["source"] for s in service.get("secrets", [])}
        words = _words(service.get("command")) + _words(service.get("entrypoint"))
        words += [str(v) for v in _environment(service).values() if v is not None]
        for word in words:
            for secret in re.findall(re.escape(SECRET_MOUNT) + r"([A-Za-z0-9._-]+)", word):
                if secret not in mounted:
                    problems.append(f"{name} reads {SECRET_MOUNT}{secret} but does not mount the secret")
                elif secret not in declared:
                    problems.append(f"{name} mounts the undeclared secret {secret}")
    grafana = _environment(services.get("grafana", {}))
    if "GF_SECURITY_ADMIN_PASSWORD" in grafana:
        problems.append("grafana: GF_SECURITY_ADMIN_PASSWORD is set; use GF_SECURITY_ADMIN_PASSWORD__FILE")
    if not str(grafana.get("GF_SECURITY_ADMIN_PASSWORD__FILE", "")).startswith(SECRET_MOUNT):
        problems.append("grafana: the admin password does not come from a secret file")
    for name in ("vllm", "vllm-probe"):
        if name not in services:
            continue
        words = _words(services[name].get("entrypoint")) + _words(services[name].get("command"))
        key_file = _flag(words, "--api-key-file")
        if not key_file or not key_file.startswith(SECRET_MOUNT):
            problems.append(f"{name}: the vLLM API key does not come from a secret file (--api-key-file)")
    keys = {
        _flag(_words(services[n].get("entrypoint")) + _words(services[n].get("command")), "--api-key-file")
        for n in ("vllm", "vllm-probe")
        if n in services
    }
    if len(keys) > 1:
        problems.append(f"vLLM and its probe read different API key files: {sorted(map(str, keys))}")
    return problems


def bounded_disk(doc: Mapping[str, Any]) -> list[str]:
    """Prometheus retention by time and size; vLLM's log rotated by size into a bounded set;
    every container's console log (`docker logs`) rotated too."""
    problems = []
    services = _services(doc)
    command = _words(services["prometheus"].get("command"))
    for flag in ("--storage.tsdb.retention.time", "--storage.tsdb.retention.size"):
        value = _flag(command, flag)
        if not value or not re.fullmatch(r"\d+(ms|s|m|h|d|w|y|B|KB|MB|GB|TB|PB|EB)", value):
            problems.append(f"prometheus: {flag} is missing or not a bounded value")
    for name, service in services.items():
        logging = service.get("logging") or {}
        options = logging.get("options") or {}
        if not (logging.get("driver") in ("json-file", "local") and options.get("max-size")):
            problems.append(f"{name}: Docker keeps its console log without a size limit")
    vllm = _words(services["vllm"].get("entrypoint")) + _words(services["vllm"].get("command"))
    if "tee" in vllm or any("| tee" in w for w in vllm):
        problems.append("vllm: output goes through tee, which never rotates")
    log_file = _flag(vllm, "--log-file")
    for flag in ("--max-bytes", "--backups"):
        value = _flag(vllm, flag)
        if not value or not value.isdigit() or int(value) <= 0:
            problems.append(f"vllm: {flag} is missing: the log it writes is not bounded")
    exporter = _words(services["vllm-log-exporter"].get("command"))
    followed = _flag(exporter, "--log-file") or "/var/log/vllm/vllm.log"  # the image's CMD
    if log_file != followed:
        problems.append(f"the exporter follows {followed}, vLLM writes {log_file}")
    return problems


def healthchecks(doc: Mapping[str, Any]) -> list[str]:
    """Every service with an endpoint checks it, on its own container port."""
    problems = []
    for name, service in _services(doc).items():
        check = service.get("healthcheck") or {}
        test = " ".join(_words(check.get("test")))
        path = HEALTH_ENDPOINTS.get(name)
        if path is None:
            problems.append(f"{name}: no known health endpoint; add it to HEALTH_ENDPOINTS")
            continue
        if not test or check.get("disable") or test.strip() == "NONE":
            problems.append(f"{name}: no healthcheck")
            continue
        ports = {container_port(p) for p in service.get("ports", [])}
        urls = re.findall(r"https?://(?:127\.0\.0\.1|localhost):(\d+)(/[^'\" ]*)", test)
        # bash's /dev/tcp, for images without an HTTP client: the port, then the request line.
        urls += re.findall(r"/dev/tcp/127\.0\.0\.1/(\d+).*?GET (/\S*) HTTP", test)
        if not any(port in ports and url_path == path for port, url_path in urls):
            problems.append(f"{name}: the healthcheck does not ask {path} on its port {sorted(ports)}")
    return problems


def start_order(doc: Mapping[str, Any]) -> list[str]:
    """depends_on with conditions: healthy where a service needs another, never gating the
    sidecars that must report a failing vLLM."""
    problems = []
    services = _services(doc)
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        if isinstance(depends, list):
            problems.append(f"{name}: depends_on without a condition")
            continue
        for target, spec in depends.items():
            condition = spec.get("condition")
            if condition == "service_healthy" and not (services.get(target, {}).get("healthcheck")):
                problems.append(f"{name} waits for {target} to be healthy, which has no healthcheck")
            if name in REPORTS_ON_VLLM and target == "vllm" and condition == "service_healthy":
                problems.append(f"{name} waits for vLLM to be healthy: it could not report a failed start")
        for target in NEEDS_HEALTHY.get(name, ()):
            if (depends.get(target) or {}).get("condition") != "service_healthy":
                problems.append(f"{name} does not wait for {target} to be healthy")
    return problems


def scrape_targets(doc: Mapping[str, Any], prometheus: Mapping[str, Any]) -> list[str]:
    """Every target the generated prometheus.yml names is a service listening on that port."""
    problems = []
    services = _services(doc)
    targets = [
        t
        for job in prometheus["scrape_configs"]
        for sc in job.get("static_configs", [])
        for t in sc["targets"]
    ]
    for am in prometheus.get("alerting", {}).get("alertmanagers", []):
        targets += [t for sc in am.get("static_configs", []) for t in sc["targets"]]
    if not targets:
        return ["prometheus.yml names no target"]
    for target in targets:
        host, _, port = target.rpartition(":")
        if host not in services:
            problems.append(f"{target}: no service named {host}")
        elif port not in _listening_ports(services[host]):
            problems.append(f"{target}: {host} does not listen on {port}")
    probe = services.get("vllm-probe")
    if probe:
        vllm_targets = {
            t
            for job in prometheus["scrape_configs"]
            if job["job_name"] == "vllm"
            for sc in job["static_configs"]
            for t in sc["targets"]
        }
        target = _flag(_words(probe.get("command")), "--target") or ""
        label = re.sub(r"^https?://", "", target).rstrip("/")
        if label not in vllm_targets:
            problems.append(
                f"vllm-probe's target label {label} is not a vLLM scrape target {sorted(vllm_targets)}"
            )
    return problems


def _listening_ports(service: Mapping[str, Any]) -> set[str]:
    ports = {container_port(p) for p in service.get("ports", [])}
    ports |= {str(p).split("/")[0] for p in service.get("expose", [])}
    return ports


# -- Kubernetes -------------------------------------------------------------------------------


def _pod_specs(docs: Iterable[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    return [
        (d["metadata"]["name"], d["spec"]["template"]["spec"])
        for d in docs
        if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet")
    ]


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(spec.get("initContainers", [])) + list(spec.get("containers", []))


def k8s_literal_secrets(docs: list[Mapping[str, Any]]) -> list[str]:
    """Credentials come from Secrets (references), never values in the manifests."""
    problems = []
    for doc in docs:
        if doc.get("kind") == "Secret" and (doc.get("data") or doc.get("stringData")):
            problems.append(f"Secret {doc['metadata']['name']} carries values")
    for owner, spec in _pod_specs(docs):
        for container in _containers(spec):
            for env in container.get("env", []):
                if SECRET_NAME.search(env["name"]) and not FILE_SUFFIX.search(env["name"]) and "value" in env:
                    problems.append(f"{owner}/{container['name']}: env {env['name']} has a literal value")
            words = [str(w) for w in container.get("command", []) + container.get("args", [])]
            for word in words:
                flag = word.split("=", 1)[0]
                if SECRET_FLAG.match(flag) and not FILE_SUFFIX.search(flag):
                    problems.append(f"{owner}/{container['name']}: passes {flag} on the command line")
    return problems


def k8s_secret_files(docs: list[Mapping[str, Any]]) -> list[str]:
    """The API key reaches vLLM and the probe as a file from a Secret volume."""
    problems = []
    for owner, spec in _pod_specs(docs):
        secret_volumes = {v["name"] for v in spec.get("volumes", []) if "secret" in v}
        for container in _containers(spec):
            words = [str(w) for w in container.get("command", []) + container.get("args", [])]
            key_file = _flag(words, "--api-key-file")
            if key_file is None:
                continue
            mounts = [
                m
                for m in container.get("volumeMounts", [])
                if key_file.startswith(m["mountPath"].rstrip("/") + "/") and m["name"] in secret_volumes
            ]
            if not mounts:
                problems.append(f"{owner}/{container['name']}: {key_file} is not on a Secret volume")
        names = {
            c["name"]
            for c in _containers(spec)
            if _flag([str(w) for w in c.get("command", []) + c.get("args", [])], "--api-key-file")
        }
        for needed in ("vllm", "vllm-probe"):
            if needed not in names:
                problems.append(f"{owner}/{needed}: reads no API key file")
    return problems


# Startup and liveness ask vLLM's own /health; readiness asks the canary probe's /ready, because a
# hung engine answers /health 200 while it serves nothing.
VLLM_PROBE_PATHS = {"startupProbe": "/health", "readinessProbe": "/ready", "livenessProbe": "/health"}


def k8s_vllm_probes(docs: list[Mapping[str, Any]], load_seconds: float) -> list[str]:
    """Probes ask the endpoints that tell (readiness: the canary sidecar's port), and the startup
    budget covers the model load + 30 s."""
    problems = []
    for owner, spec in _pod_specs(docs):
        canary_ports = {
            port["containerPort"]
            for c in _containers(spec)
            if c["name"] == "vllm-probe"
            for port in c.get("ports", [])
        }
        for container in spec.get("containers", []):
            if container["name"] != "vllm":
                continue
            for kind, wanted in VLLM_PROBE_PATHS.items():
                probe = container.get(kind)
                if probe is None:
                    problems.append(f"{owner}/vllm: no {kind}")
                    continue
                path = probe.get("httpGet", {}).get("path")
                if path != wanted:
                    problems.append(f"{owner}/vllm: {kind} asks {path}, not {wanted}")
                port = probe.get("httpGet", {}).get("port")
                if kind == "readinessProbe" and port not in canary_ports:
                    problems.append(
                        f"{owner}/vllm: readinessProbe asks port {port}, not the canary probe's "
                        f"({', '.join(map(str, sorted(canary_ports))) or 'no vllm-probe sidecar'})"
                    )
            startup = container.get("startupProbe") or {}
            budget = startup.get("failureThreshold", 3) * startup.get("periodSeconds", 10)
            if budget < load_seconds + 30:
                problems.append(
                    f"{owner}/vllm: startupProbe budget {budget}s is not 30 s above the model load ({load_seconds:g}s)"
                )
    return problems


def k8s_not_exposed(docs: list[Mapping[str, Any]]) -> list[str]:
    """Services stay inside the cluster by default."""
    return [
        f"Service {d['metadata']['name']} is {d['spec'].get('type')}: exposed beyond the cluster"
        for d in docs
        if d.get("kind") == "Service" and d["spec"].get("type", "ClusterIP") != "ClusterIP"
    ]


def k8s_monitor_ports(docs: list[Mapping[str, Any]]) -> list[str]:
    """Every PodMonitor/ServiceMonitor port is a named port of the pods/Service it selects."""
    problems = []
    pod_ports: dict[str, set[str]] = {}
    for doc in docs:
        if doc.get("kind") == "Deployment":
            labels = doc["spec"]["template"]["metadata"]["labels"]
            ports = {
                p["name"] for c in _containers(doc["spec"]["template"]["spec"]) for p in c.get("ports", [])
            }
            pod_ports[labels.get("app.kubernetes.io/name", "")] = ports
    service_ports = {
        d["metadata"]["labels"].get("app.kubernetes.io/name", ""): {p["name"] for p in d["spec"]["ports"]}
        for d in docs
        if d.get("kind") == "Service"
    }
    for doc in docs:
        if doc.get("kind") not in ("PodMonitor", "ServiceMonitor"):
            continue
        selected = doc["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/name", "")
        endpoints = doc["spec"].get("podMetricsEndpoints") or doc["spec"].get("endpoints") or []
        ports = (pod_ports if doc["kind"] == "PodMonitor" else service_ports).get(selected, set())
        for endpoint in endpoints:
            if endpoint.get("port") not in ports:
                problems.append(
                    f"{doc['kind']} {doc['metadata']['name']}: no port {endpoint.get('port')!r} on {selected}"
                )
    return problems


def k8s_jobs(docs: list[Mapping[str, Any]]) -> set[str]:
    """The job label each monitor gives its targets."""
    jobs = set()
    for doc in docs:
        if doc.get("kind") not in ("PodMonitor", "ServiceMonitor"):
            continue
        for endpoint in doc["spec"].get("podMetricsEndpoints") or doc["spec"].get("endpoints") or []:
            jobs |= {
                r["replacement"] for r in endpoint.get("relabelings", []) if r.get("targetLabel") == "job"
            }
    return jobs
