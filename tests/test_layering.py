"""The layering of docs/architecture.md ("Packages and what lives where"), checked on the source.

Every .py file of the six library packages is parsed with `ast` (nothing is imported, so this runs in well
under a second); every `import`/`from ... import` of a project module counts, at the top of a file or inside a
function, `if TYPE_CHECKING:` blocks included. From them the module import graph is built, and two things are
asserted of it:

- no import cycle between modules (a function-level import that closes a circle is still a circle: it only
  moves the failure from import time to call time, and it hides which module is the lower one);
- no import from a lower layer to a higher one, by the layer map below.

Why `TYPE_CHECKING` imports are not exempt: the doc says "Imports go one way" and that `infra`, `envs`,
`robot_data` and `world_models` "never import" `imagination` or `policies` (and `envs` never `robot_data`),
with no exception for annotations, and a type-only import still ties the lower module's interface to the
higher one's (mypy follows it). Imports of a name given as a string (`importlib.import_module`: policies/base.py
loads a policy class by its dotted name) are not seen.
`from a.b import c` is an arrow to the module a.b.c if there is one, else to a.b; the package a, whose __init__
Python runs first, is not counted (else every package whose __init__ imports its own modules would be a circle).
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIBRARY = ("infra", "envs", "robot_data", "world_models", "policies", "imagination")  # parsed: setup.py's six packages
TOP = ("scripts", "bench")  # parsed only as targets: library code never imports them
SUBPACKAGES = ("imagination.eval", "imagination.rl", "imagination.loop")  # layers of their own inside imagination

# The layer map, from docs/architecture.md, "Packages and what lives where":
#   "`envs` builds on `infra`, which imports no other package of the project; `robot_data` on `envs`;
#   `world_models` and `policies` build on `robot_data` and `envs` (not on each other), `imagination` on all of
#   these, `scripts` and `bench` on everything. `infra`, `envs`, `robot_data` and `world_models` never import
#   `imagination` or `policies`, and `envs` never imports `robot_data` (an environment does not know what is
#   recorded from it).
#   Inside `imagination`, `eval/` and `rl/` build on the package's core, the modules directly in `imagination/`
#   (...), and not on each other; the core imports none of the three subpackages; `loop/` builds on both. Library
#   code never imports `scripts` or `bench`."
# A layer is a package, or one of imagination's subpackages ("imagination" is the package's core). A module may
# import its own layer and the layers listed here; nothing else. Within a layer only cycles are checked.
_BELOW_IMAGINATION = {"infra", "envs", "robot_data", "world_models", "policies"}
ALLOWED: dict[str, set[str]] = {
    "infra": set(),
    "envs": {"infra"},
    "robot_data": {"infra", "envs"},
    "world_models": {"infra", "envs", "robot_data"},
    "policies": {"infra", "envs", "robot_data"},
    "imagination": _BELOW_IMAGINATION,
    "imagination.eval": _BELOW_IMAGINATION | {"imagination"},
    "imagination.rl": _BELOW_IMAGINATION | {"imagination"},
    "imagination.loop": _BELOW_IMAGINATION | {"imagination", "imagination.eval", "imagination.rl"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    for sub in SUBPACKAGES:
        if module == sub or module.startswith(sub + "."):
            return sub
    return module.split(".")[0]


@functools.cache
def sources() -> dict[str, Path]:
    """{module name: file} of the library packages."""
    return {module_name(p): p for pkg in LIBRARY for p in sorted((REPO / pkg).rglob("*.py"))}


def _imported(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Dotted names an import statement may refer to: for `from a import b`, `a.b` (a module, or a name in a)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package (a package's __init__ is its own package)
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def _resolve(name: str, known: set[str]) -> str | None:
    """The project module `name` refers to: the longest known prefix (`robot_data.dataset.Episode` ->
    `robot_data.dataset`); a scripts/bench name maps to its package. None for a third-party or standard-library
    name."""
    if name.split(".")[0] in TOP:
        return name.split(".")[0]
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache
def import_graph() -> dict[str, dict[str, int]]:
    """{module: {imported project module: line of its first import in the module's file}}."""
    files = sources()
    known = set(files)
    graph: dict[str, dict[str, int]] = {m: {} for m in files}
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in _imported(module, path, node):
                target = _resolve(name, known)
                if target is not None and target != module:
                    graph[module][target] = min(graph[module].get(target, node.lineno), node.lineno)
    return graph


def where(module: str, target: str) -> str:
    """file:line of `module`'s first import of `target`."""
    return f"{sources()[module].relative_to(REPO)}:{import_graph()[module][target]}"


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle [a, b, ..., a] through each strongly connected set of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # the graph is a few hundred modules deep at most: recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_through(sorted(c)[0], set(c), graph) for c in components]


def _cycle_through(start: str, component: set[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """The shortest path start -> ... -> start inside `component` (breadth first)."""
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, {})):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if w in component and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # unreachable for a strongly connected set


def test_the_graph_is_read():
    """The parse finds the modules and their imports (else the checks below would pass on nothing)."""
    graph = import_graph()
    assert len(graph) > 100
    assert {"envs.libero_env", "robot_data.collection", "world_models.model", "policies.base", "imagination.imagine",
            "imagination.eval.jobs", "imagination.rl.training", "imagination.loop.run"} <= set(graph)
    assert "imagination.env" in graph["imagination.imagine"]  # a top-level import
    # a function-level one: from robot_data.dataset import ...
    assert "robot_data.dataset" in graph["world_models.object_state"]
    assert {layer(m) for m in graph} == set(ALLOWED)


def test_a_cycle_is_found_and_reported_as_a_path():
    """The cycle finder on a toy graph: a -> b -> c -> a and d -> e -> d, with e -> a and f hanging off."""
    graph = {"a": {"b": 1}, "b": {"c": 1, "f": 1}, "c": {"a": 1}, "d": {"e": 1}, "e": {"d": 1, "a": 1}, "f": {}}
    assert sorted(cycles(graph)) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycle():
    found = cycles(import_graph())
    lines = [" -> ".join(c) + "   (" + ", ".join(where(a, b) for a, b in zip(c, c[1:])) + ")" for c in found]
    assert not found, "import cycles between modules:\n  " + "\n  ".join(lines)


def test_imports_go_down_the_layers():
    """No arrow from a lower layer up to a higher one (the map and the doc's wording are at the top of this file)."""
    bad = [f"{where(module, target)}: {module} ({layer(module)}) imports {target} ({layer(target)})"
           for module, targets in sorted(import_graph().items()) for target in sorted(targets)
           if layer(target) != layer(module) and layer(target) not in ALLOWED[layer(module)]]
    assert not bad, "imports against docs/architecture.md's layering:\n  " + "\n  ".join(bad)
