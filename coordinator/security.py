"""The coordinator's CURVE server side: the client allow-list, the ZAP handler
and the state directory check. The key files themselves are
``coordinator/protocol/curve_keys.py`` (shared with the clients).

How authentication works (ZeroMQ's CURVE mechanism + ZAP):

1. ``cr-coordinator keygen --out DIR [--name NAME]`` writes a keypair:
   ``NAME.key`` (public key only, safe to hand out) and ``NAME.key_secret``
   (public + secret), created with mode 0600 (never readable by others, not
   even for an instant) and never overwritten. Make one for the server and
   one per client.
2. The server runs with ``--curve-secret-key server.key_secret`` and
   ``--curve-allow PATH`` (a public ``.key`` file, or a directory of them).
   Its ROUTER socket is a CURVE server in the ZAP domain :data:`ZAP_DOMAIN`
   with domain enforcement on (:func:`configure_curve_server`); a ZAP
   authenticator thread (:class:`CurveAuthenticator`, owned by the process)
   accepts a handshake only when the client's public key is in the allow-list.
   Without a ZAP handler (the thread stopped or died) every handshake fails:
   authentication fails closed, never open.
3. A client (``CoordinatorClient(..., curve_server_key=SERVER_PUBLIC,
   curve_keypair=(PUBLIC, SECRET))``) must know the server's public key.
   A client whose key is not allowed never completes the handshake: nothing
   it sends is delivered, so it cannot register or read anything; its
   requests end in CoordinatorUnavailable after its timeout.

The allow-list is read once at start-up; restart to change it.

The state directory is checked by :func:`prepare_state_dir` before the store
opens it: created 0700, never a symbolic link, owned by this user, not
writable by group or others.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator

from coordinator.protocol.curve_keys import PRIVATE_DIR_MODE, SecurityConfigError, load_public_key

log = logging.getLogger(__name__)


#: The ZAP domain of the coordinator's CURVE socket. With a domain set and
#: domain enforcement on, libzmq refuses a handshake when no ZAP handler answers
#: (fail closed) instead of accepting any client key (fail open).
ZAP_DOMAIN = "coordinator"


def prepare_state_dir(path: str | Path) -> Path:
    """Create the state directory 0700 if missing, then check it is safe to trust.

    Refused (SecurityConfigError naming the directory): a symbolic link (the
    state could be redirected anywhere), a directory owned by another user, or
    one writable by group or others (anyone could plant or replace a segment).
    Readable by group or others is allowed with a WARNING (the state holds
    group names and offsets, no secrets). Returns the path.
    """
    p = Path(path)
    if p.is_symlink():
        raise SecurityConfigError(f"state dir {p} is a symbolic link; give the real directory")
    p.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        p.mkdir(mode=PRIVATE_DIR_MODE)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise SecurityConfigError(f"cannot open state dir {p}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if st.st_uid != os.geteuid():
        raise SecurityConfigError(
            f"state dir {p} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}); "
            "use a directory of your own"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SecurityConfigError(
            f"state dir {p} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); chmod 700 {p}"
        )
    if st.st_mode & (stat.S_IRGRP | stat.S_IROTH):
        log.warning(
            "state dir %s is readable by group or others (mode %o); chmod 700 recommended", p, stat.S_IMODE(st.st_mode)
        )
    return p


def configure_curve_server(sock: zmq.Socket[bytes], public_key: bytes, secret_key: bytes) -> None:
    """Make ``sock`` a CURVE server that fails closed (call before bind).

    The ZAP domain plus ``ZAP_ENFORCE_DOMAIN`` make libzmq refuse a handshake
    when no ZAP handler is bound; without them it would accept any client
    key once the authenticator is gone.
    """
    sock.curve_secretkey = secret_key
    sock.curve_publickey = public_key
    sock.curve_server = True
    sock.zap_domain = ZAP_DOMAIN.encode()
    try:
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
    except zmq.ZMQError as exc:
        raise SecurityConfigError(
            f"this libzmq ({zmq.zmq_version()}) cannot enforce the ZAP domain ({exc}); CURVE would fail open "
            "without the authenticator: use the libzmq bundled with pyzmq"
        ) from exc


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

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], allowed: set[bytes]) -> None:
        self._auth = ThreadAuthenticator(context)
        self._allowed = allowed

    def start(self) -> None:
        self._auth.start()
        self._auth.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=_AllowList(self._allowed))
        log.info("CURVE authentication on: %d allowed client key(s)", len(self._allowed))

    def stop(self) -> None:
        self._auth.stop()
