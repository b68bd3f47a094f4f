"""How the coordinator connects to the clusters its Kafka sinks write to, when it resolves their
transactions itself (``coordinator/region/txn_worker.py``).

The cluster comes from the members (``Transactions.bootstrap``); what a cluster that needs
authentication also needs comes from the coordinator's own configuration, never from the
wire, so no secret crosses the region protocol or lands in the region's document:

1. ``cr-coordinator --resolve-kafka-config FILE``: a JSON object of kafka-python client settings
   (``security_protocol``, ``ssl_cafile``, ``sasl_mechanism``, ``sasl_plain_username``, ...),
   applied to every sink cluster. :func:`load_client_config` refuses a file that others may
   read (it may hold a password), that is larger than :data:`MAX_FILE_BYTES`, or a key that is
   not a ``security_``/``ssl_``/``sasl_`` setting of kafka-python's admin client, or a value
   that is not a string, number, boolean or null of at most :data:`MAX_VALUE_LEN` characters.
2. Without it the coordinator connects in plaintext.
3. :meth:`TxnClientConfig.settings` gives the raw client's settings for one cluster: these, the
   bootstrap, the request timeout and the client id.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

#: Each Kafka request's bound (a broker that stops answering fails the step, not the worker).
REQUEST_TIMEOUT_MS = 10_000
#: The client id the coordinator's Kafka requests carry (the broker's logs name it).
CLIENT_ID = "cr-coordinator-resolve"
#: Bounds of the configuration file: a handful of settings, each a name, a path or a secret.
MAX_FILE_BYTES = 64 << 10
MAX_SETTINGS = 32
MAX_VALUE_LEN = 4096
_PREFIXES = ("security_", "ssl_", "sasl_")


def _check_settings(_inst: object, _attr: attrs.Attribute[Mapping[str, Any]], value: Mapping[str, Any]) -> None:
    from kafka.admin import KafkaAdminClient  # only when a configuration is given: start-up stays light

    if not isinstance(value, Mapping) or len(value) > MAX_SETTINGS:
        raise ValueError(f"the resolver's Kafka settings must be an object of at most {MAX_SETTINGS} settings")
    for key, item in value.items():
        if not isinstance(key, str) or not key.startswith(_PREFIXES) or key not in KafkaAdminClient.DEFAULT_CONFIG:
            raise ValueError(
                f"{key!r:.80} is not a security_, ssl_ or sasl_ setting of kafka-python's admin client "
                "(for example security_protocol, ssl_cafile, sasl_mechanism, sasl_plain_username)"
            )
        if item is not None and not isinstance(item, str | int | float | bool):
            raise ValueError(f"{key}: a string, number, boolean or null, not {type(item).__name__}")
        if isinstance(item, str) and len(item) > MAX_VALUE_LEN:
            raise ValueError(f"{key}: longer than {MAX_VALUE_LEN} characters")


@attrs.frozen
class TxnClientConfig:
    """Step 3 (the settings checked on construction, step 1)."""

    extra: Mapping[str, Any] = attrs.field(factory=dict, validator=_check_settings)

    def settings(self, bootstrap: str) -> dict[str, Any]:
        return {
            **self.extra,
            "bootstrap_servers": bootstrap,
            "request_timeout_ms": REQUEST_TIMEOUT_MS,
            "client_id": CLIENT_ID,
        }


def load_client_config(path: Path) -> TxnClientConfig:
    """Step 1; ValueError naming what is wrong."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path}: not a regular file")
    if st.st_mode & 0o077:
        raise ValueError(f"{path}: group or others may access it (mode {stat.S_IMODE(st.st_mode):o}): chmod 600")
    if st.st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a JSON object ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: not a JSON object")
    return TxnClientConfig(value)


__all__ = ["CLIENT_ID", "REQUEST_TIMEOUT_MS", "TxnClientConfig", "load_client_config"]
