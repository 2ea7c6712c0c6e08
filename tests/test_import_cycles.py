"""runtime/ has no import cycles.

Every ``import`` of a runtime module counts: at module level and inside functions (a late import
run once a job is under way closes a circle just as well, it only hides it until then), in
``try``/``if`` blocks too. Imports under ``if TYPE_CHECKING:`` do not count (they never run).
Importing ``a.b.c`` also imports the packages ``a`` and ``a.b``, so those are edges too, except a
module's own enclosing packages (Python has them initialised, or initialising, already).
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "runtime"
TOP = "streamjob.runtime"


def _modules(root: pathlib.Path) -> dict[str, tuple[pathlib.Path, bool]]:
    """Dotted name (relative to the runtime package) -> (file, whether it is a package's __init__)."""
    mods = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods[".".join(parts)] = (path, is_pkg)
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST):
    """Every import statement under ``node`` except those in ``if TYPE_CHECKING:`` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for n in child.orelse:
                yield from _imports_of(n)
        else:
            yield from _imports(child)


def _imports_of(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    mods = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        here = name.split(".") if name else []
        package = here if is_pkg else here[:-1]
        targets: list[list[str]] = []
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                    full = base + (node.module.split(".") if node.module else [])
                elif (node.module or "").startswith(TOP):
                    full = node.module.split(".")[2:]
                else:
                    continue
                targets.append(full)
                targets.extend(full + [a.name] for a in node.names)  # `from pkg import submodule`
            else:
                targets.extend(a.name.split(".")[2:] for a in node.names if a.name.startswith(TOP + "."))
        deps: set[str] = set()
        for t in targets:
            for i in range(1, len(t) + 1):
                m = ".".join(t[:i])
                if m in mods and m != name and not (name + ".").startswith(m + "."):
                    deps.add(m)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None (depth-first search, colouring nodes)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_the_checker_finds_a_cycle(tmp_path):
    pkg = tmp_path / "runtime"
    (pkg / "task").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "task" / "__init__.py").write_text("")
    (pkg / "task" / "a.py").write_text("from .b import B\n")
    (pkg / "task" / "b.py").write_text("def f():\n    from streamjob.runtime.task import a\n")
    (pkg / "task" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n")
    graph = import_graph(pkg)
    assert graph["task.c"] == set()  # TYPE_CHECKING imports never run
    assert find_cycle(graph) == ["task.a", "task.b", "task.a"]


def test_runtime_has_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle in runtime/: " + " -> ".join(cycle or [])


def _package_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Top-level package (or module) -> those it imports from, its own excluded."""
    edges: dict[str, set[str]] = {}
    for module, deps in graph.items():
        a = module.split(".")[0]
        edges.setdefault(a, set()).update(d.split(".")[0] for d in deps if d.split(".")[0] != a)
    return edges


def test_the_layers_keep_apart():
    """The rules that keep each piece testable alone (../shared/design/ARCHITECTURE.md): a job definition
    does not know where it runs (api/ finds its executor as an entry point, never importing cluster/);
    partitioning (keygroups) sits below both the network and the state, which do not import each other;
    the REST server does not import the job manager that starts it; configuration and URL checks import
    nothing of the runtime."""
    graph = import_graph()
    edges = _package_edges(graph)
    assert "cluster" not in edges["api"], sorted(m for m in graph if m.startswith("api") and any(
        d.startswith("cluster") for d in graph[m]))
    assert "state" not in edges["network"] and "network" not in edges["state"]
    for bottom in ("keygroups", "config", "urls"):
        assert edges.get(bottom, set()) <= {"urls"}, (bottom, edges.get(bottom))
    assert "cluster.jobmanager" not in graph["cluster.rest"] and "cluster.jobmanager" not in graph["cluster.metrics"]
