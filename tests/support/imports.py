"""The import graph of the project's packages, read from the source: every import counts,
also one under `if TYPE_CHECKING:` or inside a function, since a loop there is one
refactoring away from an ImportError at startup."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Each code folder and the packages it holds.
ROOTS = (REPO / "generator", REPO / "exporters")


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path, root): path for root in ROOTS for path in root.rglob("*.py")}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that the file imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from . import x`
    # A package a module sits in is imported before it anyway (`from . import x` names it).
    return {m for m in found if m in known and m != name and not name.startswith(m + ".")}


def import_graph() -> dict[str, set[str]]:
    files = modules()
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import loop per module that starts one, found by depth-first search."""
    found, done = [], set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            found.append([*path[path.index(module) :], module])
            return
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return found
