"""Write templates as jsonnet people can read: one field per line, PromQL in text blocks with
`%(name)s` where a knob goes (`||| % v`), numbers as `c.knob`."""

from __future__ import annotations

import json
import re

from .template import Arr, Choice, KnobValue, Lit, Node, Obj, Ref, RunbookURL, Text, link_knob

INDENT = "  "
KEYWORDS = {
    "assert", "else", "error", "false", "for", "function", "if", "import", "importstr", "importbin",
    "in", "local", "null", "self", "super", "tailstrict", "then", "true",
}  # fmt: skip
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def key(name: str) -> str:
    return name if IDENTIFIER.match(name) and name not in KEYWORDS else string(name)


def string(text: str) -> str:
    """A single-quoted jsonnet string."""
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char == "'":
            out.append("\\'")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "'" + "".join(out) + "'"


def _block_ok(text: str) -> bool:
    lines = text.split("\n")
    return (
        len(lines) > 1
        and not text.endswith("\n")
        and lines[0][:1] not in (" ", "")
        and "|||" not in text
        and "\t" not in text
        and "\r" not in text
        and all(line == line.rstrip() for line in lines)
    )


def text(value: str, indent: str, suffix: str = "") -> str:
    """A string: a `|||-` block when it has several lines, else one quoted line."""
    if _block_ok(value):
        inner = indent + INDENT
        body = "\n".join(inner + line if line else "" for line in value.split("\n"))
        return f"|||-\n{body}\n{indent}|||{suffix}"
    return string(value) + suffix


def node(n: Node, indent: str = "") -> str:
    if isinstance(n, Lit):
        value = n.value
        if isinstance(value, str):
            return text(value, indent)
        return json.dumps(value)
    if isinstance(n, Text):
        return _concatenation(n, indent)
    if isinstance(n, KnobValue):
        return f"c.{n.name}"
    if isinstance(n, RunbookURL):
        return f"c.runbookURLPattern % {string(n.anchor)}"
    if isinstance(n, Obj):
        if not n.items:
            return "{}"
        inner = indent + INDENT
        fields = "".join(
            f"{inner}{_field(k, multi, inner, link_knob(v))}:{spaced(node(v, inner))},\n"
            for k, v, multi in n.items
        )
        return "{\n" + fields + indent + "}"
    if isinstance(n, Choice):
        return f"(if c.showMultiCluster then {node(n.multi, indent)} else {node(n.single, indent)})"
    if isinstance(n, Arr):
        runs: list[tuple[bool, list[Node]]] = []
        for element, multi in n.items:
            if runs and runs[-1][0] == multi:
                runs[-1][1].append(element)
            else:
                runs.append((multi, [element]))
        if not runs:
            return "[]"
        parts = []
        for multi, elements in runs:
            listed = _list(elements, indent)
            parts.append(f"(if c.showMultiCluster then {listed} else [])" if multi else listed)
        return " + ".join(parts)
    raise TypeError(n)


def _concatenation(n: Text, indent: str) -> str:
    """Literal text and knobs joined with `+`, one line of the string per line of jsonnet
    (`'p95_' + v.rateWindow + ' > ' + v.ttftP95WarningSeconds`). Not `%` formatting: jsonnet's
    std.format parses its format in jsonnet code, a hundred times slower than joining."""
    lines: list[list[str | Ref]] = [[]]
    for part in n.parts:
        if isinstance(part, Ref):
            lines[-1].append(part)
            continue
        first, *rest = part.split("\n")
        if first:
            lines[-1].append(first)
        for piece in rest:
            lines[-1].append("\n")
            lines.append([piece] if piece else [])
    rendered = []
    for pieces in lines:
        merged: list[str | Ref] = []
        for piece in pieces:
            if merged and isinstance(piece, str) and isinstance(merged[-1], str):
                merged[-1] += piece
            else:
                merged.append(piece)
        rendered.append(" + ".join(f"v.{p.name}" if isinstance(p, Ref) else string(p) for p in merged))
    rendered = [line for line in rendered if line]
    if len(rendered) == 1:
        return rendered[0]
    inner = indent + INDENT
    return "\n" + " +\n".join(inner + line for line in rendered)


def spaced(value: str) -> str:
    """A value after `key:`: on the same line, or on the lines below."""
    return value if value.startswith("\n") else " " + value


def _field(name: Node, multi: bool, indent: str, link: str | None = None) -> str:
    """A field name: plain, computed from a knob (`[v.clusterLabel]`), only with multi-cluster,
    or (a link) only where its knob is set."""
    if link and isinstance(name, Lit) and not multi:
        return f"[if c.{link} != '' then {string(name.value)}]"
    if isinstance(name, Lit) and not multi:
        return key(name.value)
    expr = string(name.value) if isinstance(name, Lit) else node(name, indent)
    return f"[if c.showMultiCluster then {expr}]" if multi else f"[{expr}]"


def _list(elements: list[Node], indent: str) -> str:
    inner = indent + INDENT
    return "[\n" + "".join(f"{inner}{node(e, inner)},\n" for e in elements) + indent + "]"
