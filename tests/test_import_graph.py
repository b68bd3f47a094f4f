"""The import graph of ``cr_consumer`` and ``coordinator`` has no cycle.

The graph is built from the source (``ast``), not by importing: every ``import``
and ``from ... import`` statement of a module counts, at module level, inside a
function, or under ``if TYPE_CHECKING`` (a cycle that only type checking sees is
still two modules that cannot be understood one without the other). An edge goes
to the module named: ``from a.b import c`` is an edge to ``a.b.c`` when that is a
module, else to ``a.b`` (its ``__init__``). Imports outside the two packages are
left out.

The seam between the two packages is one-way and narrow: ``cr_consumer`` imports
from ``coordinator`` only what both processes speak and share
(``coordinator.protocol``; ``coordinator.kafka``, the raw Kafka requests both sides
send to end transactions and read markers), the client (``coordinator.client``) and
the process launcher (``coordinator.launcher``); those import nothing else of ``coordinator``,
and ``coordinator.protocol`` imports only itself. A module named in a string and
imported by name (``importlib``) counts as an import for this rule.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from support.paths import REPO

PACKAGES = ("cr_consumer", "coordinator")


def module_name(path: Path) -> str:
    """``coordinator/server/loop.py`` -> ``coordinator.server.loop``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name."""
    return {module_name(p): p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))}


def _imported(node: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """The dotted names one import statement brings in (``from`` imports: base and base.name)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        if node.level:  # relative: from the module's package, up level - 1 more
            package = module.split(".") if is_package else module.split(".")[:-1]
            base_parts = package[: len(package) - (node.level - 1)]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:
            yield f"{base}.{alias.name}"
            yield base


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (each edge to the most specific module named)."""
    modules = project_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = list(_imported(node, name, is_package))
            if isinstance(node, ast.ImportFrom):
                # pairs (base.name, base): the submodule when there is one, else the base
                for full, base in zip(names[::2], names[1::2]):
                    target = full if full in modules else base
                    if target in modules and target != name:
                        graph[name].add(target)
            else:
                for imported in names:
                    # ``import a.b.c`` binds a and runs a.b.c: the deepest project module named
                    parts = imported.split(".")
                    for n in range(len(parts), 0, -1):
                        candidate = ".".join(parts[:n])
                        if candidate in modules:
                            if candidate != name:
                                graph[name].add(candidate)
                            break
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (the cycles' members)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module (breadth-first, inside the component)."""
    start, members = component[0], set(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
                if w not in parents:
                    parents[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def describe(graph: dict[str, set[str]]) -> list[str]:
    """One line per cycle: its members and one shortest cycle through them."""
    return [f"{len(c)} modules {c}: e.g. {' -> '.join(shortest_cycle(graph, c))}" for c in strongly_connected(graph)]


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert len(graph) > 100, "the packages were not found"
    assert "coordinator.server.loop" in graph
    # a module-level, a function-level and a relative import are all edges somewhere in the tree
    assert sum(len(targets) for targets in graph.values()) > 200


def test_cycle_detection_names_the_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}}
    assert strongly_connected(graph) == [["a", "b", "c"], ["e", "f"]]
    assert describe(graph) == [
        "3 modules ['a', 'b', 'c']: e.g. a -> b -> c -> a",
        "2 modules ['e', 'f']: e.g. e -> f -> e",
    ]


def test_relative_and_function_level_imports_are_edges(tmp_path):
    tree = ast.parse(
        "from .b import x\n\ndef f():\n    from ..c import d\n    import coordinator.protocol.wire.errors\n"
    )
    found = [
        list(_imported(node, "p.q.a", False))
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    assert found == [["p.q.b.x", "p.q.b"], ["p.c.d", "p.c"], ["coordinator.protocol.wire.errors"]]


def test_no_import_cycle():
    graph = import_graph()
    cycles = describe(graph)
    assert not cycles, (
        "import cycles (break each with a Protocol at the seam or by moving the shared part):\n" + "\n".join(cycles)
    )


#: What ``cr_consumer`` may import from ``coordinator`` (a package and its submodules).
MEMBER_SIDE = ("coordinator.protocol", "coordinator.client", "coordinator.launcher", "coordinator.kafka")
#: Modules ``cr_consumer`` names in a string and imports by name, with the reason.
#: ``crkafka status`` is the coordinator's own command line, reached through
#: ``crkafka``'s table of sub-commands (cr_consumer/cli/main.py); it runs in its own
#: process, never inside a member.
NAMED_BY_STRING = {("cr_consumer.cli.main", "coordinator.cli.status")}


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def named_modules(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(module, project module) for every string constant of a module that is exactly a project module's name."""
    modules = project_modules()
    found = set()
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in graph
                and node.value != name
                and "." in node.value
            ):
                found.add((name, node.value))
    return found


def crossing(
    graph: dict[str, set[str]], sources: tuple[str, ...], allowed: tuple[str, ...], into: str = "coordinator"
) -> list[str]:
    """The edges from a module within ``sources`` to a module of package ``into`` not within ``allowed``."""
    return sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if within(m, sources)
        for t in targets
        if within(t, (into,)) and not within(t, allowed)
    )


def test_member_side_imports_only_the_protocol_the_client_and_the_launcher():
    wrong = crossing(import_graph(), ("cr_consumer",), MEMBER_SIDE)
    assert not wrong, (
        "cr_consumer imports coordinator internals (move the shared part to coordinator.protocol):\n" + "\n".join(wrong)
    )


def test_what_the_member_side_imports_stays_on_the_member_side():
    graph = import_graph()
    wrong = crossing(graph, MEMBER_SIDE, MEMBER_SIDE)
    assert not wrong, "coordinator.protocol, .client or .launcher import coordinator internals:\n" + "\n".join(wrong)
    protocol = ("coordinator.protocol",)
    wrong = crossing(graph, protocol, protocol) + crossing(graph, protocol, (), into="cr_consumer")
    assert not wrong, "coordinator.protocol imports outside itself:\n" + "\n".join(wrong)


def test_modules_imported_by_name_are_known():
    named = {
        (m, t)
        for m, t in named_modules(import_graph())
        if within(m, ("cr_consumer",)) and within(t, ("coordinator",)) and not within(t, MEMBER_SIDE)
    }
    assert named == NAMED_BY_STRING, (
        "cr_consumer names coordinator internals in strings (imported by name?): "
        f"{sorted(named - NAMED_BY_STRING)}; stale entries: {sorted(NAMED_BY_STRING - named)}"
    )


def test_the_seam_rule_names_what_it_refuses():
    graph = {
        "cr_consumer.a": {
            "coordinator.protocol.wire.errors",
            "coordinator.client",
            "coordinator.region.state",
            "coordinator",
            "cr_consumer.b",
        },
        "coordinator.protocolx": {"coordinator.server.loop"},
    }
    assert crossing(graph, ("cr_consumer",), MEMBER_SIDE) == [
        "cr_consumer.a -> coordinator",
        "cr_consumer.a -> coordinator.region.state",
    ]
    assert crossing(graph, MEMBER_SIDE, MEMBER_SIDE) == []  # protocolx is not coordinator.protocol
