"""The autoscaling objects: the KEDA ScaledObject against KEDA's CRD schema, the HPA and adapter
ConfigMap with kubernetes-validate (strict), their queries in promtool on series labelled as in
Kubernetes, two namespaces sharing pod names. Mutated copies and namespace-less queries must fail."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from vllm_obs import layout
from vllm_obs.autoscaling import ADAPTER_CONFIG_MAP, autoscaling_files
from vllm_obs.config import BundleConfig, build
from vllm_obs.errors import BundleError

from tests.support.monitoring import binary

from .stackfiles import KUBERNETES, REPO, SCHEMAS
from .test_schemas import k8s_errors

# The releases tests/deploy/test_schemas.py validates every built-in object for.
KUBERNETES_VERSIONS = ("1.35", "1.36", "1.37")
KEDA_SCHEMA = SCHEMAS / "scaledobject_v1alpha1.json"
AUTOSCALING = REPO / layout.AUTOSCALING_DIR
PATHS = (layout.KEDA_SCALED_OBJECT, layout.PROMETHEUS_ADAPTER_RULES, layout.HORIZONTAL_POD_AUTOSCALER)


def config(**autoscaling: Any) -> BundleConfig:
    return build(BundleConfig, {"autoscaling": autoscaling} if autoscaling else {}, "")


def objects(cfg: BundleConfig) -> dict[str, dict[str, Any]]:
    files = autoscaling_files(cfg, ["Source: test."])
    assert sorted(files) == sorted(PATHS)
    return {path: yaml.safe_load(text) for path, text in files.items()}


def scaled_object(cfg: BundleConfig) -> dict[str, Any]:
    return objects(cfg)[layout.KEDA_SCALED_OBJECT]


def hpa(cfg: BundleConfig) -> dict[str, Any]:
    return objects(cfg)[layout.HORIZONTAL_POD_AUTOSCALER]


def adapter_rules(cfg: BundleConfig) -> list[dict[str, Any]]:
    config_map = objects(cfg)[layout.PROMETHEUS_ADAPTER_RULES]
    return yaml.safe_load(config_map["data"]["config.yaml"])["rules"]


DEFAULT = config()
VARIANT = config(
    deployment="vllm-llama",
    namespace="llm",
    model_name="meta-llama/Llama-3.1-8B-Instruct",
    signals=["kv_cache"],
    min_replicas=2,
    max_replicas=10,
    kv_usage_per_replica=0.7,
    polling_interval="30s",
    cooldown_period="2m",
    scale_down_window="30m",
)


# -- schemas ---------------------------------------------------------------------------


def keda_errors(doc: dict[str, Any]) -> list[str]:
    schema = json.loads(KEDA_SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def validate(doc: dict[str, Any]) -> list[str]:
    """A generated object's errors against the schema of its kind."""
    if (doc["apiVersion"], doc["kind"]) == ("keda.sh/v1alpha1", "ScaledObject"):
        return keda_errors(doc)
    built_in = {("autoscaling/v2", "HorizontalPodAutoscaler"), ("v1", "ConfigMap")}
    assert (doc["apiVersion"], doc["kind"]) in built_in
    return [f"{version}: {e}" for version in KUBERNETES_VERSIONS for e in k8s_errors(doc, version)]


def test_the_keda_schema_is_the_copy_its_readme_names():
    assert KEDA_SCHEMA.stat().st_size == 17072
    readme = (SCHEMAS / "README.md").read_text()
    digest = hashlib.sha256(KEDA_SCHEMA.read_bytes()).hexdigest()
    assert f"{digest}  scaledobject_v1alpha1.json" in readme
    jsonschema.Draft7Validator.check_schema(json.loads(KEDA_SCHEMA.read_text()))


@pytest.mark.parametrize("cfg", [DEFAULT, VARIANT], ids=["default", "variant"])
@pytest.mark.parametrize("path", PATHS)
def test_every_object_follows_its_schema(cfg, path):
    assert validate(objects(cfg)[path]) == []


@pytest.mark.parametrize(
    "mutate, expected",
    [
        # A misspelt field: the CRD schema sets additionalProperties false.
        (lambda d: d["spec"].__setitem__("pollingIntervall", 15), "pollingIntervall"),
        (lambda d: d["spec"]["triggers"][0].__setitem__("metricTyp", "AverageValue"), "metricTyp"),
        # Trigger metadata are strings: an unquoted threshold is refused.
        (
            lambda d: d["spec"]["triggers"][0]["metadata"].__setitem__("threshold", 4),
            "4 is not of type 'string'",
        ),
        (
            lambda d: d["spec"]["fallback"].__setitem__("behavior", "holdReplicas"),
            "'holdReplicas' is not one of",
        ),
        (lambda d: d["spec"].__setitem__("minReplicaCount", "1"), "'1' is not of type 'integer'"),
        (
            lambda d: d["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"][
                "scaleDown"
            ].__setitem__("stabilizationWindowSeconds", 7200),
            "7200 is greater than the maximum of 3600",
        ),
        (lambda d: d["spec"]["scaleTargetRef"].pop("name"), "'name' is a required property"),
    ],
)
def test_the_keda_schema_rejects_a_mutated_scaled_object(mutate, expected):
    doc = copy.deepcopy(scaled_object(DEFAULT))
    mutate(doc)
    errors = keda_errors(doc)
    assert any(expected in e for e in errors), errors


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["spec"]["metrics"][0]["pods"]["target"].__setitem__("averageValu", "4"), "averageValu"),
        (lambda d: d["spec"].__setitem__("minReplicas", "1"), "'1' is not of type 'integer'"),
        (
            lambda d: d["spec"]["behavior"]["scaleDown"].__setitem__("stabilisationWindowSeconds", 600),
            "stabilisation",
        ),
    ],
)
def test_kubernetes_validate_rejects_a_mutated_hpa(mutate, expected):
    doc = copy.deepcopy(hpa(DEFAULT))
    mutate(doc)
    for version in KUBERNETES_VERSIONS:
        errors = k8s_errors(doc, version)
        assert any(expected in e for e in errors), (version, errors)


def test_kubernetes_validate_rejects_a_mutated_config_map():
    doc = copy.deepcopy(objects(DEFAULT)[layout.PROMETHEUS_ADAPTER_RULES])
    doc["data"]["config.yaml"] = {"rules": []}  # data values are strings
    for version in KUBERNETES_VERSIONS:
        assert k8s_errors(doc, version), version


def test_the_adapter_config_has_only_fields_the_adapter_reads():
    """The adapter's config has no published schema; its rule fields are those of
    kubernetes-sigs/prometheus-adapter docs/config.md (a typo would be ignored silently)."""
    for rule in adapter_rules(DEFAULT):
        assert set(rule) <= {"seriesQuery", "seriesFilters", "resources", "name", "metricsQuery"}
        assert set(rule["resources"]) <= {"overrides", "template"}
        assert set(rule["name"]) <= {"matches", "as"}
        # The adapter's metricsQuery template fields; the promtool cases below render these three.
        fields = {part.split(">>")[0] for part in rule["metricsQuery"].split("<<")[1:]}
        assert fields == {".Series", ".LabelMatchers", ".GroupBy"}


def validated_autoscaling_files() -> set[str]:
    """The committed files of kubernetes/generated/autoscaling/ (once the bundle writes them),
    relative to kubernetes/ as tests/deploy/test_schemas.py names manifest files: every one is
    validated by test_the_committed_autoscaling_files_validate below."""
    return {p.relative_to(KUBERNETES).as_posix() for p in AUTOSCALING.glob("*.yaml")}


def test_the_committed_autoscaling_files_validate():
    """The default bundle's copies in this checkout: each one of the layout's, each object valid.
    (tests/generator/test_committed_bundle.py checks they are what generation writes.)"""
    for path in sorted(AUTOSCALING.glob("*.yaml")):
        rel = path.relative_to(REPO).as_posix()
        assert rel in PATHS, rel
        for doc in yaml.safe_load_all(path.read_text()):
            assert validate(doc) == [], rel


# -- what the kubernetes/ manifests and the kustomization say ---------------------------


def test_the_defaults_name_the_deployment_and_model_of_kubernetes_vllm_yaml():
    docs = list(yaml.safe_load_all((KUBERNETES / "vllm.yaml").read_text()))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    env = {e["name"]: e.get("value") for e in container["env"]}
    a = DEFAULT.autoscaling
    assert deployment["metadata"]["name"] == a.deployment
    assert "--served-model-name=$(VLLM_SERVED_MODEL_NAME)" in container["args"]
    assert env["VLLM_SERVED_MODEL_NAME"] == a.model_name
    # The manifests set no namespace: kubectl apply -k uses the context's, by default "default".
    assert "namespace" not in deployment["metadata"] and a.namespace == "default"
    for doc in (scaled_object(DEFAULT), hpa(DEFAULT)):
        target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}
        assert doc["spec"]["scaleTargetRef"] == target
        assert "namespace" not in doc["metadata"]


def test_neither_autoscaler_is_applied_by_default():
    """One Deployment, one autoscaler: the user picks one (the kustomization lists them commented)."""
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    assert not [r for r in kustomization["resources"] if "autoscaling" in r]
    text = (KUBERNETES / "kustomization.yaml").read_text()
    for path in (layout.KEDA_SCALED_OBJECT, layout.HORIZONTAL_POD_AUTOSCALER):
        assert f"# - {path.removeprefix('kubernetes/')}" in text


def test_the_files_say_they_are_generated_and_that_one_autoscaler_is_picked():
    for path, text in autoscaling_files(DEFAULT, ["Source: test."]).items():
        assert text.startswith("# Generated by vllm-obs"), path
        assert "never both" in text, path


# -- the queries, run by promtool --------------------------------------------------------

WAITING = "job_instance_model:vllm_requests_waiting:sum"
KV = "job_instance_model:vllm_kv_cache_usage:max"
MODEL = "qwen2.5-0.5b"
# (namespace, pod, job, model_name, waiting, KV-cache usage): the recorded series as the
# Kubernetes rules label them. Pod names repeat across namespaces, as a Deployment's can.
REPLICAS = [
    ("default", "vllm-7c9d8f6b5-x2k4p", "vllm", MODEL, 6, 0.75),
    ("default", "vllm-7c9d8f6b5-m9q7z", "vllm", MODEL, 3, 0.5),
    # The same pod serves a LoRA adapter under a second model name (same engines: same KV usage).
    ("default", "vllm-7c9d8f6b5-m9q7z", "vllm", "qwen-sql-lora", 2, 0.5),
    ("default", "vllm-7c9d8f6b5-b5n8r", "vllm", MODEL, 0, 0.25),
    # Another Deployment of the same model in the namespace (a canary): not this Deployment's.
    ("default", "vllm-canary-6f5d4c3b2-h7j6k", "vllm", MODEL, 50, 1.0),
    # Another model served by another Deployment.
    ("default", "vllm-llama-5b4c3d2e1-t6y5u", "vllm", "llama", 20, 0.875),
    # Another scrape job (another bundle's vLLM) with this Deployment's pod names.
    ("default", "vllm-7c9d8f6b5-x2k4p", "vllm-staging", MODEL, 30, 0.875),
    # Another namespace: a pod of the same name and one more, busy.
    ("team-b", "vllm-7c9d8f6b5-x2k4p", "vllm", MODEL, 40, 1.0),
    ("team-b", "vllm-7c9d8f6b5-q1w2e", "vllm", MODEL, 30, 0.875),
]


def input_series() -> list[dict[str, str]]:
    out = []
    for i, (namespace, pod, job, model, waiting, kv) in enumerate(REPLICAS):
        labels = f'job="{job}", instance="10.{i}.0.1:8000", namespace="{namespace}", pod="{pod}", '
        labels += f'model_name="{model}"'
        out.append({"series": f"{WAITING}{{{labels}}}", "values": f"{waiting}+0x10"})
        out.append({"series": f"{KV}{{{labels}}}", "values": f"{kv}+0x10"})
    # The same series as the compose bundle's rules record them: no namespace, no pod.
    plain = f'job="vllm", instance="vllm:8000", model_name="{MODEL}"'
    out.append({"series": f"{WAITING}{{{plain}}}", "values": "100+0x10"})
    out.append({"series": f"{KV}{{{plain}}}", "values": "1+0x10"})
    return out


def promtool_cases(
    cases: list[tuple[str, list[tuple[str, float]]]], tmp_path: Path
) -> subprocess.CompletedProcess:
    """Run (expression, [(labels, value)]) cases at 5m on the input series."""
    doc = {
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series(),
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "5m",
                        "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
                    }
                    for expr, samples in cases
                ],
            }
        ],
    }
    path = tmp_path / "autoscaling.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run([binary("promtool"), "test", "rules", str(path)], capture_output=True, text=True)


def keda_queries(cfg: BundleConfig) -> dict[str, str]:
    return {t["name"]: t["metadata"]["query"] for t in scaled_object(cfg)["spec"]["triggers"]}


def render_metrics_query(rule: dict[str, Any], namespace: str, pods: list[str]) -> str:
    """The rule's metricsQuery as prometheus-adapter renders it for pods/<metric> of these pods in
    this namespace (pkg/naming/metrics_query.go, Build): namespace matcher, then pod (=~ a|b, or =
    for one), quoted as Go's %q; GroupBy is the pod label, Series the seriesQuery's name."""
    pod = f"pod=~{json.dumps('|'.join(pods))}" if len(pods) > 1 else f"pod={json.dumps(pods[0])}"
    matchers = ",".join([f"namespace={json.dumps(namespace)}", pod])
    series = rule["name"]["matches"].removeprefix("^").removesuffix("$")
    return (
        rule["metricsQuery"]
        .replace("<<.Series>>", series)
        .replace("<<.LabelMatchers>>", matchers)
        .replace("<<.GroupBy>>", "pod")
    )


DEPLOYMENT_PODS = ["vllm-7c9d8f6b5-x2k4p", "vllm-7c9d8f6b5-m9q7z", "vllm-7c9d8f6b5-b5n8r"]


@pytest.mark.prometheus
def test_keda_queries_sum_this_deployments_replicas_of_the_model_in_its_namespace(tmp_path):
    queries = keda_queries(DEFAULT)
    assert sorted(queries) == ["kv-cache-usage", "requests-waiting"]
    # 6 + 3 + 0 waiting and 0.75 + 0.5 + 0.25 KV usage: never the LoRA model's 2, the canary's,
    # the other model's, the other job's, team-b's namesake pod or the series without a pod.
    done = promtool_cases(
        [(queries["requests-waiting"], [("{}", 9)]), (queries["kv-cache-usage"], [("{}", 1.5)])], tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # What the HPA KEDA creates then wants (AverageValue: ceil(value / threshold)): 3 replicas
    # for the queue (9 / 4), 2 for the KV cache (1.5 / 0.8); the larger wins.
    triggers = scaled_object(DEFAULT)["spec"]["triggers"]
    thresholds = {t["name"]: float(t["metadata"]["threshold"]) for t in triggers}
    assert math.ceil(9 / thresholds["requests-waiting"]) == 3
    assert math.ceil(1.5 / thresholds["kv-cache-usage"]) == 2


@pytest.mark.prometheus
def test_keda_queries_follow_the_namespace_and_model_knobs(tmp_path):
    team_b = config(namespace="team-b")
    queries = keda_queries(team_b)
    done = promtool_cases(
        [(queries["requests-waiting"], [("{}", 70)]), (queries["kv-cache-usage"], [("{}", 1.875)])], tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    other = keda_queries(config(deployment="vllm-llama", model_name="llama"))
    done = promtool_cases([(other["requests-waiting"], [("{}", 20)])], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.prometheus
def test_a_keda_query_without_its_namespace_counts_the_other_namespace(tmp_path):
    """The cases can tell: the waiting query stripped of its namespace matcher adds team-b's
    pods (one of them named like one of ours) and fails the case of the real query."""
    query = keda_queries(DEFAULT)["requests-waiting"]
    assert ', namespace="default"' in query
    done = promtool_cases([(query.replace(', namespace="default"', ""), [("{}", 9)])], tmp_path)
    assert done.returncode != 0
    assert "got: {} 7.9E+01" in done.stdout + done.stderr  # 9 plus team-b's 40 and 30


@pytest.mark.prometheus
def test_adapter_rules_serve_each_pod_its_own_value_in_its_own_namespace(tmp_path):
    rules = {rule["name"]["as"]: rule for rule in adapter_rules(DEFAULT)}
    assert sorted(rules) == ["vllm_kv_cache_usage", "vllm_requests_waiting"]
    waiting, kv = rules["vllm_requests_waiting"], rules["vllm_kv_cache_usage"]
    pod = lambda name: f'{{pod="{name}"}}'  # noqa: E731
    cases = [
        # The HPA asks for the Deployment's pods in its own namespace. A pod's series of every
        # model it serves fold into one value: waiting summed (3 + 2 LoRA), KV usage the max.
        (
            render_metrics_query(waiting, "default", DEPLOYMENT_PODS),
            [
                (pod("vllm-7c9d8f6b5-b5n8r"), 0),
                (pod("vllm-7c9d8f6b5-m9q7z"), 5),
                (pod("vllm-7c9d8f6b5-x2k4p"), 6),
            ],
        ),
        (
            render_metrics_query(kv, "default", DEPLOYMENT_PODS),
            [
                (pod("vllm-7c9d8f6b5-b5n8r"), 0.25),
                (pod("vllm-7c9d8f6b5-m9q7z"), 0.5),
                (pod("vllm-7c9d8f6b5-x2k4p"), 0.75),
            ],
        ),
        # One pod: the adapter matches it with =; team-b's pod of that name and the other job's
        # series are not added to it.
        (
            render_metrics_query(waiting, "default", ["vllm-7c9d8f6b5-x2k4p"]),
            [(pod("vllm-7c9d8f6b5-x2k4p"), 6)],
        ),
        # The same rule answers team-b's HPA with team-b's pods only.
        (
            render_metrics_query(waiting, "team-b", ["vllm-7c9d8f6b5-x2k4p", "vllm-7c9d8f6b5-q1w2e"]),
            [(pod("vllm-7c9d8f6b5-q1w2e"), 30), (pod("vllm-7c9d8f6b5-x2k4p"), 40)],
        ),
        (
            render_metrics_query(kv, "team-b", ["vllm-7c9d8f6b5-x2k4p", "vllm-7c9d8f6b5-q1w2e"]),
            [(pod("vllm-7c9d8f6b5-q1w2e"), 0.875), (pod("vllm-7c9d8f6b5-x2k4p"), 1.0)],
        ),
        # Discovery (seriesQuery, sent to /api/v1/series): the job's series that carry a
        # namespace and a pod, not the other job's nor the ones without a pod.
        (f"count({waiting['seriesQuery']})", [("{}", 8)]),
        (f"count({kv['seriesQuery']})", [("{}", 8)]),
    ]
    done = promtool_cases(cases, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_adapter_names_match_the_recorded_series_and_the_hpa_asks_for_them():
    rules = adapter_rules(DEFAULT)
    for rule, series in zip(rules, (WAITING, KV), strict=True):
        assert re.fullmatch(rule["name"]["matches"], series)
        assert rule["seriesQuery"].startswith(series + "{")
        overrides = {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
        assert rule["resources"]["overrides"] == overrides
    metrics = [m["pods"]["metric"]["name"] for m in hpa(DEFAULT)["spec"]["metrics"]]
    assert metrics == [rule["name"]["as"] for rule in rules]
    assert objects(DEFAULT)[layout.PROMETHEUS_ADAPTER_RULES]["metadata"]["name"] == ADAPTER_CONFIG_MAP


# -- knobs -----------------------------------------------------------------------------


def test_the_defaults_are_the_documented_ones():
    spec = scaled_object(DEFAULT)["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 4)
    assert (spec["pollingInterval"], spec["cooldownPeriod"]) == (15, 300)
    assert [t["metadata"]["threshold"] for t in spec["triggers"]] == ["4", "0.8"]
    assert {t["metricType"] for t in spec["triggers"]} == {"AverageValue"}
    servers = {t["metadata"]["serverAddress"] for t in spec["triggers"]}
    assert servers == {"http://prometheus-k8s.monitoring.svc:9090"}
    assert {t["metadata"]["ignoreNullValues"] for t in spec["triggers"]} == {"false"}
    assert spec["fallback"] == {"failureThreshold": 3, "replicas": 1, "behavior": "currentReplicasIfHigher"}
    policies = [{"type": "Pods", "value": 1, "periodSeconds": 300}]
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 600, "policies": policies}}
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == behavior
    h = hpa(DEFAULT)["spec"]
    assert (h["minReplicas"], h["maxReplicas"]) == (1, 4)
    assert [m["pods"]["target"] for m in h["metrics"]] == [
        {"type": "AverageValue", "averageValue": "4"},
        {"type": "AverageValue", "averageValue": "0.8"},
    ]
    assert h["behavior"] == behavior


def test_knobs_change_the_objects():
    spec = scaled_object(VARIANT)["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["fallback"]["replicas"]) == (2, 10, 2)
    assert (spec["pollingInterval"], spec["cooldownPeriod"]) == (30, 120)
    assert spec["scaleTargetRef"]["name"] == "vllm-llama"
    (trigger,) = spec["triggers"]  # signals: [kv_cache]
    assert trigger["name"] == "kv-cache-usage" and trigger["metadata"]["threshold"] == "0.7"
    query = trigger["metadata"]["query"]
    assert 'namespace="llm"' in query and 'model_name="meta-llama/Llama-3.1-8B-Instruct"' in query
    assert 'pod=~"vllm-llama-[a-z0-9]+-[a-z0-9]+"' in query
    policies = [{"type": "Pods", "value": 1, "periodSeconds": 120}]
    scale_down = {"stabilizationWindowSeconds": 1800, "policies": policies}
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"] == scale_down
    h = hpa(VARIANT)
    assert h["metadata"]["name"] == "vllm-llama" and h["spec"]["scaleTargetRef"]["name"] == "vllm-llama"
    assert (h["spec"]["minReplicas"], h["spec"]["maxReplicas"]) == (2, 10)
    assert h["spec"]["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "vllm_kv_cache_usage"},
                "target": {"type": "AverageValue", "averageValue": "0.7"},
            },
        }
    ]
    assert h["spec"]["behavior"]["scaleDown"] == scale_down
    assert [r["name"]["as"] for r in adapter_rules(VARIANT)] == ["vllm_kv_cache_usage"]
    # The queue threshold, the server and the scrape job.
    other = config(waiting_per_replica=8, prometheus_url="http://prometheus-operated.monitoring.svc:9090")
    (waiting, _) = scaled_object(other)["spec"]["triggers"]
    assert waiting["metadata"]["threshold"] == "8"
    assert waiting["metadata"]["serverAddress"] == "http://prometheus-operated.monitoring.svc:9090"
    assert hpa(other)["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "8"
    job = build(BundleConfig, {"prometheus": {"vllm_job": "llm/vllm"}}, "")
    assert 'job="llm/vllm"' in keda_queries(job)["requests-waiting"]
    for rule in adapter_rules(job):
        assert 'job="llm/vllm"' in rule["seriesQuery"] and 'job="llm/vllm"}' in rule["metricsQuery"]


@pytest.mark.parametrize(
    "knobs, phrase",
    [
        ({"min_replicas": 0}, "'autoscaling.min_replicas' must be at least 1"),
        ({"min_replicas": 1.5}, "'autoscaling.min_replicas' must be a whole number"),
        ({"min_replicas": 5, "max_replicas": 4}, "'autoscaling.max_replicas' must not be below"),
        ({"signals": ["cpu"]}, "'autoscaling.signals' must list queue, kv_cache or both"),
        ({"signals": []}, "'autoscaling.signals' must list"),
        ({"waiting_per_replica": 0}, "'autoscaling.waiting_per_replica' must be above 0"),
        ({"cooldown_period": "45m"}, "'autoscaling.cooldown_period' must not exceed 30m"),
        ({"cooldown_period": "five minutes"}, "'autoscaling.cooldown_period' must be a duration"),
        ({"scale_down_window": "2h"}, "'autoscaling.scale_down_window' must not exceed 1h"),
        ({"polling_interval": "500ms"}, "'autoscaling.polling_interval' must be whole seconds"),
        ({"deployment": "vLLM"}, "'autoscaling.deployment' must be a Kubernetes object name"),
        ({"namespace": "team.b"}, "'autoscaling.namespace' must be a Kubernetes object name"),
        ({"prometheus_url": "prometheus:9090"}, "'autoscaling.prometheus_url' must be the http(s) URL"),
    ],
)
def test_bad_knobs_are_named(knobs, phrase):
    with pytest.raises(BundleError) as err:
        autoscaling_files(config(**knobs), [])
    assert phrase in err.value.message


@pytest.mark.parametrize(
    "knobs, phrase",
    [
        ({"kv_usage_per_replica": 1.5}, "fraction between 0 and 1"),
        ({"scale_down_window": "10 minutes"}, "Prometheus duration"),
        ({"replicas": 3}, "unknown config key 'autoscaling.replicas'"),
    ],
)
def test_the_config_file_refuses_bad_autoscaling_values(knobs, phrase):
    with pytest.raises(BundleError) as err:
        config(**knobs)
    assert phrase in err.value.message
