"""The deployment files validate offline against their real schemas (tests/fixtures/schemas/):
compose, Kubernetes objects with strict kubernetes-validate for every supported release, Operator
objects against their CRDs. Each validator also rejects a mutated copy, so none passes vacuously."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from .rules import USER_ENV
from .stackfiles import BASE, CPU, KUBERNETES, SCHEMAS, deep_copy, interpolate, load_compose, plain, stacks

# Upstream supports the three newest minor releases. On 2026-11-30 those are 1.35, 1.36
# and 1.37 (1.38 is not out; 1.34 left support in October 2026), and they are also the
# newest three the installed kubernetes-validate ships schemas for.
KUBERNETES_VERSIONS = ("1.35", "1.36", "1.37")
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule_v1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor_v1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor_v1.json",
    ("monitoring.coreos.com/v1alpha1", "AlertmanagerConfig"): "alertmanagerconfig_v1alpha1.json",
}


def compose_validator() -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / "compose-spec.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def compose_errors(doc: dict[str, Any]) -> list[str]:
    """Every error, with those inside oneOf/anyOf branches (the reason a branch failed)."""
    out, todo = [], list(compose_validator().iter_errors(doc))
    while todo:
        error = todo.pop()
        out.append(f"{'/'.join(map(str, error.absolute_path))}: {error.message}")
        todo += error.context or []
    return out


COMPOSE_DOCS = {
    "docker-compose.yml": plain(load_compose(BASE)),
    "docker-compose.cpu.yml": plain(load_compose(CPU)),
    **{f"{name} (merged)": doc for name, doc in stacks().items()},
}


@pytest.mark.parametrize("name", sorted(COMPOSE_DOCS))
def test_compose_files_follow_the_compose_specification(name):
    doc = COMPOSE_DOCS[name]
    assert compose_errors(doc) == []
    # ... also once compose has put the variables in.
    assert compose_errors(interpolate(doc, USER_ENV)) == []


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["services"]["vllm"].__setitem__("restart_policy", "always"), "restart_policy"),
        (
            lambda d: d["services"]["grafana"]["depends_on"]["prometheus"].__setitem__(
                "condition", "healthy"
            ),
            "'healthy' is not one of",
        ),
        (lambda d: d["services"]["prometheus"]["healthcheck"].__setitem__("intervall", "5s"), "intervall"),
        (lambda d: d.__setitem__("secret", {}), "secret"),
    ],
)
def test_the_compose_schema_rejects_a_mutated_file(mutate, expected):
    doc = deep_copy(COMPOSE_DOCS["docker-compose.yml"])
    mutate(doc)
    errors = compose_errors(doc)
    assert any(expected in e for e in errors), errors


def test_the_chosen_kubernetes_versions_are_shipped_not_approximated():
    """kubernetes-validate silently falls back to an older schema for a release it lacks."""
    shipped = {v.rsplit(".", 1)[0] for v in all_versions()}
    assert set(KUBERNETES_VERSIONS) <= shipped
    newest = sorted(shipped, key=lambda v: tuple(map(int, v.split("."))))[-3:]
    assert list(KUBERNETES_VERSIONS) == newest


def every_kubernetes_object() -> list[tuple[str, dict[str, Any]]]:
    """Every object `kubectl apply -k kubernetes/` would send, and the optional ones."""
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    files = [*kustomization["resources"], "servicemonitors.yaml", "dcgm-exporter-servicemonitor.yaml"]
    out = []
    for name in files:
        for doc in yaml.safe_load_all((KUBERNETES / name).read_text()):
            if doc:
                out.append((f"{name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return out


OBJECTS = dict(every_kubernetes_object())
BUILT_IN = {k: v for k, v in OBJECTS.items() if (v["apiVersion"], v["kind"]) not in CRD_SCHEMAS}
CUSTOM = {k: v for k, v in OBJECTS.items() if (v["apiVersion"], v["kind"]) in CRD_SCHEMAS}


def test_every_kind_is_validated_somewhere():
    assert {v["kind"] for v in BUILT_IN.values()} == {"Deployment", "Service", "ConfigMap"}
    assert {v["kind"] for v in CUSTOM.values()} == {k for _, k in CRD_SCHEMAS}


def k8s_errors(doc: dict[str, Any], version: str) -> list[str]:
    try:
        validated = kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(map(str, exc.path))}: {exc.message}"]
    assert validated == version  # the schema of that very release, not an older one
    return []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_built_in_objects_validate_in_strict_mode(name, version):
    assert k8s_errors(BUILT_IN[name], version) == []


@pytest.mark.parametrize(
    "mutate, expected",
    [
        # A misspelt field: only strict mode catches it.
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0].__setitem__("livenesProbe", {}),
            "livenesProbe",
        ),
        (lambda d: d["spec"]["template"]["spec"].__setitem__("terminationGracePeriodSeconds", "60"), "'60'"),
        (
            lambda d: d["spec"]["template"]["spec"]["initContainers"][1]["ports"][0].__setitem__(
                "containerPort", "log-metrics"
            ),
            "'log-metrics' is not of type 'integer'",
        ),
    ],
)
def test_kubernetes_validate_rejects_a_mutated_deployment(mutate, expected):
    doc = deep_copy(next(v for v in BUILT_IN.values() if v["kind"] == "Deployment"))
    mutate(doc)
    for version in KUBERNETES_VERSIONS:
        errors = k8s_errors(doc, version)
        assert any(expected in e for e in errors), (version, errors)


def crd_errors(doc: dict[str, Any]) -> list[str]:
    schema = json.loads((SCHEMAS / CRD_SCHEMAS[(doc["apiVersion"], doc["kind"])]).read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
    if doc["kind"] == "AlertmanagerConfig":
        # The CRD leaves child routes unchecked (x-kubernetes-preserve-unknown-fields); the
        # operator reads them as routes, so check them against the route schema.
        route = jsonschema.Draft7Validator(schema["properties"]["spec"]["properties"]["route"])
        todo = list(doc["spec"].get("route", {}).get("routes", []))
        while todo:
            child = todo.pop()
            errors += [f"route {child.get('receiver')}: {e.message}" for e in route.iter_errors(child)]
            todo += child.get("routes", [])
    return errors


@pytest.mark.parametrize("name", sorted(CUSTOM))
def test_prometheus_operator_objects_follow_their_crd_schemas(name):
    assert crd_errors(CUSTOM[name]) == []


def _first(kind: str) -> dict[str, Any]:
    return deep_copy(next(v for v in CUSTOM.values() if v["kind"] == kind))


@pytest.mark.parametrize(
    "kind, mutate, expected",
    [
        ("PodMonitor", lambda d: d["spec"].__setitem__("podMetricsEndpoint", []), "podMetricsEndpoint"),
        ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].__setitem__("intervall", "15s"), "intervall"),
        ("PrometheusRule", lambda d: d["spec"]["groups"][0].__setitem__("rule", []), "rule"),
        (
            "AlertmanagerConfig",
            lambda d: d["spec"]["route"]["routes"][0]["matchers"][0].__setitem__("matchType", "=="),
            "'==' is not one of",
        ),
        (
            "AlertmanagerConfig",
            lambda d: d["spec"]["receivers"][0]["pagerdutyConfigs"][0].__setitem__("routingKeyFile", "/x"),
            "routingKeyFile",
        ),
    ],
)
def test_the_crd_schemas_reject_a_mutated_object(kind, mutate, expected):
    doc = _first(kind)
    mutate(doc)
    errors = crd_errors(doc)
    assert any(expected in e for e in errors), errors


def test_every_manifest_file_is_validated():
    from .test_autoscaling import validated_autoscaling_files  # generated/autoscaling/, validated there

    files = {p.relative_to(KUBERNETES).as_posix() for p in KUBERNETES.glob("**/*.yaml")} - {
        "kustomization.yaml"
    }
    validated = {name.split(":", 1)[0] for name in OBJECTS}
    validated |= validated_autoscaling_files()
    assert files == validated
