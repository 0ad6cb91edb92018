"""Turn the sentinel bundles' rules and dashboards into templates over the knobs, and check them:
filled with the sentinels they must give the sentinel bundle without multi-cluster, and filled with
the real configuration the bundle being written, or generation stops (docs/design.md).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import BundleError
from .knobs import MARKER, SUFFIX, TOKEN, Form, tokens


@dataclass(frozen=True)
class Ref:
    name: str  # a field of lib/values.libsonnet


@dataclass(frozen=True)
class Text:
    parts: tuple[str | Ref, ...]


@dataclass(frozen=True)
class KnobValue:
    name: str  # a number taken as is from _config


@dataclass(frozen=True)
class RunbookURL:
    anchor: str


@dataclass(frozen=True)
class Lit:
    value: Any


@dataclass(frozen=True)
class Obj:
    items: tuple[tuple[Node, Node, bool], ...]  # (key, value, only with multi-cluster)


@dataclass(frozen=True)
class Arr:
    items: tuple[tuple[Node, bool], ...]  # (element, only with multi-cluster)


@dataclass(frozen=True)
class Choice:
    """What multi-cluster changes beyond adding the label: one template for each setting."""

    multi: Node
    single: Node


Node = Ref | Text | KnobValue | RunbookURL | Lit | Obj | Arr | Choice


class _Differs(Exception):
    """A template filled without multi-cluster does not give the bundle without multi-cluster."""


@dataclass(frozen=True)
class Fill:
    """What a template is filled with: each form's text, each number knob, the runbook base."""

    texts: dict[str, str]
    numbers: dict[str, float]
    runbook: str
    multi_cluster: bool


class Deriver:
    def __init__(self, forms: list[Form], numbers: dict[float, str], runbook: str) -> None:
        self.numbers = numbers  # sentinel value -> knob
        self.runbook = runbook
        # Names and selectors carry the marker; numbers and durations are whole tokens.
        marked = [f for f in forms if MARKER in f.sentinel.lower()]
        self.tokens = {f.sentinel: f.name for f in forms if f not in marked}
        for text in self.tokens:
            if not TOKEN.fullmatch(text):
                raise ValueError(f"the mixin form {text!r} is neither a marked name nor a number token")
        self.marked = {f.sentinel: f.name for f in marked}
        longest_first = sorted(self.marked, key=len, reverse=True)
        self.pattern = re.compile("|".join(re.escape(text) for text in longest_first))
        self.used: set[str] = set()

    def _spans(self, value: str) -> list[tuple[int, int, str]]:
        """(start, end, form) of every knob form in a string."""
        spans = []
        if MARKER in value.lower():
            spans += [(m.start(), m.end(), self.marked[m.group(0)]) for m in self.pattern.finditer(value)]
        for start, text in tokens(value):
            if any(a <= start < b for a, b, _ in spans):
                continue
            for candidate in (text, text.rstrip(SUFFIX)):  # a number followed by a unit is still it
                if candidate in self.tokens:
                    spans.append((start, start + len(candidate), self.tokens[candidate]))
                    break
        return sorted(spans)

    def text(self, value: str) -> Node:
        if value.startswith(self.runbook + "#"):
            return RunbookURL(value[len(self.runbook) + 1 :])
        parts: list[str | Ref] = []
        pos = 0
        for start, end, name in self._spans(value):
            if start > pos:
                parts.append(value[pos:start])
            self.used.add(name)
            parts.append(Ref(name))
            pos = end
        if not parts:
            return Lit(value)
        if pos < len(value):
            parts.append(value[pos:])
        return Text(tuple(parts))

    def node(self, on: Any, off: Any, where: str, check: Fill | None) -> Node:
        """The template of `on`. With `check` (the sentinels, multi-cluster off), filling it must give
        `off`: where multi-cluster changes more than the label, each setting gets its own template."""
        if check is None:
            return self._node(on, None, where, None)
        try:
            return self._node(on, off, where, check)
        except _Differs:
            return Choice(self._node(on, None, where, None), self._node(off, None, where, None))

    def _node(self, on: Any, off: Any, where: str, check: Fill | None) -> Node:
        if isinstance(on, dict):
            return self._object(on, off, where, check)
        if isinstance(on, list):
            return self._array(on, off, where, check)
        if isinstance(on, str):
            out = self.text(on)
        elif isinstance(on, float) and on in self.numbers:
            self.used.add(self.numbers[on])
            out = KnobValue(self.numbers[on])
        else:
            out = Lit(on)
        if check is not None and fill(out, check) != off:
            raise _Differs
        return out

    def _object(self, on: dict, off: Any, where: str, check: Fill | None) -> Obj:
        if check is not None and (not isinstance(off, dict) or not set(off) <= set(on)):
            raise _Differs
        items = []
        for k, v in on.items():
            if check is not None and k not in off:
                # A field only multi-cluster adds (a table column named after the cluster label).
                items.append((self.text(k), self.node(v, None, f"{where}.{k}", None), True))
            else:
                value = self.node(v, off[k] if check is not None else None, f"{where}.{k}", check)
                items.append((self.text(k), value, False))
        if check is not None:
            keys = {fill(key, check) for key, _, multi in items if not multi}
            if keys != set(off):
                raise _Differs
        return Obj(tuple(items))

    def _array(self, on: list, off: Any, where: str, check: Fill | None) -> Arr:
        if check is None:
            return Arr(tuple((self.node(v, None, f"{where}[{i}]", None), False) for i, v in enumerate(on)))
        if not isinstance(off, list):
            raise _Differs
        if len(on) == len(off):
            return Arr(
                tuple(
                    (self.node(a, b, f"{where}[{i}]", check), False)
                    for i, (a, b) in enumerate(zip(on, off, strict=True))
                )
            )
        # Elements only multi-cluster adds: align the rest, each filled as without multi-cluster.
        unchecked = [self.node(v, None, f"{where}[{i}]", None) for i, v in enumerate(on)]
        keys_on = [_canon(fill(n, check)) for n in unchecked]
        keys_off = [_canon(v) for v in off]
        items: list[tuple[Node, bool]] = []
        matcher = difflib.SequenceMatcher(None, keys_on, keys_off, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                    items.append((self.node(on[i], off[j], f"{where}[{i}]", check), False))
            elif op == "delete":
                items += [(unchecked[i], True) for i in range(i1, i2)]
            else:
                raise _Differs
        return Arr(tuple(items))


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _mismatch(where: str, what: str) -> BundleError:
    return BundleError(
        f"cannot build the jsonnet mixin: {where} does not follow from the configuration ({what}); "
        "this is a bug in vllm-obs, please report it with your vllm-obs.yml."
    )


def link_knob(node: Node) -> str | None:
    """The knob a link annotation needs (unset: the alert carries no such link), if it is one."""
    if isinstance(node, RunbookURL):
        return "runbookURLPattern"
    if isinstance(node, Text) and node.parts and node.parts[0] == Ref("grafanaURL"):
        return "grafanaURL"
    return None


def _link_set(node: Node, values: Fill) -> bool:
    return bool(values.runbook) if isinstance(node, RunbookURL) else bool(values.texts["grafanaURL"])


def fill(node: Node, values: Fill) -> Any:
    if isinstance(node, Lit):
        return node.value
    if isinstance(node, Text):
        return "".join(values.texts[p.name] if isinstance(p, Ref) else p for p in node.parts)
    if isinstance(node, KnobValue):
        return values.numbers[node.name]
    if isinstance(node, RunbookURL):
        return f"{values.runbook}#{node.anchor}"
    if isinstance(node, Obj):
        return {
            fill(k, values): fill(v, values)
            for k, v, multi in node.items
            if (values.multi_cluster or not multi) and not (link_knob(v) and not _link_set(v, values))
        }
    if isinstance(node, Choice):
        return fill(node.multi if values.multi_cluster else node.single, values)
    if isinstance(node, Arr):
        return [fill(v, values) for v, multi in node.items if values.multi_cluster or not multi]
    raise TypeError(node)


def fill_key(key: Node) -> str:
    """A key for messages: its literal text, or its template."""
    if isinstance(key, Lit):
        return str(key.value)
    if isinstance(key, Text):
        return "".join(f"%({p.name})s" if isinstance(p, Ref) else p for p in key.parts)
    return "?"


def check_filled(node: Node, values: Fill, expected: Any, where: str) -> None:
    """Filling with the real configuration must give exactly what the bundle writes."""
    got = fill(node, values)
    if got != expected:
        raise _mismatch(_first_difference(got, expected, where), "it differs from the generated file")


def _first_difference(a: Any, b: Any, where: str) -> str:
    if isinstance(a, dict) and isinstance(b, dict) and set(a) == set(b):
        for key in a:
            if a[key] != b[key]:
                return _first_difference(a[key], b[key], f"{where}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{where}[{i}]")
    return f"{where} ({a!r} instead of {b!r})"[:400]


def check_no_sentinel(node: Node, where: str) -> None:
    """A sentinel left in literal text is a rendering of a knob the mixin does not know."""
    if isinstance(node, Lit) and isinstance(node.value, str):
        texts = [node.value]
    elif isinstance(node, Text):
        texts = [p for p in node.parts if isinstance(p, str)]
    elif isinstance(node, Obj):
        for key, value, _ in node.items:
            check_no_sentinel(key, where)
            check_no_sentinel(value, f"{where}.{fill_key(key)}")
        return
    elif isinstance(node, Choice):
        check_no_sentinel(node.multi, where)
        check_no_sentinel(node.single, where)
        return
    elif isinstance(node, Arr):
        for i, (value, _) in enumerate(node.items):
            check_no_sentinel(value, f"{where}[{i}]")
        return
    else:
        return
    for text in texts:
        if MARKER in text.lower():
            raise _mismatch(where, f"a configured name is written in a way the mixin does not know: {text!r}")
