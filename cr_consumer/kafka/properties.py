"""Kafka client properties from the user, and keeping their secrets out of sight.

Where properties come from (``crkafka run`` / ``crkafka member``), in order,
later ones overriding earlier ones:

1. ``--kafka-config FILE``: a Java-style ``.properties`` file, the format of
   Kafka's own ``--consumer.config`` (``key=value``, ``key: value`` or
   ``key value``; ``#``/``!`` comments; a trailing ``\\`` continues a line;
   ``\\t \\n \\uXXXX`` escapes). A file holding a secret that group or others
   may read is refused.
2. ``--kafka KEY=VALUE`` items.
3. Every value of the form ``env:NAME`` is replaced by the environment
   variable NAME (a missing one is an error naming the property and the
   variable), e.g. ``--kafka sasl.plain.password=env:KAFKA_PASSWORD``.
   Values are then typed: an integer string becomes an int (not for a
   secret: a numeric password stays a string).

Secrets never leave through a command line, a repr, a log or /status:

* :func:`is_secret` names the secret properties (passwords, secrets, tokens,
  credentials, JAAS configs, private key material);
* :func:`redacted` / :func:`redacted_repr` replace their values by
  ``REDACTED`` (used by the reprs of OperatorConfig, SourceOptions and the
  member settings);
* ``crkafka run`` hands a member its properties as JSON on its stdin
  (:func:`encode_for_stdin` / :func:`read_stdin`), never as arguments.

Which properties may be set, and to what, is checked by the source they are
given to (:mod:`cr_consumer.kafka.property_rules`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

REDACTED = "***"
#: Value prefix of an environment reference.
ENV_PREFIX = "env:"
#: Words that make a property secret wherever they appear in its dotted name.
_SECRET_WORDS = ("password", "secret", "token", "credential", "jaas", "private")
#: Secret properties whose names hold none of those words (key material).
_SECRET_KEYS = frozenset({"ssl.key", "ssl.keystore.key", "ssl.keyfile.content"})
#: Largest properties file or stdin document read (bounds memory on a wrong path).
MAX_PROPERTIES_BYTES = 1024 * 1024
#: Largest JSON document handed to a member on stdin: it fits the default
#: 64 KiB pipe buffer, so the runner's write never waits for the member.
MAX_STDIN_BYTES = 60 * 1024
#: Most properties accepted from one source.
MAX_PROPERTIES = 1000
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class KafkaPropertiesError(ValueError):
    """A property source that cannot be used (the message names the file, property or variable)."""


def is_secret(key: str) -> bool:
    """True for a property whose value must never be shown (by dotted or underscore name)."""
    name = str(key).lower().replace("_", ".")
    return name in _SECRET_KEYS or any(word in name for word in _SECRET_WORDS)


def redacted(props: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with every secret value replaced by REDACTED."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in props.items()}


def redacted_repr(props: Mapping[str, Any] | tuple[tuple[str, Any], ...]) -> str:
    """For ``attrs.field(repr=...)``: the mapping (or pairs) with secret values redacted."""
    if isinstance(props, Mapping):
        return repr(redacted(props))
    return repr(tuple((k, REDACTED if is_secret(k) else v) for k, v in props))


def typed(value: str) -> object:
    """An integer string becomes an int (Kafka settings are mostly numbers); other strings stay."""
    return int(value) if value.lstrip("-").isdigit() and len(value) <= 20 else value


def parse_items(items: list[str] | None, what: str = "--kafka") -> dict[str, str]:
    """``KEY=VALUE`` items -> dict of raw strings (KafkaPropertiesError names a bad item's key)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            shown = key if sep else "(no '=')"
            raise KafkaPropertiesError(f"{what} item with key {shown!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def resolve_env(props: Mapping[str, object], environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """Replace ``env:NAME`` values by the variable NAME; strings are typed (:func:`typed`)."""
    env = os.environ if environ is None else environ
    out: dict[str, object] = {}
    for key, value in props.items():
        if isinstance(value, str) and value.startswith(ENV_PREFIX):
            name = value[len(ENV_PREFIX) :]
            if not _ENV_NAME.fullmatch(name):
                raise KafkaPropertiesError(f"Kafka property {key!r}: {value!r} is not env:NAME")
            if name not in env:
                raise KafkaPropertiesError(f"Kafka property {key!r}: environment variable {name} is not set")
            value = env[name]
        out[key] = typed(value) if isinstance(value, str) and not is_secret(key) else value
    return out


def load_properties_file(path: str | Path) -> dict[str, str]:
    """Read a Java ``.properties`` file (raw strings). Refused: a file over
    MAX_PROPERTIES_BYTES, or one holding a secret that group or others may read."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise KafkaPropertiesError(f"--kafka-config {p}: not a regular file")
            data = f.read(MAX_PROPERTIES_BYTES + 1)
    except OSError as exc:
        raise KafkaPropertiesError(f"--kafka-config {p}: {exc.strerror}") from exc
    if len(data) > MAX_PROPERTIES_BYTES:
        raise KafkaPropertiesError(f"--kafka-config {p}: larger than {MAX_PROPERTIES_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KafkaPropertiesError(f"--kafka-config {p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    props = parse_properties(text, str(p))
    secrets = sorted(k for k in props if is_secret(k))
    if secrets and st.st_mode & (stat.S_IRGRP | stat.S_IROTH):
        raise KafkaPropertiesError(
            f"--kafka-config {p} holds secrets ({', '.join(secrets)}) and is readable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):o}); chmod 600 {p}"
        )
    return props


def parse_properties(text: str, where: str = "properties") -> dict[str, str]:
    """The ``java.util.Properties`` text format (the subset Kafka's tools use)."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i + 1
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split(line)
        if not key:
            raise KafkaPropertiesError(f"{where} line {start}: no property name")
        props[_unescape(key, where, start)] = _unescape(value, where, start)
        if len(props) > MAX_PROPERTIES:
            raise KafkaPropertiesError(f"{where}: more than {MAX_PROPERTIES} properties")
    return props


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes continues the line."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split(line: str) -> tuple[str, str]:
    j = 0
    while j < len(line):
        c = line[j]
        if c == "\\":
            j += 2
            continue
        if c in "=: \t\f":
            break
        j += 1
    key, rest = line[:j], line[j:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str, where: str, line: int) -> str:
    out: list[str] = []
    j = 0
    while j < len(text):
        c = text[j]
        if c != "\\" or j + 1 == len(text):
            out.append(c)
            j += 1
            continue
        nxt = text[j + 1]
        if nxt == "u":
            digits = text[j + 2 : j + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise KafkaPropertiesError(f"{where} line {line}: malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            j += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            j += 2
    return "".join(out)


def from_cli(config_file: str | None, items: list[str] | None) -> dict[str, object]:
    """Steps 1-3 of the module docstring: file, then ``--kafka`` items, then env references."""
    props: dict[str, object] = {}
    if config_file:
        props.update(load_properties_file(config_file))
    props.update(parse_items(items))
    return resolve_env(props)


def encode_for_stdin(props: Mapping[str, object]) -> bytes:
    """The JSON document ``crkafka run`` writes to a member's stdin."""
    data = json.dumps({"version": 1, "kafka": dict(props)}, sort_keys=True).encode()
    if len(data) > MAX_STDIN_BYTES:
        raise KafkaPropertiesError(
            f"Kafka properties too large to hand to a member ({len(data)} bytes > {MAX_STDIN_BYTES})"
        )
    return data


def read_stdin(stream: IO[bytes]) -> dict[str, object]:
    """A member's side of :func:`encode_for_stdin` (bounded read, checked)."""
    data = stream.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        raise KafkaPropertiesError(f"Kafka properties on stdin: larger than {MAX_STDIN_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise KafkaPropertiesError(f"Kafka properties on stdin: not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("kafka"), dict):
        raise KafkaPropertiesError('Kafka properties on stdin: expected {"version": 1, "kafka": {...}}')
    props: dict[str, object] = doc["kafka"]  # decoded JSON, checked below
    for key, value in props.items():
        if not isinstance(value, str | int | float | bool) or (isinstance(value, float) and value != value):
            raise KafkaPropertiesError(f"Kafka properties on stdin: {key!r} has a value of type {type(value).__name__}")
    return props


__all__ = [
    "REDACTED",
    "KafkaPropertiesError",
    "encode_for_stdin",
    "from_cli",
    "is_secret",
    "load_properties_file",
    "parse_properties",
    "read_stdin",
    "redacted",
    "redacted_repr",
    "resolve_env",
]
