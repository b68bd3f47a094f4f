"""Safe defaults of the coordinator's control plane: the HTTP bind rule, key and
state-dir modes, the lock before ``ready``, and a CURVE socket that fails closed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from coordinator import security
from coordinator.client import CoordinatorClient
from coordinator.launcher import CoordinatorProcess
from coordinator.protocol import curve_keys
from coordinator.protocol.wire.errors import CoordinatorUnavailable
from coordinator.server.api import CurveServerConfig
from coordinator.server.loop import CoordinatorServer
from coordinator.store.state_store import StateStore


def _cli(*args, timeout=20):
    return subprocess.run([sys.executable, "-m", "coordinator", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("http", ["0.0.0.0:0", "[::]:0", "example.invalid:9570"])
def test_non_loopback_http_is_refused_without_allow_remote(tmp_path, http):
    r = _cli("--state-dir", str(tmp_path / "s"), "--http", http)
    assert r.returncode == 2
    assert "--http" in r.stderr
    assert "not a loopback address" in r.stderr
    assert "--allow-remote" in r.stderr
    assert not (tmp_path / "s").exists()  # refused before anything was created


def test_non_loopback_http_starts_with_allow_remote(tmp_path):
    proc = CoordinatorProcess(tmp_path / "state", http="0.0.0.0:0", extra_args=["--allow-remote"])
    proc.start()
    try:
        assert proc.http_address is not None
        assert proc.http_address.startswith("0.0.0.0:")
    finally:
        proc.terminate()


def test_keygen_creates_the_secret_file_0600_not_chmod_after(tmp_path, monkeypatch):
    # With chmod out of the way, only the mode given at creation protects the secret.
    monkeypatch.setattr(os, "chmod", lambda *a, **k: None)
    old = os.umask(0o022)
    try:
        public, secret = curve_keys.keygen(tmp_path / "keys", "member")
    finally:
        os.umask(old)
    assert secret.stat().st_mode & 0o777 == 0o600
    assert public.stat().st_mode & 0o077 in (0o044, 0o000)  # a public key may be readable
    pub, sec = curve_keys.load_keypair(secret)
    assert curve_keys.load_public_key(public) == pub
    assert len(sec) == 40
    with pytest.raises(curve_keys.SecurityConfigError, match="refusing to overwrite"):
        curve_keys.keygen(tmp_path / "keys", "member")


def test_state_dir_is_created_0700(tmp_path):
    proc = CoordinatorProcess(tmp_path / "new" / "state")
    proc.start()
    try:
        assert (tmp_path / "new" / "state").stat().st_mode & 0o777 == 0o700
    finally:
        proc.terminate()


def test_state_dir_symlink_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    r = _cli("--state-dir", str(link))
    assert r.returncode == 2
    assert "symbolic link" in r.stderr
    assert str(link) in r.stderr
    assert list(real.iterdir()) == []


def test_state_dir_owned_by_another_user_is_refused(tmp_path):
    if os.geteuid() == 0:  # root can give a directory away; anyone else uses one root owns
        other, owner = tmp_path / "other", 65534
        other.mkdir(mode=0o700)
        os.chown(other, owner, owner)
    else:
        other, owner = Path(sys.prefix).resolve().root, 0
        other = Path(other)
    before = sorted(other.iterdir())
    r = _cli("--state-dir", str(other))
    assert r.returncode == 2
    assert f"owned by uid {owner}" in r.stderr
    assert sorted(other.iterdir()) == before


def test_state_dir_writable_by_others_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    r = _cli("--state-dir", str(shared))
    assert r.returncode == 2
    assert "writable by group or others" in r.stderr


def test_second_coordinator_on_a_locked_state_dir_never_prints_ready(tmp_path):
    first = CoordinatorProcess(tmp_path / "state")
    first.start()
    try:
        r = _cli("--bind", "tcp://127.0.0.1:*", "--state-dir", str(tmp_path / "state"))
        assert r.returncode != 0
        assert "ready" not in r.stdout
        assert "in use by another coordinator" in r.stderr
        with CoordinatorClient(first.endpoint, timeout=5) as c:
            c.ping()  # the first one is untouched
    finally:
        first.terminate()


def test_curve_fails_closed_when_the_authenticator_stops(tmp_path):
    ctx = zmq.Context()
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    auth = security.CurveAuthenticator(ctx, {client_public})
    auth.start()
    store = StateStore(tmp_path / "state")
    server = CoordinatorServer(
        store,
        "tcp://127.0.0.1:*",
        context=ctx,
        curve=CurveServerConfig(public_key=server_public, secret_key=server_secret),
    )
    endpoint = server.start()
    kwargs = {"curve_server_key": server_public, "curve_keypair": (client_public, client_secret)}
    try:
        assert server.loaded.wait(10), "the server did not load its state"
        with CoordinatorClient(endpoint, timeout=5, **kwargs) as c:
            c.ping()  # an allowed key gets in while the authenticator runs
        auth.stop()
        # No ZAP handler any more: even an allowed key must not get in.
        with (
            CoordinatorClient(endpoint, timeout=1.5, try_timeout=0.5, **kwargs) as c,
            pytest.raises(CoordinatorUnavailable),
        ):
            c.ping()
    finally:
        server.stop()
        store.close()
        ctx.term()
