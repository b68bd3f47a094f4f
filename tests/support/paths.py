"""Paths of the repository, for tests that run its scripts or read its files."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (holds pyproject.toml).
REPO = Path(__file__).resolve().parents[2]
#: The tests' root (holds conftest.py, support/ and fuzz/).
TESTS = REPO / "tests"
EXAMPLES = REPO / "examples"
