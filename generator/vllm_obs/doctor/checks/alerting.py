"""Check 5: the alerting path. Prometheus has an active Alertmanager; the bundle's dead man's switch
fires and reached Alertmanager; Alertmanager has every receiver of the bundle's alertmanager.yml;
active silences that can hide one of the bundle's alerts are listed, with what they hide now.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ..bundle_view import Rule
from ..clients import ApiError
from ..context import Context
from ..findings import FAIL, OK, SKIP, WARN
from ..selectors import PromQLSyntaxError, selectors

FAMILY = "alerting"
SHOWN = 5


def run(ctx: Context) -> None:
    active = _prometheus_alertmanagers(ctx)
    heartbeat = _heartbeat(ctx)
    if ctx.am is None:
        ctx.add(
            FAMILY, SKIP, "Alertmanager", "not checked: pass --alertmanager URL to check routing and silences"
        )
        return
    try:
        status = ctx.am.get("/api/v2/status")
    except ApiError as exc:
        ctx.add(
            FAMILY,
            FAIL,
            "Alertmanager",
            f"{ctx.am.url} does not serve the Alertmanager v2 API ({exc.describe})",
            "pass the URL of Alertmanager itself (with its path prefix, if any)",
        )
        return
    _check_receivers(ctx, status)
    alerts = _am_alerts(ctx)
    if heartbeat and alerts is not None:
        _check_heartbeat_delivered(ctx, heartbeat, alerts, active)
    _check_silences(ctx, alerts or [])


def _prometheus_alertmanagers(ctx: Context) -> list[str]:
    try:
        data = ctx.prom.get("/api/v1/alertmanagers")
    except ApiError as exc:
        ctx.unchecked(FAMILY, "Prometheus → Alertmanager", "read /api/v1/alertmanagers", exc)
        return []
    active = [a.get("url", "") for a in data.get("activeAlertmanagers") or []]
    dropped = len(data.get("droppedAlertmanagers") or [])
    if not active:
        wanted = ", ".join(ctx.view.alertmanager_targets) or "an Alertmanager"
        ctx.add(
            FAMILY,
            FAIL,
            "Prometheus → Alertmanager",
            "Prometheus sends its alerts to no Alertmanager"
            + (f" ({dropped} discovered and dropped by relabelling)" if dropped else "")
            + ": every alert fires into the void",
            f"set alerting.alertmanagers in the running Prometheus's configuration (the bundle sends to {wanted}) "
            "and reload it",
        )
        return []
    ctx.add(
        FAMILY, OK, "Prometheus → Alertmanager", f"Prometheus sends alerts to {', '.join(active[:SHOWN])}"
    )
    return active


def _heartbeat(ctx: Context) -> str | None:
    """The bundle's always-firing alert (an expression that reads no series), firing in Prometheus."""
    name = next((r.name for r in ctx.view.rules if r.kind == "alert" and _always(r)), None)
    if name is None:
        return None
    states = [
        rule.get("state")
        for groups in (ctx.loaded_groups or {}).values()
        for group in groups
        for rule in group.get("rules") or []
        if rule.get("type") == "alerting" and rule.get("name") == name
    ]
    if states:
        firing = "firing" in states
    else:  # no rules API here (or the rule is not loaded): ask for the alert itself
        try:
            firing = bool(ctx.prom.query(f'ALERTS{{alertname="{name}", alertstate="firing"}}'))
        except ApiError as exc:
            ctx.unchecked(FAMILY, name, "ask whether it fires", exc)
            return None
    if not firing:
        cause = ctx.causes.get(name)
        ctx.add(
            FAMILY,
            FAIL,
            name,
            "the dead man's switch does not fire in Prometheus"
            + (
                f" ({cause.text})"
                if cause
                else " though its rule is loaded: the rule manager is not evaluating"
            ),
            "load the bundle's alert rules and check the Rules lines above",
        )
        return None
    ctx.add(FAMILY, OK, name, "the dead man's switch fires in Prometheus")
    return name


def _always(rule: Rule) -> bool:
    try:
        return not selectors(rule.expr) and "vector(" in rule.expr.replace(" ", "")
    except PromQLSyntaxError:
        return False


def _check_receivers(ctx: Context, status: dict) -> None:
    original = (status.get("config") or {}).get("original", "")
    try:
        loaded = yaml.safe_load(original) or {}
    except yaml.YAMLError:
        loaded = {}
    _check_secret_files(ctx, loaded)
    names = {r.get("name") for r in loaded.get("receivers") or []}
    missing = [r for r in ctx.view.receivers if r not in names]
    if missing:
        ctx.add(
            FAMILY,
            FAIL,
            "Alertmanager receivers",
            f"the loaded configuration lacks the bundle's receiver(s) {', '.join(missing)}, so the routes that send "
            "to them are not there either",
            "load alerts/alertmanager.yml (or merge its receivers, routes and inhibit_rules into yours) and reload "
            "Alertmanager",
            missing,
        )
        return
    ctx.add(
        FAMILY,
        OK,
        "Alertmanager receivers",
        f"the loaded configuration has all {len(ctx.view.receivers)} receivers",
    )


def _secret_files(node: object) -> list[str]:
    """Every `*_file` path in a loaded Alertmanager configuration (keys, webhook URLs, passwords)."""
    if isinstance(node, dict):
        return [
            found
            for key, value in node.items()
            for found in (
                [value] if key.endswith("_file") and isinstance(value, str) else _secret_files(value)
            )
        ]
    if isinstance(node, list):
        return [found for item in node for found in _secret_files(item)]
    return []


def _check_secret_files(ctx: Context, loaded: dict) -> None:
    """Alertmanager loads a configuration whose key file is missing or empty, and amtool accepts
    it; only the first notification fails. So every file the loaded receivers name is looked
    for in the folder they are mounted from."""
    files = sorted(set(_secret_files(loaded)))
    if not files:
        return
    if ctx.alertmanager_secrets is None:
        ctx.add(
            FAMILY,
            SKIP,
            "receiver secrets",
            f"not checked: the receivers read {len(files)} secret file(s); pass --alertmanager-secrets DIR "
            "(the folder they are mounted from) to check each is there and not empty",
        )
        return
    folder = Path(ctx.alertmanager_secrets)
    bad = []
    for path in files:
        local = folder / Path(path).name
        try:
            empty = not local.read_text("utf-8").strip()
        except (OSError, UnicodeDecodeError):
            bad.append(f"{path} ({local} is missing or unreadable)")
            continue
        if empty:
            bad.append(f"{path} ({local} is empty)")
    if bad:
        ctx.add(
            FAMILY,
            FAIL,
            "receiver secrets",
            f"{len(bad)} secret file(s) of the receivers are missing or empty: {'; '.join(bad[:SHOWN])}; "
            "their notifications will fail (amtool check-config does not see it)",
            "put each key or URL in its file (make secrets writes placeholders for the stack) and check "
            "VllmObsNotificationsFailing",
            bad,
        )
        return
    ctx.add(
        FAMILY,
        OK,
        "receiver secrets",
        f"all {len(files)} secret files of the receivers are there and not empty",
    )


def _am_alerts(ctx: Context) -> list[dict] | None:
    try:
        return ctx.am.get("/api/v2/alerts") or []  # type: ignore[union-attr]
    except ApiError as exc:
        ctx.unchecked(FAMILY, "Alertmanager alerts", "list Alertmanager's alerts", exc)
        return None


def _check_heartbeat_delivered(ctx: Context, name: str, alerts: list[dict], active: list[str]) -> None:
    mine = [a for a in alerts if (a.get("labels") or {}).get("alertname") == name]
    if not mine:
        ctx.add(
            FAMILY,
            FAIL,
            f"{name} in Alertmanager",
            f"Prometheus fires {name} but {ctx.am.url} has not received it"  # type: ignore[union-attr]
            + (f" (Prometheus sends to {', '.join(active[:SHOWN])})" if active else ""),
            "point the running Prometheus's alerting.alertmanagers at this Alertmanager, or check the network "
            "between them",
        )
        return
    state = (mine[0].get("status") or {}).get("state", "")
    if state == "suppressed":
        ctx.add(
            FAMILY,
            FAIL,
            f"{name} in Alertmanager",
            f"{name} is silenced or inhibited, so the heartbeat receiver gets nothing and the dead man's switch "
            "will page as if the pipeline were down",
            "expire the silence that matches it (see below)",
        )
        return
    ctx.add(FAMILY, OK, f"{name} in Alertmanager", f"{name} reached Alertmanager and is active")


def _check_silences(ctx: Context, alerts: list[dict]) -> None:
    try:
        silences = ctx.am.get("/api/v2/silences") or []  # type: ignore[union-attr]
    except ApiError as exc:
        ctx.unchecked(FAMILY, "silences", "list the silences", exc)
        return
    rules = [r for r in ctx.view.rules if r.kind == "alert"]
    hiding = 0
    for silence in silences:
        if (silence.get("status") or {}).get("state") != "active":
            continue
        matchers = silence.get("matchers") or []
        hidden = sorted(
            {
                r.name
                for r in rules
                if _may_match(matchers, {"alertname": r.name, **r.labels}, complete=_always(r))
            }
        )
        if not hidden:
            continue
        hiding += 1
        now = sum(1 for a in alerts if silence.get("id") in ((a.get("status") or {}).get("silencedBy") or []))
        text = ", ".join(_matcher_text(m) for m in matchers)
        shown = ", ".join(hidden[:SHOWN]) + (
            f" and {len(hidden) - SHOWN} more" if len(hidden) > SHOWN else ""
        )
        ctx.add(
            FAMILY,
            WARN,
            f"silence {silence.get('id', '?')}",
            f"active until {silence.get('endsAt', '?')} ({text}; by {silence.get('createdBy', '?')}: "
            f'"{silence.get("comment", "")}"): it can hide {shown}, and silences {now} alert(s) now',
            f"expire it when the work it covers is done: amtool silence expire {silence.get('id', '')}",
            hidden,
        )
    if not hiding:
        ctx.add(FAMILY, OK, "silences", "no active silence matches a vLLM alert")


def _may_match(matchers: list[dict], known: dict[str, str], complete: bool) -> bool:
    """Could the silence match an alert whose static labels are `known`? A matcher on a label the alert
    only gets when firing (instance, job, model_name) may match; an alert that reads no series
    (`complete`) has only its rule's labels, so a missing label is empty.
    """
    for m in matchers:
        name, value = m.get("name", ""), m.get("value", "")
        is_regex, is_equal = bool(m.get("isRegex")), m.get("isEqual", True)
        if name not in known and not complete:
            continue
        actual = known.get(name, "")
        try:
            hit = bool(re.fullmatch(value, actual)) if is_regex else value == actual
        except re.error:
            continue  # a regular expression Python cannot read: assume it may match
        if hit != bool(is_equal):
            return False
    return True


def _matcher_text(m: dict) -> str:
    op = (
        ("=~" if m.get("isRegex") else "=")
        if m.get("isEqual", True)
        else ("!~" if m.get("isRegex") else "!=")
    )
    return f'{m.get("name")}{op}"{m.get("value")}"'
