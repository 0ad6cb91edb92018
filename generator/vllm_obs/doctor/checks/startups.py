"""Check 7: the servers' start-up times, states and vLLM version, read through the exporters' contract.
Flags a version of another minor release than the bundle's, a start that would trip VllmStartupSlow,
and a startupProbe under the slowest start plus 30 s or a liveness probe that would kill a starting server.
"""

from __future__ import annotations

import math

from ...exporter_series import LOG, select
from ...promql import seconds
from ..clients import ApiError
from ..context import Context
from ..findings import FAIL, INFO, OK, SKIP, WARN
from . import kube_probes

FAMILY = "lifecycle"
DURATIONS = "vllm_log_startup_duration_seconds"
LAST_DURATION = "vllm_log_last_startup_duration_seconds"
STATE = "vllm_log_server_state"
VERSION = "vllm_log_vllm_version_info"
PROBE_MARGIN = 30  # seconds a startupProbe must leave beyond the slowest start
SHOWN = 5
# Every state but ready: a failure, or one a server passes through.
BAD_STATES = ("dead", "failed_start", "faulted")
BAD_WHAT = {
    "dead": ("whose engine died", "see the runbook of VllmEngineDead; the server's log says why"),
    "failed_start": (
        "that failed to start",
        "see the runbook of VllmStartupFailed; the server's log says why",
    ),
    "faulted": (
        "whose engine faulted and waits for fault tolerance, refusing requests",
        "the server's log says why; /v1/fault_tolerance/status (vLLM 0.34) shows each engine's status",
    ),
}
PASSING_STATES = ("starting", "loading", "stopping", "stopped", "unknown")
assert set(BAD_STATES + PASSING_STATES + ("ready",)) == set(LOG[STATE].values("state"))


def run(ctx: Context) -> None:
    scope = ctx.view.reads_of_role("log exporter")
    if scope is None:
        ctx.add(FAMILY, SKIP, "lifecycle", "not checked: the bundle reads no log exporter")
        _kubernetes(ctx, None)
        return
    if ctx.job_is_down(scope.job):
        ctx.add(FAMILY, SKIP, "lifecycle", f"not checked: {ctx.job_down(scope.job).text}")
        _kubernetes(ctx, None)
        return
    sel = scope.selector
    queries = {
        "buckets": f"sum by (le) ({select(LOG, DURATIONS + '_bucket', sel, phase='total')})",
        "count": f"sum({select(LOG, DURATIONS + '_count', sel, phase='total')})",
        "sum": f"sum({select(LOG, DURATIONS + '_sum', sel, phase='total')})",
        "last": f"topk(1, {select(LOG, LAST_DURATION, sel, phase='total')})",
        "states": f"count by (state) ({select(LOG, STATE, sel)} == 1)",
        "bad": f"group by (instance, state) ({select(LOG, STATE, sel, state='~' + '|'.join(BAD_STATES + PASSING_STATES))} == 1)",
        "versions": f"count by (version) ({select(LOG, VERSION, sel)} == 1)",
    }
    answers = dict(zip(queries, ctx.prom.query_many(list(queries.values())), strict=True))
    errors = [a for a in answers.values() if isinstance(a, ApiError)]
    if errors:
        ctx.unchecked(FAMILY, "lifecycle", "read the log exporter's lifecycle series", errors[0])
        _kubernetes(ctx, None)
        return
    if not any(answers.values()):
        ctx.add(
            FAMILY,
            WARN,
            "lifecycle",
            f"the log exporter exports no lifecycle series ({STATE}, {DURATIONS}, {VERSION}): it is older than "
            "the bundle, so start-ups are not measured and VllmTargetDown pages during every start",
            "upgrade vllm-log-exporter to the version of this vllm-obs",
        )
        _kubernetes(ctx, None)
        return
    longest = _startup_times(ctx, answers)
    _states(ctx, answers)
    _versions(ctx, answers)
    _kubernetes(ctx, longest)


def _startup_times(ctx: Context, answers: dict) -> tuple[float, float | None] | None:
    """Report start-up times; return (slowest measured at least, at most) or None without any."""
    count = _scalar(answers["count"])
    last = answers["last"]
    if not count and not last:
        ctx.add(
            FAMILY,
            INFO,
            "start-up time",
            "no completed start-up measured yet (the exporter has not seen one since it started reading)",
        )
        return None
    buckets = sorted(
        (float(s["metric"]["le"]), float(s["value"][1])) for s in answers["buckets"] if "le" in s["metric"]
    )
    lower, upper = _slowest_bounds(buckets, count) if count else (0.0, None)
    last_value = float(last[0]["value"][1]) if last else 0.0
    last_where = last[0]["metric"].get("instance", "?") if last else "?"
    parts = []
    if count:
        parts.append(f"{count:.0f} start-up(s) measured, mean {_scalar(answers['sum']) / count:.1f} s")
        if upper is not None and upper != math.inf:
            parts.append(f"the slowest between {lower:g} s and {upper:g} s")
        elif lower:
            parts.append(f"the slowest over {lower:g} s")
    if last:
        parts.append(f"the slowest last start-up {last_value:.1f} s (on {last_where})")
    ctx.add(FAMILY, INFO, "start-up time", "; ".join(parts))
    slowest = max(last_value, lower)
    if ctx.config is not None:
        expected = seconds(ctx.config.alerts.expected_startup)
        if slowest > expected:
            ctx.add(
                FAMILY,
                WARN,
                "alerts.expected_startup",
                f"a measured start-up took {slowest:.0f} s, longer than alerts.expected_startup "
                f"({ctx.config.alerts.expected_startup}): VllmStartupSlow warns on such starts and VllmTargetDown "
                "pages during them",
                f"set alerts.expected_startup above {math.ceil(slowest + PROBE_MARGIN)}s and regenerate",
            )
        else:
            ctx.add(
                FAMILY,
                OK,
                "alerts.expected_startup",
                f"{ctx.config.alerts.expected_startup} is above the slowest measured start-up ({slowest:.0f} s)",
            )
    return slowest, (upper if upper not in (None, math.inf) else None)


def _slowest_bounds(buckets: list[tuple[float, float]], count: float) -> tuple[float, float | None]:
    """The slowest observation lies in (lower, upper]: the first bucket holding every one."""
    lower = 0.0
    for le, cumulative in buckets:
        if cumulative >= count:
            return lower, le
        lower = le
    return lower, None


def _states(ctx: Context, answers: dict) -> None:
    counts = {s["metric"].get("state", ""): int(float(s["value"][1])) for s in answers["states"]}
    if not counts:
        return
    by_state: dict[str, list[str]] = {}
    for sample in answers["bad"]:
        by_state.setdefault(sample["metric"].get("state", ""), []).append(
            sample["metric"].get("instance", "?")
        )
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    ctx.add(FAMILY, OK if set(counts) <= {"ready"} else INFO, "server states", f"from the logs: {summary}")
    for state in BAD_STATES:
        if state in by_state:
            names = sorted(by_state[state])
            ctx.add(
                FAMILY,
                FAIL,
                f"servers {state}",
                f"{len(names)} server(s) {BAD_WHAT[state][0]}: " + ", ".join(names[:SHOWN]),
                BAD_WHAT[state][1],
                names,
            )
    for state in PASSING_STATES:
        if state in by_state:
            names = sorted(by_state[state])
            ctx.add(
                FAMILY,
                WARN,
                f"servers {state}",
                f"{len(names)} server(s) {state}: " + ", ".join(names[:SHOWN]),
                "nothing to do if that is a rollout or a planned stop",
                names,
            )


def _versions(ctx: Context, answers: dict) -> None:
    announced = {s["metric"].get("version", ""): int(float(s["value"][1])) for s in answers["versions"]}
    if not announced:
        return
    bundle = ctx.view.release
    text = ", ".join(f"{v} ({n} server{'s' if n != 1 else ''})" for v, n in sorted(announced.items()))
    if bundle is None:
        ctx.add(FAMILY, INFO, "vLLM version", f"the logs announce vLLM {text}")
        return
    drifted = sorted(v for v in announced if ".".join(v.split(".")[:2]) not in bundle.minors)
    if drifted:
        ctx.add(
            FAMILY,
            WARN,
            "vLLM version",
            f"the logs announce vLLM {text}, but the bundle was generated for {bundle.describe()}: "
            f"{', '.join(drifted)} is another minor release, whose series may be named differently",
            ctx.regenerate_advice(),
            drifted,
        )
        return
    ctx.add(
        FAMILY, OK, "vLLM version", f"the logs announce vLLM {text}, the release the bundle was generated for"
    )


def _kubernetes(ctx: Context, slowest: tuple[float, float | None] | None) -> None:
    if not ctx.kubernetes_manifest:
        return
    for probes in kube_probes.read(ctx.kubernetes_manifest):
        where = f"{probes.workload} {probes.container}"
        if slowest is None:
            budget = probes.startup or probes.liveness
            ctx.add(
                FAMILY,
                WARN,
                where,
                f"no start-up measured, so the probe budget ({budget.describe() if budget else '?'}) cannot be "
                "checked against one",
                "run the doctor again after a start-up the log exporter has seen",
            )
            continue
        measured, upper = slowest
        need = measured + PROBE_MARGIN
        if probes.startup is not None:
            if probes.startup.seconds < need:
                ctx.add(
                    FAMILY,
                    FAIL,
                    f"{where} startupProbe",
                    f"gives up after {probes.startup.describe()}, less than the slowest measured start-up "
                    f"({measured:.0f} s) plus {PROBE_MARGIN} s: the kubelet restarts such a start in the middle of loading",
                    f"raise failureThreshold to at least {_threshold(need, probes.startup)} (periodSeconds "
                    f"{probes.startup.period})",
                )
            elif upper is not None and probes.startup.seconds < upper + PROBE_MARGIN:
                ctx.add(
                    FAMILY,
                    WARN,
                    f"{where} startupProbe",
                    f"gives up after {probes.startup.describe()}; the slowest start-up took up to {upper:g} s "
                    "(histogram bucket), so it may be too short",
                    f"raise failureThreshold to {_threshold(upper + PROBE_MARGIN, probes.startup)} to be safe",
                )
            else:
                ctx.add(
                    FAMILY,
                    OK,
                    f"{where} startupProbe",
                    f"allows {probes.startup.seconds} s, above the slowest measured start-up ({measured:.0f} s) "
                    f"plus {PROBE_MARGIN} s",
                )
            continue
        liveness = probes.liveness
        if liveness is not None and liveness.seconds < need:
            ctx.add(
                FAMILY,
                FAIL,
                f"{where} livenessProbe",
                f"there is no startupProbe, so the livenessProbe kills a starting server after "
                f"{liveness.describe()}, before the slowest measured start-up ({measured:.0f} s) ends",
                f"add a startupProbe on /health with periodSeconds 10 and failureThreshold "
                f"{math.ceil(need / 10)} (or more)",
            )
        elif liveness is not None:
            ctx.add(
                FAMILY,
                OK,
                f"{where} livenessProbe",
                f"no startupProbe, but the livenessProbe waits {liveness.seconds} s, past the slowest measured "
                f"start-up ({measured:.0f} s) plus {PROBE_MARGIN} s",
            )


def _threshold(need: float, budget: kube_probes.Budget) -> int:
    return max(1, math.ceil((need - budget.initial_delay) / max(1, budget.period)))


def _scalar(result: list) -> float:
    return float(result[0]["value"][1]) if result else 0.0
