"""Read PromQL far enough to know what an expression selects, and to compare two of them. A tokenizer
gives the vector selectors and a layout-free canonical form without a parser dependency; tests/doctor
checks it against a real PromQL parser on every expression of a bundle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
)
# Keywords followed by a parenthesised list of label names, not of expressions.
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_NUMBER_WORDS = frozenset({"inf", "nan"})
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>(?:\d+(?:ms|s|m|h|d|w|y))+(?![A-Za-z0-9_:]))
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>==|!=|<=|>=|=~|!~|[-+*/%^<>=,(){}\[\]:@])
    """,
    re.VERBOSE,
)


class PromQLSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class Token:
    kind: str  # string | duration | number | ident | op
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str  # = != =~ !~
    value: str


@dataclass(frozen=True)
class Selector:
    name: str | None
    matchers: tuple[Matcher, ...]
    window: str | None  # the range of a range selector ("5m"), None for an instant selector
    function: str | None  # the function whose argument the selector is ("rate"), if any
    text: str = ""  # the selector as written, without its range: `name{matchers}`

    def equalities(self) -> dict[str, str]:
        return {m.label: m.value for m in self.matchers if m.op == "="}

    def matcher(self, label: str) -> Matcher | None:
        return next((m for m in self.matchers if m.label == label), None)


def tokens(expr: str) -> list[Token]:
    out, pos = [], 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if not match:
            raise PromQLSyntaxError(f"unexpected character {expr[pos]!r} at offset {pos}")
        kind = match.lastgroup or ""
        if kind != "space":
            out.append(Token(kind, match.group(), match.start(), match.end()))
        pos = match.end()
    return out


def unquote(text: str) -> str:
    if text.startswith("`"):
        return text[1:-1]
    body, out, i = text[1:-1], [], 0
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "a": "\a", "b": "\b"}
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(escapes.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def duration_seconds(text: str) -> float:
    total = 0.0
    for amount, unit in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text):
        total += int(amount) * _DURATION_UNITS[unit]
    return total


def selectors(expr: str) -> list[Selector]:
    """Every vector selector of expr, in order."""
    toks = tokens(expr)
    out: list[Selector] = []
    calls: list[str | None] = []  # the function each open parenthesis belongs to (None: grouping)
    i = 0
    while i < len(toks):
        tok = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if tok.kind == "ident" and tok.text.lower() in _LABEL_LISTS and nxt and nxt.text == "(":
            i = _skip_group(toks, i + 1)
            continue
        if tok.kind == "ident" and nxt is not None and nxt.text == "(":
            calls.append(tok.text)
            i += 2
            continue
        if tok.kind == "ident" and nxt is not None and nxt.text.lower() in ("by", "without"):
            # `sum by (job) (...)`: an aggregation whose modifier comes first.
            after = _skip_group(toks, i + 2)
            if after < len(toks) and toks[after].text == "(":
                calls.append(tok.text)
                i = after + 1
                continue
        if tok.text == "(":
            calls.append(None)
        elif tok.text == ")":
            if calls:
                calls.pop()
        elif (tok.kind == "ident" and tok.text.lower() not in KEYWORDS | _NUMBER_WORDS) or tok.text == "{":
            name = tok.text if tok.kind == "ident" else None
            j = i + 1 if name else i
            matchers: tuple[Matcher, ...] = ()
            if j < len(toks) and toks[j].text == "{":
                matchers, j = _matchers(toks, j)
            if name is None:
                named = next((m for m in matchers if m.label == "__name__" and m.op == "="), None)
                name = named.value if named else None
            text = expr[tok.start : toks[j - 1].end]
            window = None
            if j < len(toks) and toks[j].text == "[" and j + 2 < len(toks) and toks[j + 2].text == "]":
                window = toks[j + 1].text
                j += 3
            function = calls[-1] if calls and window else None
            out.append(Selector(name, matchers, window, function, text))
            i = j
            continue
        i += 1
    return out


def _skip_group(toks: list[Token], open_index: int) -> int:
    depth = 0
    for k in range(open_index, len(toks)):
        if toks[k].text == "(":
            depth += 1
        elif toks[k].text == ")":
            depth -= 1
            if depth == 0:
                return k + 1
    raise PromQLSyntaxError("unbalanced parentheses after a label list")


def _matchers(toks: list[Token], open_index: int) -> tuple[tuple[Matcher, ...], int]:
    out, k = [], open_index + 1
    while k < len(toks) and toks[k].text != "}":
        if toks[k].text == ",":
            k += 1
            continue
        if k + 2 >= len(toks) or toks[k + 2].kind != "string":
            raise PromQLSyntaxError(f'a label matcher near offset {toks[k].start} is not label op "value"')
        out.append(Matcher(toks[k].text, toks[k + 1].text, unquote(toks[k + 2].text)))
        k += 3
    if k >= len(toks):
        raise PromQLSyntaxError("unclosed label matchers")
    return tuple(out), k + 1


def canonical(expr: str) -> tuple:
    """A form of expr that two printings of the same expression share. Prometheus re-prints a loaded
    rule (spacing, duration units, numbers, matcher order); the normalised token sequence stays.
    """
    toks = tokens(expr)
    out: list = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.text == "{":
            matchers, i = _matchers(toks, i)
            if matchers:  # `x{}` is `x`
                out.append(("matchers", tuple(sorted((m.label, m.op, m.value) for m in matchers))))
            continue
        if tok.kind == "string":
            out.append(("string", unquote(tok.text)))
        elif tok.kind == "duration":
            out.append(("duration", duration_seconds(tok.text)))
        elif tok.kind == "number":
            out.append(
                ("number", float(int(tok.text, 16)) if tok.text.lower().startswith("0x") else float(tok.text))
            )
        elif tok.kind == "ident" and tok.text.lower() in KEYWORDS | _NUMBER_WORDS:
            out.append(("word", tok.text.lower()))
        else:
            out.append((tok.kind, tok.text))
        i += 1
    return tuple(out)
