"""CurveZMQ keys and the client allow-list of the coordinator.

How authentication works (ZeroMQ's CURVE mechanism + ZAP):

1. ``cr-coordinator keygen --out DIR [--name NAME]`` writes a keypair:
   ``NAME.key`` (public key only, safe to hand out) and ``NAME.key_secret``
   (public + secret, mode 0600). Make one for the server and one per client.
2. The server runs with ``--curve-secret-key server.key_secret`` and
   ``--curve-allow PATH`` (a public ``.key`` file, or a directory of them).
   Its ROUTER socket is a CURVE server; a ZAP authenticator thread
   (:class:`CurveAuthenticator`, owned by the process) accepts a handshake
   only when the client's public key is in the allow-list.
3. A client (``CoordinatorClient(..., curve_server_key=SERVER_PUBLIC,
   curve_keypair=(PUBLIC, SECRET))``) must know the server's public key.
   A client whose key is not allowed never completes the handshake: nothing
   it sends is delivered, so it cannot register or read anything; its
   requests end in CoordinatorUnavailable after its timeout.

The allow-list is read once at start-up; restart to change it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

log = logging.getLogger(__name__)


class SecurityConfigError(ValueError):
    """A key file or allow-list that cannot be used (message names the file)."""


def keygen(out_dir: str | Path, name: str = "coordinator") -> tuple[Path, Path]:
    """Write NAME.key and NAME.key_secret into out_dir; returns (public, secret) paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    public, secret = (out / f"{name}.key", out / f"{name}.key_secret")
    if public.exists() or secret.exists():
        raise SecurityConfigError(f"{public} or {secret} already exists; refusing to overwrite a key")
    pub, sec = zmq.auth.create_certificates(str(out), name)
    os.chmod(sec, 0o600)
    return Path(pub), Path(sec)


def load_keypair(path: str | Path) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys from a ``.key_secret`` file."""
    public, secret = _load(path)
    if not secret:
        raise SecurityConfigError(f"{path} holds no secret key (use the .key_secret file from keygen)")
    return public, secret


def load_public_key(path: str | Path) -> bytes:
    """The z85 public key of a ``.key`` or ``.key_secret`` file."""
    return _load(path)[0]


def _load(path: str | Path) -> tuple[bytes, bytes | None]:
    p = Path(path)
    if not p.is_file():
        raise SecurityConfigError(f"key file {p} does not exist")
    try:
        public, secret = zmq.auth.load_certificate(str(p))
    except (ValueError, OSError) as exc:
        raise SecurityConfigError(f"cannot read a CURVE key from {p}: {exc}") from exc
    if not public:
        raise SecurityConfigError(f"{p} holds no public key")
    return public, secret


def load_allow_list(path: str | Path) -> set[bytes]:
    """Allowed client public keys: one ``.key`` file, or every ``*.key`` file of a directory."""
    p = Path(path)
    if p.is_dir():
        keys = {load_public_key(f) for f in sorted(p.glob("*.key"))}
        if not keys:
            raise SecurityConfigError(f"allow-list directory {p} contains no *.key public key files")
        return keys
    if p.is_file():
        return {load_public_key(p)}
    raise SecurityConfigError(f"allow-list {p} is neither a key file nor a directory")


class _AllowList:
    def __init__(self, keys: set[bytes]) -> None:
        self._keys = frozenset(keys)

    def callback(self, domain: str, key: bytes) -> bool:
        allowed = key in self._keys
        if not allowed:
            log.warning("CURVE handshake refused: client key %s is not in the allow-list", key.decode()[:12] + "...")
        return allowed


class CurveAuthenticator:
    """The ZAP handler thread for a CURVE server; start before binding, stop at shutdown."""

    def __init__(self, context: zmq.Context, allowed: set[bytes]) -> None:
        self._auth = ThreadAuthenticator(context)
        self._allowed = allowed

    def start(self) -> None:
        self._auth.start()
        self._auth.configure_curve_callback(domain="*", credentials_provider=_AllowList(self._allowed))
        log.info("CURVE authentication on: %d allowed client key(s)", len(self._allowed))

    def stop(self) -> None:
        self._auth.stop()
