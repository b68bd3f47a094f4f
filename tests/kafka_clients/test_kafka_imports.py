"""Only the Kafka package talks to a Kafka library: no module of ``cr_consumer``
outside ``cr_consumer/kafka`` imports kafka-python's ``kafka`` or confluent-kafka's
``confluent_kafka``, at module level or inside a function. The operator, the
runtime and the Spark source reach Kafka through the client seam
(``cr_consumer/kafka/client.py``) and the few kafka-python helpers beside it.

Two packages are exceptions, each for its reason (:data:`EXCEPTIONS`)."""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import REPO

LIBRARIES = ("kafka", "confluent_kafka")
PACKAGE = REPO / "cr_consumer"
#: Packages allowed to import a Kafka library, and why.
EXCEPTIONS = {
    "testing": "test and example helpers create topics and produce records (admin client, producer): the seam "
    "is a consumer",
    "drill": "the drills inspect and disturb a live group from outside it (admin client), as an operator's "
    "tooling would, not as a member",
}


def _imports(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _kafka_imports(paths: list[Path]) -> dict[str, list[str]]:
    found = {}
    for path in paths:
        bad = [name for name in _imports(ast.parse(path.read_text())) if name.split(".")[0] in LIBRARIES]
        if bad:
            found[str(path.relative_to(PACKAGE))] = bad
    return found


def test_no_module_outside_the_kafka_package_imports_a_kafka_library():
    allowed = {"kafka", *EXCEPTIONS}
    paths = [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] not in allowed]
    assert _kafka_imports(paths) == {}


def test_the_exceptions_still_need_to_be_exceptions():
    for package in EXCEPTIONS:
        assert _kafka_imports(sorted((PACKAGE / package).rglob("*.py"))), f"cr_consumer/{package} needs no exception"
