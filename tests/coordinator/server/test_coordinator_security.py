"""CURVE authentication and the start-up checks of cr-coordinator."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coordinator.client import CoordinatorClient
from coordinator.launcher import CoordinatorProcess
from coordinator.protocol import curve_keys
from coordinator.protocol.wire.errors import CoordinatorUnavailable


@pytest.fixture
def keys(tmp_path):
    out = {}
    for name in ("server", "good", "bad"):
        out[name] = curve_keys.keygen(tmp_path / "keys" / name, name)
    allow = tmp_path / "allow"
    allow.mkdir()
    (allow / "good.key").write_bytes(out["good"][0].read_bytes())
    return out, allow


def test_curve_allowed_key_works_and_unknown_key_is_refused(tmp_path, keys, names):
    k, allow = keys
    server_public = curve_keys.load_public_key(k["server"][0])
    good = curve_keys.load_keypair(k["good"][1])
    bad = curve_keys.load_keypair(k["bad"][1])
    proc = CoordinatorProcess(
        tmp_path / "state",
        extra_args=["--curve-secret-key", str(k["server"][1]), "--curve-allow", str(allow)],
        client_kwargs={"curve_server_key": server_public, "curve_keypair": good},
    )
    proc.start()
    group = names.group()
    try:
        with CoordinatorClient(proc.endpoint, timeout=10, curve_server_key=server_public, curve_keypair=good) as c:
            assert c.register(group, 0, "op") == ["op"]
            c.put_initial_offsets(group, {("t", 0): 3})
        with CoordinatorClient(
            proc.endpoint, timeout=1.5, try_timeout=0.5, curve_server_key=server_public, curve_keypair=bad
        ) as intruder:
            with pytest.raises(CoordinatorUnavailable):
                intruder.register(group, 0, "intruder")
            with pytest.raises(CoordinatorUnavailable):
                intruder.get_initial_offsets(group)
        # no CURVE at all
        with (
            CoordinatorClient(proc.endpoint, timeout=1.5, try_timeout=0.5) as plain,
            pytest.raises(CoordinatorUnavailable),
        ):
            plain.members(group)
        with CoordinatorClient(proc.endpoint, timeout=10, curve_server_key=server_public, curve_keypair=good) as c:
            assert c.members(group) == ["op"]  # the intruder registered nothing
            assert c.get_initial_offsets(group) == {("t", 0): 3}
        assert proc.running
        assert "not in the allow-list" in proc.log_path.read_text()
    finally:
        proc.terminate()


def _cli(*args, timeout=20):
    return subprocess.run([sys.executable, "-m", "coordinator", *args], capture_output=True, text=True, timeout=timeout)


def test_non_loopback_bind_is_refused_without_curve(tmp_path):
    r = _cli("--bind", "tcp://0.0.0.0:5999", "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 2
    assert "--allow-remote" in r.stderr
    assert "not a loopback address" in r.stderr


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--retention", "soon"], "--retention"),
        (["--curve-secret-key", "x.key_secret"], "--curve-allow"),
        (["--http", "nowhere"], "--http"),
        (["--bind", "udp://127.0.0.1:1"], "--bind"),
        (["--log-level", "LOUD"], "--log-level"),
    ],
)
def test_bad_arguments_fail_at_start_naming_the_flag(tmp_path, args, flag):
    r = _cli("--state-dir", str(tmp_path / "s"), *args)
    assert r.returncode == 2
    assert flag in r.stderr


def test_missing_key_file_fails_clearly(tmp_path):
    r = _cli(
        "--state-dir", str(tmp_path / "s"), "--curve-secret-key", str(tmp_path / "nope"), "--curve-allow", str(tmp_path)
    )
    assert r.returncode == 2
    assert "does not exist" in r.stderr


def test_keygen_writes_a_keypair_and_refuses_to_overwrite(tmp_path):
    r = _cli("keygen", "--out", str(tmp_path / "k"), "--name", "member1")
    assert r.returncode == 0, r.stderr
    public, _secret = curve_keys.load_keypair(tmp_path / "k" / "member1.key_secret")
    assert curve_keys.load_public_key(tmp_path / "k" / "member1.key") == public
    assert (tmp_path / "k" / "member1.key_secret").stat().st_mode & 0o077 == 0
    r = _cli("keygen", "--out", str(tmp_path / "k"), "--name", "member1")
    assert r.returncode == 2
    assert "refusing to overwrite" in r.stderr
