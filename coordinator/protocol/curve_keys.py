"""CurveZMQ key files, read and written the same way by the coordinator and its
clients: ``keygen`` writes a keypair in ZeroMQ's certificate format, ``NAME.key``
(public key only, safe to hand out) and ``NAME.key_secret`` (public + secret,
mode 0600 from the start, never overwritten); ``load_keypair`` and
``load_public_key`` read them. How the server uses them (the allow-list, the ZAP
handler) is ``coordinator/security.py``.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import zmq
import zmq.auth

#: Mode of a new state directory and of a secret key file: owner only.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
PUBLIC_FILE_MODE = 0o644


class SecurityConfigError(ValueError):
    """A key file, allow-list or state directory that cannot be used (message names it)."""


def keygen(out_dir: str | Path, name: str = "coordinator") -> tuple[Path, Path]:
    """Write NAME.key and NAME.key_secret into out_dir; returns (public, secret) paths.

    1. The directory is created 0700 if missing.
    2. Both files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and their
       final mode (secret 0600), so the secret is never readable by others and
       an existing file or a planted symlink is never written through.
    3. A failure after the secret was created removes what this call created.
    """
    out = Path(out_dir)
    out.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    public, secret = (out / f"{name}.key", out / f"{name}.key_secret")
    if public.exists() or secret.exists() or public.is_symlink() or secret.is_symlink():
        raise SecurityConfigError(f"{public} or {secret} already exists; refusing to overwrite a key")
    pub, sec = zmq.curve_keypair()
    created: list[Path] = []
    try:
        _write_key(secret, PRIVATE_FILE_MODE, "Secret", pub, sec)
        created.append(secret)
        _write_key(public, PUBLIC_FILE_MODE, "Public", pub, None)
        created.append(public)
    except FileExistsError as exc:
        for path in created:
            path.unlink()
        raise SecurityConfigError(f"{exc.filename} already exists; refusing to overwrite a key") from exc
    except BaseException:
        for path in created:
            path.unlink()
        raise
    return public, secret


def _write_key(path: Path, mode: int, kind: str, public: bytes, secret: bytes | None) -> None:
    """One certificate file in ZeroMQ's format (what ``zmq.auth.load_certificate`` reads)."""
    lines = [
        f"#   ****  Generated on {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S} UTC by cr-coordinator  ****",
        f"#   ZeroMQ CURVE **{kind}** Certificate",
        "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions." if secret else "",
        "",
        "metadata",
        "curve",
        f'    public-key = "{public.decode()}"',
    ]
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())


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
