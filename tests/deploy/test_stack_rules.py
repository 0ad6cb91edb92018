"""The stack is safe to leave running: each rule of tests/deploy/rules.py holds for both
compose files (the GPU stack, and the CPU override merged over it) and for the Kubernetes
manifests, and each rule reports a mutated copy that breaks it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from stack.make_secrets import GENERATED
from tests.support.bundles import generate

from . import rules
from .stackfiles import BASE, CPU, REPO, deep_copy, k8s_documents, stacks, variables

STACKS = stacks()
TEXTS = {
    "docker-compose.yml": BASE.read_text(),
    "docker-compose.yml + cpu": BASE.read_text() + CPU.read_text(),
}
PROMETHEUS = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())
K8S = k8s_documents("vllm.yaml", "monitors.yaml")
K8S_SERVICE_MONITORS = k8s_documents("vllm.yaml", "servicemonitors.yaml")
# Slowest measured start of the CPU test model on this machine, loaded (README: 20-30 s;
# 55 s seen with other tests running). A real model loads longer: see the manifest's comment.
MEASURED_LOAD_SECONDS = 60

COMPOSE_RULES: dict[str, Callable[[dict[str, Any], str], list[str]]] = {
    "published ports": lambda doc, text: rules.published_ports(doc),
    "literal secrets": rules.literal_secrets,
    "secrets as files": lambda doc, text: rules.secrets_as_files(doc),
    "bounded disk": lambda doc, text: rules.bounded_disk(doc),
    "healthchecks": lambda doc, text: rules.healthchecks(doc),
    "start order": lambda doc, text: rules.start_order(doc),
    "scrape targets": lambda doc, text: rules.scrape_targets(doc, PROMETHEUS),
}


@pytest.mark.parametrize("stack", sorted(STACKS))
@pytest.mark.parametrize("rule", sorted(COMPOSE_RULES))
def test_compose_follows_the_rule(stack, rule):
    assert COMPOSE_RULES[rule](STACKS[stack], TEXTS[stack]) == []


@pytest.fixture(scope="module")
def gpu_prometheus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """prometheus.yml as generated for a GPU host (`gpu.enabled`): it also scrapes dcgm-exporter."""
    bundle = generate(tmp_path_factory.mktemp("gpu") / "bundle", config={"gpu": {"enabled": True}})
    return yaml.safe_load((bundle / "prometheus" / "prometheus.yml").read_text())


def test_a_gpu_bundle_scrapes_services_of_the_gpu_profile(gpu_prometheus):
    jobs = {job["job_name"] for job in gpu_prometheus["scrape_configs"]}
    assert {"vllm", "vllm-log-exporter", "vllm-probe", "dcgm-exporter"} <= jobs
    assert rules.scrape_targets(STACKS["docker-compose.yml"], gpu_prometheus) == []
    # Without the service (the CPU stack has no GPU to watch) the same check reports it.
    cpu = deep_copy(STACKS["docker-compose.yml"])
    del cpu["services"]["dcgm-exporter"]
    assert rules.scrape_targets(cpu, gpu_prometheus) == ["dcgm-exporter:9400: no service named dcgm-exporter"]


def _set(path: list[Any], value: Any) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(path: list[Any]) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


def _append(path: list[Any], value: Any) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        target = doc
        for key in path:
            target = target[key]
        target.append(value)

    return mutate


S = "services"
# (rule, mutation, extra text appended to the file, a fragment of the expected report)
COMPOSE_MUTATIONS = {
    "port on every interface": (
        "published ports",
        _set([S, "grafana", "ports"], ["3000:3000"]),
        "",
        "not bound",
    ),
    "port on a fixed address": (
        "published ports",
        _set([S, "prometheus", "ports"], ["127.0.0.1:9090:9090"]),
        "",
        "does not follow VLLM_OBS_BIND_ADDRESS",
    ),
    "host network": ("published ports", _set([S, "vllm", "network_mode"], "host"), "", "network_mode host"),
    "grafana password literal": (
        "literal secrets",
        _set([S, "grafana", "environment", "GF_SECURITY_ADMIN_PASSWORD"], "admin"),
        "",
        "GF_SECURITY_ADMIN_PASSWORD carries a value",
    ),
    "password fallback": (
        "literal secrets",
        lambda doc: None,
        "\n# GF_SECURITY_ADMIN_PASSWORD: ${GRAFANA_ADMIN_PASSWORD:-admin}\n",
        "gives a secret a default",
    ),
    "api key on the command line": (
        "literal secrets",
        _append([S, "vllm", "command"], "--api-key=abc"),
        "",
        "passes --api-key on the command line",
    ),
    "hf token with a value": (
        "literal secrets",
        _set([S, "vllm", "environment", "HF_TOKEN"], "hf_abcdef"),
        "",
        "HF_TOKEN carries a value",
    ),
    "secret read but not mounted": (
        "secrets as files",
        _set([S, "vllm-probe", "secrets"], []),
        "",
        "does not mount the secret",
    ),
    "grafana password from the environment": (
        "secrets as files",
        _delete([S, "grafana", "environment", "GF_SECURITY_ADMIN_PASSWORD__FILE"]),
        "",
        "admin password does not come from a secret file",
    ),
    "secret file outside secrets/": (
        "secrets as files",
        _set(["secrets", "vllm-api-key", "file"], "./vllm-api-key"),
        "",
        "not a file under ./secrets/",
    ),
    "probe reads another key": (
        "secrets as files",
        lambda doc: doc[S]["vllm-probe"].__setitem__(
            "command",
            [c.replace("vllm-api-key", "other-key") for c in doc[S]["vllm-probe"]["command"]],
        ),
        "",
        "does not mount the secret",
    ),
    "no size retention": (
        "bounded disk",
        lambda doc: doc[S]["prometheus"]["command"].remove(
            next(c for c in doc[S]["prometheus"]["command"] if c.startswith("--storage.tsdb.retention.size"))
        ),
        "",
        "retention.size is missing",
    ),
    "no log rotation": (
        "bounded disk",
        lambda doc: doc[S]["vllm"]["entrypoint"].remove("--backups=5"),
        "",
        "--backups is missing",
    ),
    "console log without a limit": (
        "bounded disk",
        _delete([S, "grafana", "logging"]),
        "",
        "grafana: Docker keeps its console log without a size limit",
    ),
    "exporter follows another file": (
        "bounded disk",
        _set([S, "vllm-log-exporter", "command"], ["--log-file=/var/log/vllm/other.log"]),
        "",
        "the exporter follows /var/log/vllm/other.log",
    ),
    "no healthcheck": (
        "healthchecks",
        _delete([S, "alertmanager", "healthcheck"]),
        "",
        "alertmanager: no healthcheck",
    ),
    "healthcheck on the wrong path": (
        "healthchecks",
        lambda doc: doc[S]["vllm"]["healthcheck"].__setitem__(
            "test", [t.replace("/health", "/health/ready") for t in doc[S]["vllm"]["healthcheck"]["test"]]
        ),
        "",
        "vllm: the healthcheck does not ask /health",
    ),
    "unknown service": (
        "healthchecks",
        _set([S, "extra"], {"image": "busybox"}),
        "",
        "extra: no known health endpoint",
    ),
    "grafana starts before prometheus": (
        "start order",
        _set([S, "grafana", "depends_on"], {"prometheus": {"condition": "service_started"}}),
        "",
        "grafana does not wait for prometheus",
    ),
    "exporter gated on vLLM health": (
        "start order",
        _set([S, "vllm-log-exporter", "depends_on"], {"vllm": {"condition": "service_healthy"}}),
        "",
        "could not report a failed start",
    ),
    "healthy on a service without healthcheck": (
        "start order",
        lambda doc: (doc[S]["prometheus"].pop("healthcheck"), None)[1],
        "",
        "which has no healthcheck",
    ),
    "scraped port not listened on": (
        "scrape targets",
        _set([S, "vllm-log-exporter", "ports"], ["127.0.0.1:9400:9500"]),
        "",
        "vllm-log-exporter does not listen on 9400",
    ),
    "scraped service missing": (
        "scrape targets",
        _delete([S, "alertmanager"]),
        "",
        "no service named alertmanager",
    ),
    "probe target label differs from the scrape target": (
        "scrape targets",
        _set([S, "vllm-probe", "command"], ["--target=http://127.0.0.1:8000", "--listen=0.0.0.0:9401"]),
        "",
        "is not a vLLM scrape target",
    ),
}


@pytest.mark.parametrize("name", sorted(COMPOSE_MUTATIONS))
def test_a_compose_mutation_breaks_its_rule(name):
    rule, mutate, extra_text, expected = COMPOSE_MUTATIONS[name]
    doc = deep_copy(STACKS["docker-compose.yml"])
    mutate(doc)
    problems = COMPOSE_RULES[rule](doc, TEXTS["docker-compose.yml"] + extra_text)
    assert any(expected in p for p in problems), problems


def test_one_variable_opens_the_ports_and_no_other_does():
    for stack, doc in STACKS.items():
        ports = [str(p) for s in doc["services"].values() for p in s.get("ports", [])]
        assert ports, stack
        for port in ports:
            assert [v.name for v in variables(port)] == [rules.BIND_VARIABLE], (stack, port)


def test_secret_files_are_never_committed(tmp_path):
    """git itself says every file `make secrets` writes, and Alertmanager's, is ignored."""
    paths = [
        "secrets/grafana-admin-password",
        "secrets/vllm-api-key",
        "secrets/alertmanager/pagerduty-routing-key",
        "secrets/anything-else",
    ]
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths], cwd=REPO, capture_output=True, text=True
    )
    assert sorted(ignored.stdout.split()) == sorted(paths), ignored.stderr
    kept = subprocess.run(
        ["git", "check-ignore", "--no-index", "secrets/README.md", "secrets/.gitignore"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert kept.stdout == "" and kept.returncode == 1


def test_compose_secret_files_are_the_ones_make_secrets_writes():
    declared = {PurePosixPath(s["file"]).name for s in STACKS["docker-compose.yml"]["secrets"].values()}
    assert declared == set(GENERATED)


# -- Kubernetes -------------------------------------------------------------------------------

K8S_RULES: dict[str, Callable[[list[dict[str, Any]]], list[str]]] = {
    "literal secrets": rules.k8s_literal_secrets,
    "secrets as files": rules.k8s_secret_files,
    "vLLM probes": lambda docs: rules.k8s_vllm_probes(docs, MEASURED_LOAD_SECONDS),
    "not exposed": rules.k8s_not_exposed,
    "monitor ports": rules.k8s_monitor_ports,
}


@pytest.mark.parametrize("variant", ["monitors", "servicemonitors"])
@pytest.mark.parametrize("rule", sorted(K8S_RULES))
def test_kubernetes_follows_the_rule(rule, variant):
    docs = K8S if variant == "monitors" else K8S_SERVICE_MONITORS
    assert K8S_RULES[rule](docs) == []


def _container(docs: list[dict], name: str) -> dict:
    spec = docs[0]["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] + spec["initContainers"] if c["name"] == name)


K8S_MUTATIONS = {
    "literal API key": (
        "literal secrets",
        lambda docs: _container(docs, "vllm")["env"].append({"name": "VLLM_API_KEY", "value": "abc"}),
        "env VLLM_API_KEY has a literal value",
    ),
    "Secret with data": (
        "literal secrets",
        lambda docs: docs.append(
            {"kind": "Secret", "metadata": {"name": "x"}, "stringData": {"api-key": "abc"}}
        ),
        "Secret x carries values",
    ),
    "key file on an emptyDir": (
        "secrets as files",
        lambda docs: docs[0]["spec"]["template"]["spec"]["volumes"].__setitem__(
            next(
                i
                for i, v in enumerate(docs[0]["spec"]["template"]["spec"]["volumes"])
                if v["name"] == "vllm-api-key"
            ),
            {"name": "vllm-api-key", "emptyDir": {}},
        ),
        "is not on a Secret volume",
    ),
    "readiness on /health/ready": (
        "vLLM probes",
        lambda docs: _container(docs, "vllm")["readinessProbe"]["httpGet"].__setitem__(
            "path", "/health/ready"
        ),
        "readinessProbe asks /health/ready, not /ready",
    ),
    "readiness on vLLM's /health": (
        "vLLM probes",
        lambda docs: _container(docs, "vllm")["readinessProbe"].__setitem__(
            "httpGet", {"path": "/health", "port": "http"}
        ),
        "readinessProbe asks /health, not /ready",
    ),
    "readiness on vLLM's port": (
        "vLLM probes",
        lambda docs: _container(docs, "vllm")["readinessProbe"]["httpGet"].__setitem__("port", 8000),
        "readinessProbe asks port 8000, not the canary probe's (9401)",
    ),
    "startup budget too short": (
        "vLLM probes",
        lambda docs: _container(docs, "vllm")["startupProbe"].__setitem__("failureThreshold", 8),
        "startupProbe budget 80s",
    ),
    "LoadBalancer": (
        "not exposed",
        lambda docs: docs[1]["spec"].__setitem__("type", "LoadBalancer"),
        "exposed beyond the cluster",
    ),
    "monitor on a missing port": (
        "monitor ports",
        lambda docs: docs[-1]["spec"]["podMetricsEndpoints"][0].__setitem__("port", "metrics"),
        "no port 'metrics'",
    ),
}


@pytest.mark.parametrize("name", sorted(K8S_MUTATIONS))
def test_a_kubernetes_mutation_breaks_its_rule(name):
    rule, mutate, expected = K8S_MUTATIONS[name]
    docs = deep_copy(K8S)
    mutate(docs)
    problems = K8S_RULES[rule](docs)
    assert any(expected in p for p in problems), problems
