"""No module under exporters/ imports itself through others: every import counts, also one
under `if TYPE_CHECKING:` or inside a function, since a loop there is one refactoring away
from an ImportError at startup."""

from __future__ import annotations

import ast
from pathlib import Path

from .helpers import REPO

EXPORTERS = REPO / "exporters"


def module_name(path: Path) -> str:
    parts = path.relative_to(EXPORTERS).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The modules of `modules` that the file imports, wherever the import statement stands."""
    name = module_name(path)
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
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(path): path for path in EXPORTERS.rglob("*.py")}
    return {name: imported_modules(path, set(files)) for name, path in files.items()}


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


def test_the_graph_sees_the_exporters_imports() -> None:
    graph = import_graph()
    assert "vllm_log_exporter.counts" in graph["vllm_log_exporter.lifecycle"]
    assert "vllm_obs_contract" in graph["vllm_log_exporter.contract"]
    assert "vllm_probe.outcome" in graph["vllm_probe.metrics"]


def test_a_loop_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_exporters_imports_itself_through_others() -> None:
    assert cycles(import_graph()) == []
