"""The operator talks to Kafka only through the client seam: no module of
``cr_consumer/operator`` imports a Kafka library (kafka-python's ``kafka`` or
confluent-kafka's ``confluent_kafka``), at module level or inside a function."""

from __future__ import annotations

import ast

from support.paths import REPO

LIBRARIES = ("kafka", "confluent_kafka")


def _imports(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_no_operator_module_imports_a_kafka_library():
    found = {}
    for path in sorted((REPO / "cr_consumer" / "operator").glob("*.py")):
        bad = [name for name in _imports(ast.parse(path.read_text())) if name.split(".")[0] in LIBRARIES]
        if bad:
            found[path.name] = bad
    assert found == {}
