"""`crkafka run` / `crkafka member` refuse bad settings at start-up with a clear message (exit 2)."""

from __future__ import annotations

import subprocess
import sys

from support.paths import REPO as ROOT


def crkafka(*args: str, env_bootstrap: bool = True) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ)
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    return subprocess.run(
        [sys.executable, "-m", "cr_consumer.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )


def test_run_refuses_a_missing_pipeline_module():
    proc = crkafka("run", "no_such_pipeline_module", "--bootstrap", "127.0.0.1:1")
    assert proc.returncode == 2
    assert "no_such_pipeline_module" in proc.stderr
    assert "not found" in proc.stderr


def test_run_refuses_a_module_without_build(tmp_path):
    module = tmp_path / "nobuild.py"
    module.write_text("X = 1\n")
    proc = crkafka("run", str(module), "--bootstrap", "127.0.0.1:1")
    assert proc.returncode == 2
    assert "has no build(ctx)" in proc.stderr


def test_member_needs_a_bootstrap_address():
    proc = crkafka("member", "examples/wordcount.py", "--coordinator", "tcp://127.0.0.1:1")
    assert proc.returncode == 2
    assert "--bootstrap" in proc.stderr
