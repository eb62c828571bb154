"""No import cycles between the modules of dbqueue, dbqueue_django and dbqueue_sa: a module's
imports (those under ``if TYPE_CHECKING:`` too, which a type checker follows) never lead back
to it. Cycles make the import order matter and hide which module owns what; the fronts had
one (models, queue, spec, ring_model and ring_queue importing each other)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dbqueue", "dbqueue_django", "dbqueue_sa")
#: Cycles allowed, each with its reason (as sorted tuples of module names).
ALLOWED: set[tuple[str, ...]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of ``known`` that ``path`` imports at its top level (in ifs and trys too,
    not inside functions, which run later)."""

    def visit(nodes: list[ast.stmt]) -> Iterator[str]:
        for node in nodes:
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name.split(".")
                    if path.name != "__init__.py":
                        package = package[:-1]
                    package = package[: len(package) - node.level + 1]
                    base = ".".join([*package, *([node.module] if node.module else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    yield sub if sub in known else base
            elif isinstance(node, ast.If | ast.Try):
                yield from visit(node.body)
                yield from visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    yield from visit(handler.body)

    tree = ast.parse(path.read_text(encoding="utf-8"))
    return (m for m in visit(tree.body) if m in known and m != name)


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(tuple(sorted([v, *group])))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_through_others() -> None:
    known = modules()
    graph = {name: set(imported(name, path, known)) for name, path in known.items()}
    assert [c for c in cycles(graph) if c not in ALLOWED] == []


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [("a", "b", "c")]
