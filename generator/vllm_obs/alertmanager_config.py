"""alertmanager.yml: severity routes, a dead man's switch, inhibition, optional team routes.
Secrets never appear in the output: Alertmanager reads every key and webhook URL from a file
the stack mounts (`*_file` fields).
"""

from __future__ import annotations

from typing import Any

from .config import AlertmanagerSection, BundleConfig, Receiver
from .errors import BundleError
from .promql import seconds
from .rules.areas.meta import HEARTBEAT, NOTIFICATIONS_FAILING, pager_integrations
from .rules.assembly import InhibitRule
from .vocabulary import Scope, Vocabulary

# Each replica (instance) of a group once, in the order Alertmanager sorts alerts (job, instance);
# `$seen` holds the replicas listed so far, matched with every character but [A-Za-z0-9_-] escaped.
_NEW_REPLICA = (
    '{{ if not (match (printf "(^|,)%s," (reReplaceAll "([^A-Za-z0-9_-])" "\\\\$1" .Labels.instance)) $seen) }}'
)
_SEEN = '{{ $seen = printf "%s%s," $seen .Labels.instance }}'
# The alerts a notification is about: the firing ones, or every one once the group resolved.
_ABOUT = '{{ $about := .Alerts.Firing }}{{ if eq .Status "resolved" }}{{ $about = .Alerts }}{{ end }}'
SLACK_TITLE = (
    '[{{ .Status | toUpper }}{{ if eq .Status "firing" }}:{{ .Alerts.Firing | len }}{{ end }}] '
    # A page's chat copy groups every critical alert of a model: no common alertname, so the first one's.
    "{{ if .CommonLabels.alertname }}{{ .CommonLabels.alertname }}"
    "{{ else }}{{ (index .Alerts 0).Labels.alertname }} and others{{ end }}"
    "{{ with .CommonLabels.model_name }} model {{ . }}{{ end }}"
    + _ABOUT
    + '{{ $seen := "" }}{{ $one := "" }}{{ $n := "" }}{{ range $about }}{{ if .Labels.instance }}'
    + _NEW_REPLICA
    + _SEEN
    + '{{ $one = .Labels.instance }}{{ $n = printf "%sx" $n }}{{ end }}{{ end }}{{ end }}'
    "{{ if eq (len $n) 1 }} on {{ $one }}{{ else if $n }} on {{ len $n }} replicas{{ end }}"
)
SLACK_TEXT = (
    # The group's first summary and links, then each replica once with its description.
    "{{ with index .Alerts 0 }}*{{ .Annotations.summary }}*\n"
    "{{ with .Annotations.runbook_url }}Runbook: {{ . }}\n{{ end }}"
    "{{ with .Annotations.dashboard_url }}Dashboard: {{ . }}\n{{ end }}{{ end }}"
    + _ABOUT
    + '{{ $seen := "" }}{{ range $about }}{{ if .Labels.instance }}'
    + _NEW_REPLICA
    + _SEEN
    + "- {{ .Labels.instance }}: {{ .Annotations.description }}\n{{ end }}"
    "{{ else }}- {{ .Annotations.description }}\n{{ end }}{{ end }}"
)


def _severity_routes(
    pager: str, chat: str, info: str | None, pages: list[str], am: AlertmanagerSection
) -> list[dict[str, Any]]:
    """Pages to the pager and to chat, one group per model (one PagerDuty incident); warnings to chat,
    per model and alert. A page group renotifies the pager after `page_group_interval` (a model's next
    outage is not held back: docs/alerts.md), its chat copy only after `page_chat_interval`."""
    page = {"matchers": ['severity="critical"'], "group_by": pages}
    out: list[dict[str, Any]] = [
        {"receiver": pager, **page, "group_interval": am.page_group_interval, "continue": True},
        {"receiver": chat, **page, "group_interval": am.page_chat_interval},
        {"receiver": chat, "matchers": ['severity="warning"'], "group_wait": am.warning_group_wait},
    ]
    if info is not None:
        out.append({"receiver": info, "matchers": ['severity="info"']})
    return out


def _failing_pager_route(am: AlertmanagerSection, chat: str) -> list[dict[str, Any]]:
    """The alert that the pager's own integration fails goes to chat, never to that pager."""
    pagers = pager_integrations(am)
    if not pagers:
        return []
    matchers = [f'alertname="{NOTIFICATIONS_FAILING}"', _one_of("integration", pagers)]
    return [{"receiver": chat, "matchers": matchers, "continue": False}]


def _page_group_by(labels: list[str], sc: Scope) -> list[str]:
    out = list(labels)
    out += [label for label, _ in sc.partitions if label not in out]
    return out


def inhibition_wait_warnings(cfg: BundleConfig) -> list[str]:
    """Waits no longer than the capacity alerts' lag behind a replica's own alerts (a scrape, then
    two rule groups each at its own phase) let a replica's ticket reach chat before they inhibit it."""
    p = cfg.prometheus
    lag = seconds(p.scrape_interval) + 2 * seconds(p.evaluation_interval)
    waits = {
        "alertmanager.warning_group_wait": cfg.alertmanager.warning_group_wait,
        "alerts.log_event_for": cfg.alerts.log_event_for,
    }
    return [
        f"{key} ({wait}) is not longer than a scrape and two rule evaluations ({lag:g}s): a replica's "
        f"ticket can reach chat before its model's capacity alerts inhibit it; make it longer than {lag:g}s."
        for key, wait in waits.items()
        if seconds(wait) <= lag
    ]


def receiver_name(role: str, receiver: Receiver) -> str:
    return f"{role}-{receiver.type}"


def alertmanager_config(v: Vocabulary, inhibitions: list[InhibitRule]) -> dict[str, Any]:
    """`inhibitions`: what the bundle's alerts declare (rules.assembly)."""
    am = v.cfg.alertmanager
    receivers: dict[str, dict[str, Any]] = {}
    sc = v.targets
    pages = _page_group_by(am.page_group_by, sc)
    summary = page_summary([label for label in pages if label != "model_name"])

    def add(role: str, receiver: Receiver) -> str:
        name = receiver_name(role, receiver)
        receivers.setdefault(name, _receiver(name, receiver, am, summary))
        return name

    critical = add("critical", am.critical)
    warning = add("warning", am.warning)
    info = add("info", am.info)
    watchdog = add("watchdog", am.watchdog)

    routes: list[dict[str, Any]] = [
        {
            # The heartbeat must flow all the time and never reach a human.
            "receiver": watchdog,
            "matchers": [f'alertname="{HEARTBEAT}"'],
            "group_by": ["alertname"],
            "group_wait": "0s",
            "group_interval": am.watchdog_repeat_interval,
            "repeat_interval": am.watchdog_repeat_interval,
        }
    ]
    routes += _failing_pager_route(am, warning)
    for i, team in enumerate(am.teams):
        if not team.matchers:
            raise BundleError(
                f"config key 'alertmanager.teams[{i}].matchers' must name at least one matcher."
            )
        team_critical = add(f"team{i}-critical", team.critical) if team.critical.type != "none" else critical
        team_warning = add(f"team{i}-warning", team.warning) if team.warning.type != "none" else warning
        routes.append(
            {
                "receiver": team_warning,
                "matchers": list(team.matchers),
                "routes": _severity_routes(team_critical, team_warning, None, pages, am),
            }
        )
    routes += _severity_routes(critical, warning, info, pages, am)
    out: dict[str, Any] = {}
    smtp = _smtp(am)
    if smtp:
        out["global"] = smtp
    group_by = list(am.group_by)
    # The same instance name in two clusters (or namespaces) is two incidents, never one notification.
    group_by[:0] = [label for label, _ in sc.partitions if label not in group_by]
    if sc.pod and sc.replica in group_by and sc.pod not in group_by:
        # A notification about one server names its pod (the instance is the pod's IP).
        group_by.insert(group_by.index(sc.replica) + 1, sc.pod)
    out["route"] = {
        # Unknown severities fall through to chat rather than vanish.
        "receiver": warning,
        "group_by": group_by,
        "group_wait": am.group_wait,
        "group_interval": am.group_interval,
        "repeat_interval": am.repeat_interval,
        "routes": routes,
    }
    out["inhibit_rules"] = [_inhibition(rule, sc) for rule in inhibitions] + [_severity_inhibition(sc)]
    out["receivers"] = list(receivers.values())
    return out


# CAUTION (Alertmanager): a rule whose `equal` labels are all missing from both alerts matches
# everything. Each rule below names alertname or the replica label, which every alert carries;
# with multi-cluster on, `equal` also names the cluster, so clusters never silence each other.


def _inhibition(rule: InhibitRule, sc: Scope) -> dict[str, Any]:
    """A declared inhibition: while a source fires, its targets on the same server are silent."""
    sources = [_one_of("alertname", rule.sources), *rule.matchers]
    equal = {"replica": sc.replica_labels, "target": sc.target, "model": sc.same_model}[rule.equal]
    return {
        "source_matchers": sources,
        "target_matchers": [_one_of("alertname", rule.targets)],
        "equal": list(equal),
    }


def _one_of(label: str, values: tuple[str, ...]) -> str:
    return f'{label}="{values[0]}"' if len(values) == 1 else f'{label}=~"{"|".join(values)}"'


def _severity_inhibition(sc: Scope) -> dict[str, Any]:
    return {
        # The critical tier of an alert silences its own warning tier on the same replica and
        # model (labels absent on both mean the same scope); a failing pager integration
        # never silences a failing chat one, which is then its only way out.
        "source_matchers": ['severity="critical"'],
        "target_matchers": ['severity="warning"'],
        "equal": ["alertname", *sc.instance_model, "integration"],
    }


def _smtp(am: AlertmanagerSection) -> dict[str, str]:
    out = {}
    if am.smtp_smarthost:
        out["smtp_smarthost"] = am.smtp_smarthost
    if am.smtp_from:
        out["smtp_from"] = am.smtp_from
    if am.smtp_auth_username:
        out["smtp_auth_username"] = am.smtp_auth_username
    if am.smtp_auth_password_file:
        out["smtp_auth_password_file"] = am.smtp_auth_password_file
    return out


def page_summary(labels: list[str]) -> str:
    """A PagerDuty incident's title: the alert, its model and the page group's other labels the
    alerts carry, how many alerts the group holds, and the first one's summary."""
    where = "".join(
        f'{{{{ with index .CommonLabels "{label}" }}}}, {label} {{{{ . }}}}{{{{ end }}}}' for label in labels
    )
    return (
        "{{ if .CommonLabels.alertname }}{{ .CommonLabels.alertname }}"
        "{{ else }}{{ (index .Alerts 0).Labels.alertname }} and others{{ end }}"
        "{{ with .CommonLabels.model_name }}: model {{ . }}{{ end }}"
        f"{where} ({{{{ .Alerts.Firing | len }}}} firing of {{{{ .Alerts | len }}}})"
        ": {{ (index .Alerts 0).Annotations.summary }}"
    )


def _receiver(name: str, r: Receiver, am: AlertmanagerSection, summary: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if r.type == "pagerduty":
        out["pagerduty_configs"] = [
            {
                "routing_key_file": r.secret_file,
                "send_resolved": r.send_resolved,
                "description": summary,
                "severity": '{{ if eq .CommonLabels.severity "critical" }}critical{{ else }}warning{{ end }}',
                # A page groups one alert of one model across its replicas: the runbook and the
                # dashboard are the group's, every replica's description is listed.
                "details": {
                    "runbook": "{{ with (index .Alerts 0).Annotations.runbook_url }}{{ . }}{{ end }}",
                    "dashboard": "{{ with (index .Alerts 0).Annotations.dashboard_url }}{{ . }}{{ end }}",
                    "firing": "{{ .Alerts.Firing | len }}",
                    "descriptions": "{{ range .Alerts.Firing }}{{ .Annotations.description }}\n{{ end }}",
                    "resolved": "{{ range .Alerts.Resolved }}{{ .Annotations.description }}\n{{ end }}",
                },
            }
        ]
    elif r.type == "opsgenie":
        out["opsgenie_configs"] = [
            {
                "api_key_file": r.secret_file,
                "send_resolved": r.send_resolved,
                "priority": '{{ if eq .CommonLabels.severity "critical" }}P1{{ else }}P3{{ end }}',
                "description": "{{ range .Alerts }}{{ .Annotations.description }}\n{{ with .Annotations.runbook_url }}Runbook: {{ . }}\n{{ end }}{{ end }}",
            }
        ]
    elif r.type == "slack":
        slack: dict[str, Any] = {"api_url_file": r.secret_file, "send_resolved": r.send_resolved}
        if r.channel:
            slack["channel"] = r.channel
        slack.update({"title": SLACK_TITLE, "text": SLACK_TEXT})
        out["slack_configs"] = [slack]
    elif r.type == "webhook":
        hook: dict[str, Any] = {"send_resolved": r.send_resolved}
        if r.secret_file and am.webhook_url_file:
            hook["url_file"] = r.secret_file
        else:
            hook["url"] = r.url
            if r.secret_file:
                hook["http_config"] = {"authorization": {"credentials_file": r.secret_file}}
        out["webhook_configs"] = [hook]
    elif r.type == "email":
        if not (am.smtp_smarthost and am.smtp_from):
            raise BundleError(
                "an email receiver needs alertmanager.smtp_smarthost and alertmanager.smtp_from in the config."
            )
        out["email_configs"] = [{"to": r.to, "send_resolved": r.send_resolved}]
    # type none: a receiver with no integration discards what reaches it, on purpose.
    return out
