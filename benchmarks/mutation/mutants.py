"""The mutants of one alerting rule, each a small plausible mistake: thresholds x1.5 and x0.67, `for`
and `keep_firing_for` halved and doubled, each `and`/`unless` operand dropped, each range halved. The
expression is scanned as text, knowing only strings, label matchers and the nesting of parentheses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from vllm_obs.promql import number, seconds

# A number right after a comparison, or first inside the parenthesis after it: `> (14.4 * 0.01)`
# mutates the burn factor 14.4.
_COMPARISON = re.compile(r"(>=|<=|>|<)(\s*(?:bool\s+)?\(?)(\d+(?:\.\d+)?(?:e[+-]?\d+)?)(?![\w.])")
_RANGE = re.compile(r"\[(\d+(?:ms|s|m|h|d|w|y)(?:\d+(?:ms|s|m|h|d|w|y))*)(:[^\]]*)?\]")
_SET_OPERATOR = re.compile(r"\b(and|unless|or)\b")
_MODIFIER = re.compile(r"\s*(?:on|ignoring)\s*\([^)]*\)")


@dataclass(frozen=True)
class Mutant:
    alert: str  # the alert and its labels: VllmEngineDead{severity=warning}
    kind: str  # threshold, for, operand, window
    change: str  # what changed, readable: "> 0.9 -> > 1.35"
    rule: dict  # the mutated rule
    at: tuple[int, int] = (-1, -1)  # its group's and its own index in the rules file

    @property
    def id(self) -> str:
        return f"{self.alert}: {self.change}"


def rule_key(rule: dict) -> str:
    """The alert and its labels: the rules of one alert differ in them (severity, burn tier, cause)."""
    labels = ",".join(f"{k}={v}" for k, v in sorted(rule.get("labels", {}).items()))
    return f"{rule['alert']}{{{labels}}}" if labels else rule["alert"]


def mutants_of(rule: dict) -> list[Mutant]:
    key, expr = rule_key(rule), rule["expr"]
    out: list[Mutant] = []
    mask = _masked(expr)

    def add(kind: str, change: str, new_expr: str | None = None, **fields: str) -> None:
        mutated = {**rule, **fields}
        if new_expr is not None:
            mutated["expr"] = new_expr
        out.append(Mutant(key, kind, change, mutated))

    for m in _COMPARISON.finditer(mask):
        value = float(m.group(3))
        for new in _scaled(value):
            op = m.group(1)
            text = number(new)
            add(
                "threshold",
                f"{op} {m.group(3)} -> {op} {text} (at {_where(expr, m.start())})",
                expr[: m.start(3)] + text + expr[m.end(3) :],
            )
    for field in ("for", "keep_firing_for"):
        if rule.get(field):
            held = seconds(rule[field])
            for factor, word in ((0.5, "halved"), (2, "doubled")):
                new = _duration(held * factor)
                add(field, f"{field} {rule[field]} -> {new} ({word})", **{field: new})
    for start, end, what in _operand_spans(mask):
        add("operand", f"drop {what} (at {_where(expr, start)})", _tidy(expr[:start] + expr[end:]))
    for m in _RANGE.finditer(mask):
        span = m.group(1)
        half = _duration(seconds(span) / 2)
        add(
            "window",
            f"[{span}{m.group(2) or ''}] -> [{half}{m.group(2) or ''}] (at {_where(expr, m.start())})",
            expr[: m.start(1)] + half + expr[m.end(1) :],
        )
    return _numbered(out)


def _numbered(mutants: list[Mutant]) -> list[Mutant]:
    """Two mutants with the same description (the same window twice on a line) get #2, #3."""
    seen: dict[str, int] = {}
    out = []
    for m in mutants:
        seen[m.id] = seen.get(m.id, 0) + 1
        out.append(m if seen[m.id] == 1 else replace(m, change=f"{m.change} #{seen[m.id]}"))
    return out


def _scaled(value: float) -> list[float]:
    if value in (0, 1):
        return [0.5]
    return [value * 1.5, round(value * 0.67, 6)]


def _duration(secs: float) -> str:
    """Seconds as the shortest exact Prometheus duration (150s, 30m, 2h)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if secs >= size and secs % size == 0:
            return f"{int(secs // size)}{unit}"
    return f"{int(secs * 1000)}ms"


def _where(expr: str, pos: int) -> str:
    """A short, stable pointer into the expression: its line and that line's first words."""
    line_no = expr.count("\n", 0, pos) + 1
    line = expr.splitlines()[line_no - 1].strip()
    return f"line {line_no}: {line[:48]}{'...' if len(line) > 48 else ''}"


def _masked(expr: str) -> str:
    """The expression with label matchers and strings blanked (same length): nothing in them
    is a threshold, a window or an operator."""
    chars = list(expr)
    depth, quote = 0, ""
    for i, c in enumerate(expr):
        if quote:
            chars[i] = " "
            if c == quote and expr[i - 1] != "\\":
                quote = ""
        elif c in "\"'`":
            quote, chars[i] = c, " "
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif depth:
            chars[i] = " "
    return "".join(chars)


def _operand_spans(mask: str) -> list[tuple[int, int, str]]:
    """(start, end, what) of each text whose removal drops one operand of an `and` / `unless`
    together with the operator (and its on/ignoring modifier)."""
    depth_at, depth = [], 0
    for c in mask:
        if c == ")":
            depth -= 1
        depth_at.append(depth)
        if c == "(":
            depth += 1
    operators = [(m.start(), m.end(), m.group(1), depth_at[m.start()]) for m in _SET_OPERATOR.finditer(mask)]
    spans = []
    for i, (start, end, word, depth) in enumerate(operators):
        if word == "or":
            continue
        group_start, group_end = _group(mask, depth_at, start, depth)
        before = [o for o in operators[:i] if o[3] == depth and group_start <= o[0]]
        after = [o for o in operators[i + 1 :] if o[3] == depth and o[0] < group_end]
        modifier = _MODIFIER.match(mask, end)
        right_start = modifier.end() if modifier else end
        right_end = after[0][0] if after else group_end
        left_start = before[-1][1] if before else group_start
        if before:  # keep the earlier operator's own modifier
            earlier = _MODIFIER.match(mask, left_start)
            left_start = earlier.end() if earlier else left_start
        spans.append((start, right_end, f"the right operand of `{word}`"))
        spans.append((left_start, right_start, f"the left operand of `{word}`"))
    return spans


def _group(mask: str, depth_at: list[int], pos: int, depth: int) -> tuple[int, int]:
    """The span of the parenthesised group (or the whole expression) holding `pos`."""
    start = pos
    while start > 0 and not (mask[start - 1] == "(" and depth_at[start - 1] == depth - 1):
        start -= 1
    end = pos
    while end < len(mask) and not (mask[end] == ")" and depth_at[end] == depth - 1):
        end += 1
    return start, end


def _tidy(expr: str) -> str:
    return "\n".join(line for line in expr.splitlines() if line.strip()).strip()
