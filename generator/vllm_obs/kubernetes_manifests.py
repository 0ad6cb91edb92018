"""Kubernetes objects for fleets on the Prometheus Operator: the rules as a PrometheusRule,
the dashboards as a ConfigMap for Grafana's dashboard sidecar, the on-call routing as an
AlertmanagerConfig."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from .errors import BundleError
from .yamlfmt import dump


def prometheus_rule(rule_files: dict[str, str], header: list[str]) -> str:
    groups: list[Any] = []
    for text in rule_files.values():
        groups += yaml.safe_load(text)["groups"]
    return dump(
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {
                "name": "vllm-obs",
                "labels": {
                    "app.kubernetes.io/part-of": "vllm-obs",
                    "prometheus": "k8s",
                    "role": "alert-rules",
                },
            },
            "spec": {"groups": groups},
        },
        header,
    )


def dashboards_config_map(dashboards: dict[str, str], header: list[str]) -> str:
    return dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "vllm-obs-dashboards",
                # Picked up by the Grafana dashboard sidecar (kube-prometheus-stack's default label).
                "labels": {"app.kubernetes.io/part-of": "vllm-obs", "grafana_dashboard": "1"},
                "annotations": {"grafana_folder": "vLLM"},
            },
            "data": {name.split("/")[-1]: text for name, text in sorted(dashboards.items())},
        },
        header,
    )


# -- AlertmanagerConfig ----------------------------------------------------------------

ALERTMANAGER_SECRET = "vllm-obs-alertmanager"
"""The Secret whose keys, named after the files of secrets/alertmanager/, hold the keys and URLs."""

_MATCHER = re.compile(r"^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_ROUTE_FIELDS = {
    "receiver": "receiver",
    "group_by": "groupBy",
    "group_wait": "groupWait",
    "group_interval": "groupInterval",
    "repeat_interval": "repeatInterval",
    "continue": "continue",
}


def alertmanager_config_resource(am: dict[str, Any], header: list[str]) -> str:
    """alertmanager.yml's routing as the Prometheus Operator's AlertmanagerConfig. Every `*_file` becomes
    a key of the Secret ALERTMANAGER_SECRET; a field this conversion does not know stops generation,
    so no routing feature is dropped silently.
    """
    global_ = dict(am.get("global", {}))
    _only(am, {"global", "route", "inhibit_rules", "receivers"}, "alertmanager.yml")
    _only(global_, set(_SMTP), "alertmanager.yml's global section")
    spec = {
        "route": _route(am["route"]),
        "inhibitRules": [_inhibit_rule(rule) for rule in am.get("inhibit_rules", [])],
        "receivers": [_receiver(r, global_) for r in am["receivers"]],
    }
    return dump(
        {
            "apiVersion": "monitoring.coreos.com/v1alpha1",
            "kind": "AlertmanagerConfig",
            "metadata": {"name": "vllm-obs", "labels": {"app.kubernetes.io/part-of": "vllm-obs"}},
            "spec": spec,
        },
        [
            *header,
            f"Keys and URLs are read from the Secret {ALERTMANAGER_SECRET}, one key per file of",
            f"secrets/alertmanager/: kubectl create secret generic {ALERTMANAGER_SECRET} --from-file=secrets/alertmanager/",
            "The operator routes through this object only alerts whose namespace label is its own namespace.",
            "Every vLLM alert carries the namespace of its pods, so apply one copy in each namespace that",
            "runs vLLM (each team's alerts reach its own receivers), or one in the Alertmanager's namespace",
            "with alertmanagerConfigMatcherStrategy: {type: OnNamespaceExceptForAlertmanagerNamespace} on",
            "the Alertmanager. Both leave other rules' routing as it is (docs/kubernetes.md).",
        ],
    )


def parse_matcher(text: str) -> dict[str, str]:
    """`name="value"` (or =~, !=, !~; quotes optional) as an AlertmanagerConfig matcher."""
    match = _MATCHER.match(text)
    if not match:
        raise BundleError(
            f'cannot read the Alertmanager matcher {text!r}; write it as name="value" with =, !=, =~ or !~.'
        )
    name, op, value = match.groups()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise BundleError(
                f"the quoted value of the Alertmanager matcher {text!r} is not valid."
            ) from None
    return {"name": name, "value": value, "matchType": op}


def _route(route: dict[str, Any]) -> dict[str, Any]:
    _only(route, {*_ROUTE_FIELDS, "matchers", "routes"}, "a route")
    out: dict[str, Any] = {}
    for key, value in route.items():
        if key == "matchers":
            out["matchers"] = [parse_matcher(m) for m in value]
        elif key == "routes":
            out["routes"] = [_route(child) for child in value]
        else:
            out[_ROUTE_FIELDS[key]] = list(value) if isinstance(value, list) else value
    return out


def _inhibit_rule(rule: dict[str, Any]) -> dict[str, Any]:
    _only(rule, {"source_matchers", "target_matchers", "equal"}, "an inhibit rule")
    return {
        "sourceMatch": [parse_matcher(m) for m in rule["source_matchers"]],
        "targetMatch": [parse_matcher(m) for m in rule["target_matchers"]],
        "equal": list(rule.get("equal", [])),
    }


def _secret(path: str) -> dict[str, str]:
    key = path.rstrip("/").rsplit("/", 1)[-1]
    if not _SECRET_KEY.match(key):
        raise BundleError(
            f"the secret file {path!r} cannot name a Kubernetes Secret key; use a file name of letters, "
            "digits, '-', '_' and '.'."
        )
    return {"name": ALERTMANAGER_SECRET, "key": key}


def _receiver(receiver: dict[str, Any], global_: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": receiver["name"]}
    for kind, configs in receiver.items():
        if kind == "name":
            continue
        convert = _RECEIVERS.get(kind)
        if convert is None:
            raise ValueError(f"no AlertmanagerConfig conversion for receiver field {kind!r}")
        out[_camel(kind)] = [convert(dict(c), global_) for c in configs]
    return out


def _pagerduty(c: dict[str, Any], _global: dict[str, Any]) -> dict[str, Any]:
    out = {"routingKey": _secret(c.pop("routing_key_file")), "sendResolved": c.pop("send_resolved")}
    out["severity"] = c.pop("severity")
    if "description" in c:
        out["description"] = c.pop("description")
    out["details"] = [{"key": k, "value": v} for k, v in c.pop("details", {}).items()]
    return _done(out, c, "pagerduty_configs")


def _opsgenie(c: dict[str, Any], _global: dict[str, Any]) -> dict[str, Any]:
    out = {"apiKey": _secret(c.pop("api_key_file")), "sendResolved": c.pop("send_resolved")}
    for key in ("priority", "description"):
        if key in c:
            out[key] = c.pop(key)
    return _done(out, c, "opsgenie_configs")


def _slack(c: dict[str, Any], _global: dict[str, Any]) -> dict[str, Any]:
    out = {"apiURL": _secret(c.pop("api_url_file")), "sendResolved": c.pop("send_resolved")}
    for key in ("channel", "title", "text"):
        if key in c:
            out[key] = c.pop(key)
    return _done(out, c, "slack_configs")


def _webhook(c: dict[str, Any], _global: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"sendResolved": c.pop("send_resolved")}
    if "url_file" in c:
        out["urlSecret"] = _secret(c.pop("url_file"))
    else:
        out["url"] = c.pop("url")
    if "http_config" in c:
        http = c.pop("http_config")
        credentials = http.pop("authorization").pop("credentials_file")
        _only(http, set(), "a webhook's http_config")
        out["httpConfig"] = {"authorization": {"type": "Bearer", "credentials": _secret(credentials)}}
    return _done(out, c, "webhook_configs")


def _email(c: dict[str, Any], global_: dict[str, Any]) -> dict[str, Any]:
    # AlertmanagerConfig has no global section: the SMTP settings go into each receiver.
    out: dict[str, Any] = {"to": c.pop("to"), "sendResolved": c.pop("send_resolved")}
    for source, target in _SMTP.items():
        if source in global_:
            value = global_[source]
            out[target] = _secret(value) if source.endswith("_file") else value
    return _done(out, c, "email_configs")


_SMTP = {
    "smtp_smarthost": "smarthost",
    "smtp_from": "from",
    "smtp_auth_username": "authUsername",
    "smtp_auth_password_file": "authPassword",
}
_RECEIVERS = {
    "pagerduty_configs": _pagerduty,
    "opsgenie_configs": _opsgenie,
    "slack_configs": _slack,
    "webhook_configs": _webhook,
    "email_configs": _email,
}


def _done(out: dict[str, Any], rest: dict[str, Any], what: str) -> dict[str, Any]:
    _only(rest, set(), f"a receiver's {what}")
    return out


def _only(data: dict[str, Any], known: set[str], what: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"no AlertmanagerConfig conversion for {what} field(s) {unknown}")


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)
