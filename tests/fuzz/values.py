"""Hostile JSON values and the encoder that can put anything into a frame.

A JSON tree built by the fuzzer may hold :class:`Token` leaves: bytes spliced
verbatim into the JSON text. They carry what ``json.dumps`` cannot produce:
raw invalid UTF-8 inside a string, number literals such as ``1e999`` or a
400-digit integer, and nesting deeper than Python's recursion limit.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from hypothesis import strategies as st

#: Nesting depth of the deep-nesting tokens: far past the ~1,000 levels at which
#: Python's recursive JSON parser raises RecursionError.
DEEP_NESTING = 5000
#: Longest string drawn (a long but sub-limit frame: the server's default limit is 4 MiB).
LONG_STRING = 200_000


@attrs.frozen
class Token:
    """Bytes spliced verbatim into the JSON text in place of a value."""

    raw: bytes

    def __repr__(self) -> str:
        text = self.raw[:40].decode("latin-1")
        return f"Token({text!r}{'...' if len(self.raw) > 40 else ''} {len(self.raw)}B)"


def raw_string(raw: bytes) -> Token:
    """A JSON string holding raw bytes (not necessarily UTF-8)."""
    return Token(b'"' + raw + b'"')


def deep(depth: int = DEEP_NESTING, kind: str = "list") -> Token:
    if kind == "list":
        return Token(b"[" * depth + b"]" * depth)
    return Token(b'{"a":' * depth + b"1" + b"}" * depth)


def encode_json(tree: Any, *, ascii_escapes: bool = True) -> bytes:
    """Encode ``tree`` to a JSON text, splicing in every :class:`Token`.

    ``ascii_escapes`` writes non-ASCII characters as ``\\uXXXX`` escapes (a lone
    surrogate becomes ``"\\ud800"``); otherwise they are written as UTF-8 with
    ``surrogatepass`` (a lone surrogate becomes the raw bytes ``ED A0 80``).
    NaN and infinities are written as ``NaN`` / ``Infinity``, as Python's json does.
    """
    tokens: list[Token] = []

    def swap(node: Any) -> Any:
        if isinstance(node, Token):
            tokens.append(node)
            return f"@@tok{len(tokens) - 1}@@"
        if isinstance(node, dict):
            return {str(k): swap(v) for k, v in node.items()}
        if isinstance(node, list | tuple):
            return [swap(v) for v in node]
        return node

    text = json.dumps(swap(tree), ensure_ascii=ascii_escapes, separators=(",", ":"))
    out = text.encode("utf-8", "surrogatepass")
    for i, token in enumerate(tokens):
        out = out.replace(f'"@@tok{i}@@"'.encode(), token.raw, 1)
    return out


# --------------------------------------------------------------------------- hostile values

#: Strings the coordinator must reject or carry safely (names, ids, reasons).
HOSTILE_STRINGS: list[Any] = [
    "\ud800",  # lone high surrogate
    "\udfff",  # lone low surrogate
    "a\ud800b",
    "\x00",
    "line\n2026-01-01 00:00:00 INFO coordinator forged record",
    "\r\n",
    "\x1b[31mred",
    "\u202eevil",  # right-to-left override
    "",
    " ",
    "x" * 1025,  # one past the name limit
    "\u00e9" * 600,  # 600 characters, 1,200 UTF-8 bytes
    "\U0001f600" * 300,
    raw_string(b"\xed\xa0\x80"),  # a surrogate as raw UTF-8 bytes
    raw_string(b"\xff\xfe"),
    raw_string(b"\xc3"),  # truncated sequence
    raw_string(b"abc\x80def"),
    raw_string(b"\xf4\x90\x80\x80"),  # above U+10FFFF
    raw_string(b"\xc0\xaf"),  # overlong
]

#: Numbers at and past every bound: signs, 32/63/64-bit edges, non-finite, huge.
HOSTILE_NUMBERS: list[Any] = [
    0,
    -1,
    -(2**63),
    2**31 - 1,
    2**31,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    10**400,
    (1 << 20) - 1,  # the store's largest partition
    1 << 20,
    0.5,
    -0.0,
    1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
    Token(b"1e999"),
    Token(b"-1e999"),
    Token(b"NaN"),
    Token(b"Infinity"),
    Token(b"1" * 400),
    Token(b"-" + b"9" * 400),
    Token(b"1E400"),
    Token(b"0." + b"0" * 400 + b"1"),
]

HOSTILE_SHAPES: list[Any] = [
    None,
    True,
    False,
    [],
    {},
    [[]],
    {"a": 1},
    [None] * 1000,
    deep(),
    deep(kind="object"),
    deep(990),
    Token(b"[" * 200_000 + b"]" * 200_000),
]

_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(exclude_categories=()), max_size=40)
)
#: Arbitrary JSON with every Unicode code point, surrogates included.
any_json = st.recursive(
    _json_leaf,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=20,
)


def hostile_value() -> st.SearchStrategy[Any]:
    """One value to put where a field's valid value was."""
    return st.one_of(
        st.sampled_from(HOSTILE_STRINGS),
        st.sampled_from(HOSTILE_NUMBERS),
        st.sampled_from(HOSTILE_SHAPES),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.text(st.characters(exclude_categories=()), min_size=1, max_size=30),
        st.binary(min_size=1, max_size=12).map(lambda b: raw_string(b.replace(b'"', b"").replace(b"\\", b""))),
        st.integers(1000, LONG_STRING).map(lambda n: "x" * n),
        any_json,
    )
