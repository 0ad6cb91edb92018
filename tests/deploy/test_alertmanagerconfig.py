"""kubernetes/generated/alertmanagerconfig.yaml converted back equals the bundle's alertmanager.yml
(receivers, routes, inhibition), for the default config and for one with every receiver type and
team routes; every secret is a Secret key reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_obs.errors import BundleError
from vllm_obs.kubernetes_manifests import ALERTMANAGER_SECRET, alertmanager_config_resource, parse_matcher

from tests.generator.test_alertmanager import EVERY_RECEIVER
from tests.support.bundles import generate

from .stackfiles import REPO

# The Kubernetes objects are composed with pod labels on (tests/generator/test_pod_labels.py).
POD_LABELS = {"prometheus": {"pod_labels": True}}

SNAKE = {
    "groupBy": "group_by",
    "groupWait": "group_wait",
    "groupInterval": "group_interval",
    "repeatInterval": "repeat_interval",
}
SECRET_FIELDS = {
    "routingKey": "routing_key_file",
    "apiKey": "api_key_file",
    "apiURL": "api_url_file",
    "urlSecret": "url_file",
}


def secret_path(ref: dict[str, str]) -> str:
    assert set(ref) == {"name", "key"} and ref["name"] == ALERTMANAGER_SECRET, ref
    return ref["key"]


def matcher_text(m: dict[str, str]) -> str:
    return f"{m['name']}{m['matchType']}{json.dumps(m['value'])}"


def back_to_alertmanager_yml(resource: dict[str, Any]) -> dict[str, Any]:
    """The inverse conversion, written independently of the generator."""

    def route(r: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in r.items():
            if key == "matchers":
                out["matchers"] = [matcher_text(m) for m in value]
            elif key == "routes":
                out["routes"] = [route(child) for child in value]
            else:
                out[SNAKE.get(key, key)] = value
        return out

    smtp: dict[str, Any] = {}

    def config(kind: str, c: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in c.items():
            if key in SECRET_FIELDS:
                out[SECRET_FIELDS[key]] = secret_path(value)
            elif key == "sendResolved":
                out["send_resolved"] = value
            elif key == "details":
                out["details"] = {d["key"]: d["value"] for d in value}
            elif key == "httpConfig":
                assert value["authorization"]["type"] == "Bearer"
                path = secret_path(value["authorization"]["credentials"])
                out["http_config"] = {"authorization": {"credentials_file": path}}
            elif kind == "email_configs" and key in ("smarthost", "from", "authUsername", "authPassword"):
                name = {
                    "smarthost": "smtp_smarthost",
                    "from": "smtp_from",
                    "authUsername": "smtp_auth_username",
                }
                if key == "authPassword":
                    smtp.setdefault("smtp_auth_password_file", secret_path(value))
                else:
                    assert smtp.setdefault(name[key], value) == value  # the same for every receiver
            else:
                out[key] = value
        return out

    receivers = []
    for r in resource["spec"]["receivers"]:
        out: dict[str, Any] = {"name": r["name"]}
        for key, configs in r.items():
            if key != "name":
                kind = "".join("_" + c.lower() if c.isupper() else c for c in key)  # pagerdutyConfigs
                out[kind] = [config(kind, c) for c in configs]
        receivers.append(out)
    inhibit = [
        {
            "source_matchers": [matcher_text(m) for m in rule["sourceMatch"]],
            "target_matchers": [matcher_text(m) for m in rule["targetMatch"]],
            "equal": rule["equal"],
        }
        for rule in resource["spec"]["inhibitRules"]
    ]
    result: dict[str, Any] = {}
    if smtp:
        result["global"] = smtp
    result.update(
        {"route": route(resource["spec"]["route"]), "inhibit_rules": inhibit, "receivers": receivers}
    )
    return result


def with_file_names(value: Any) -> Any:
    """alertmanager.yml with each *_file path reduced to its file name (the Secret key)."""
    if isinstance(value, dict):
        return {
            k: (v.rsplit("/", 1)[-1] if k.endswith("_file") and isinstance(v, str) else with_file_names(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [with_file_names(v) for v in value]
    return value


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # With pod labels on, the compose routing is the one the Kubernetes objects are built from.
    root = tmp_path_factory.mktemp("amconfig")
    return {
        "default": generate(root / "default", config=POD_LABELS),
        "every receiver": generate(root / "every", config={**EVERY_RECEIVER, **POD_LABELS}),
    }


@pytest.mark.parametrize("name", ["default", "every receiver"])
def test_the_alertmanagerconfig_is_the_bundles_routing(bundles, name):
    bundle = bundles[name]
    original = yaml.safe_load((bundle / "alerts" / "alertmanager.yml").read_text())
    resource = yaml.safe_load((bundle / "kubernetes" / "generated" / "alertmanagerconfig.yaml").read_text())
    assert (
        resource["apiVersion"] == "monitoring.coreos.com/v1alpha1"
        and resource["kind"] == "AlertmanagerConfig"
    )
    assert back_to_alertmanager_yml(resource) == with_file_names(original)


def test_the_committed_alertmanagerconfig_is_the_committed_routing_with_pod_labels(bundles):
    """The same receivers, routes and inhibitions; the groups and inhibitions also keep the pod
    and its namespace."""
    with_pods = yaml.safe_load((bundles["default"] / "alerts" / "alertmanager.yml").read_text())
    resource = yaml.safe_load((REPO / "kubernetes" / "generated" / "alertmanagerconfig.yaml").read_text())
    assert back_to_alertmanager_yml(resource) == with_file_names(with_pods)
    original = yaml.safe_load((REPO / "alerts" / "alertmanager.yml").read_text())
    # Otherwise the compose routing, whose page groups already name the namespace.
    assert without_pod_labels(with_pods) == without_pod_labels(original)
    assert with_pods != original


def without_pod_labels(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_pod_labels(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_pod_labels(v) for v in value if v not in ("namespace", "pod")]
    return value


def test_secrets_are_references_never_values(bundles):
    text = (bundles["every receiver"] / "kubernetes" / "generated" / "alertmanagerconfig.yaml").read_text()
    resource = yaml.safe_load(text)
    refs = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if set(value) == {"name", "key"}:
                refs.append(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(resource)
    keys = {r["key"] for r in refs}
    assert keys == {"opsgenie-key", "relay-token", "smtp-password", "search-pd", "search-slack", "llama"}
    assert {r["name"] for r in refs} == {ALERTMANAGER_SECRET}
    assert "_file" not in text and "/run/secrets" not in text


def test_a_webhook_url_from_a_file_becomes_a_url_secret(tmp_path):
    config = {"alertmanager": {**EVERY_RECEIVER["alertmanager"], "webhook_url_file": True}}
    bundle = generate(tmp_path / "b", config=config)
    routing = yaml.safe_load((bundle / "alerts" / "alertmanager.yml").read_text())
    resource = yaml.safe_load(alertmanager_config_resource(routing, []))
    hooks = [c for r in resource["spec"]["receivers"] for c in r.get("webhookConfigs", [])]
    secret = [h for h in hooks if "urlSecret" in h]
    assert secret and all("url" not in h and "httpConfig" not in h for h in secret)
    assert secret[0]["urlSecret"] == {"name": ALERTMANAGER_SECRET, "key": "relay-token"}


def test_a_routing_field_without_a_conversion_stops_generation():
    """A new alertmanager.yml feature must be converted, never silently dropped."""
    am = yaml.safe_load((REPO / "alerts" / "alertmanager.yml").read_text())
    am["route"]["routes"][0]["mute_time_intervals"] = ["nights"]
    with pytest.raises(ValueError, match="mute_time_intervals"):
        alertmanager_config_resource(am, [])
    am = yaml.safe_load((REPO / "alerts" / "alertmanager.yml").read_text())
    am["time_intervals"] = []
    with pytest.raises(ValueError, match="time_intervals"):
        alertmanager_config_resource(am, [])


@pytest.mark.parametrize(
    "text, expected",
    [
        ('severity="critical"', {"name": "severity", "value": "critical", "matchType": "="}),
        ('model_name =~ "llama.*"', {"name": "model_name", "value": "llama.*", "matchType": "=~"}),
        ("team!=search", {"name": "team", "value": "search", "matchType": "!="}),
        ('path!~"a\\\\.b"', {"name": "path", "value": "a\\.b", "matchType": "!~"}),
    ],
)
def test_matchers(text, expected):
    assert parse_matcher(text) == expected


@pytest.mark.parametrize("text", ["severity", '{severity="critical"}', '"x"="y"', 'a="unterminated\\"'])
def test_a_matcher_that_cannot_be_read_is_one_sentence(text):
    with pytest.raises(BundleError) as caught:
        parse_matcher(text)
    message = caught.value.message
    assert repr(text) in message and message.endswith(".") and "\n" not in message


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: r["spec"]["route"]["routes"][1].pop("continue"),
        lambda r: r["spec"]["route"]["routes"][3]["matchers"][0].__setitem__("matchType", "!="),
        lambda r: r["spec"]["inhibitRules"].pop(),
        lambda r: r["spec"]["inhibitRules"][0]["equal"].append("job"),
        lambda r: r["spec"]["receivers"][0]["pagerdutyConfigs"][0]["routingKey"].__setitem__("key", "other"),
        lambda r: r["spec"]["route"].__setitem__("groupWait", "1m"),
    ],
    ids=["continue", "match type", "inhibit rule", "equal", "secret key", "group_wait"],
)
def test_the_comparison_notices_a_changed_route(bundles, mutate):
    bundle = bundles["default"]
    original = yaml.safe_load((bundle / "alerts" / "alertmanager.yml").read_text())
    resource = yaml.safe_load((bundle / "kubernetes" / "generated" / "alertmanagerconfig.yaml").read_text())
    mutate(resource)
    assert back_to_alertmanager_yml(resource) != with_file_names(original)
