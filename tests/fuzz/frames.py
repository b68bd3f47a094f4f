"""Structure-aware frames: valid envelopes of every message type with one part made hostile, and raw bytes.

``draw_frame(draw, types, rid)`` builds one :class:`Frame`. Mutations, each
drawn with its own weight:

* ``valid``: the envelope as a well-behaved client sends it (these build the
  state that the other mutations then hit, and the writes the model tracks);
* ``field``: one body field replaced by a hostile value (``values.hostile_value``);
* ``nested``: one value inside a nested field replaced (a region config
  setting, a Kafka report field, one element of an offset triple);
* ``drop`` / ``extra``: a field removed, or an unknown field added;
* ``offsets``: huge offset lists and huge partition numbers (memory);
* ``envelope``: ``v`` / ``id`` / ``type`` / ``body`` replaced, an extra
  envelope field, or the whole envelope nested deep;
* ``raw``: random bytes, a truncated or byte-flipped valid frame, an empty
  frame, or several frames in one message.

Every frame whose request id is the fuzzer's own (``rid``) can be matched to
its reply; a frame whose id is mutated addresses only untracked groups.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import strategies as st

from tests.fuzz.schemas import TRACKED_GROUPS, UNTRACKED_GROUPS, body_schemas, derived_body
from tests.fuzz.values import Token, any_json, deep, encode_json, hostile_value

Draw = Callable[[st.SearchStrategy[Any]], Any]

MUTATIONS = ["valid", "field", "nested", "drop", "extra", "offsets", "envelope", "raw"]
#: Relative weights of the mutations (valid frames build state for the others to hit).
WEIGHTS = [30, 22, 14, 6, 4, 6, 9, 9]
#: Largest offset list drawn (entries); the client splits at 50,000, the server must bound it itself.
HUGE_LIST = 60_000


@attrs.frozen
class Frame:
    """One ZeroMQ message to send and what the fuzzer knows about it."""

    parts: tuple[bytes, ...]
    mutation: str
    msg_type: str | None = None
    rid: str | None = None  # the fuzzer's own request id: its reply can be matched
    body: dict[str, Any] | None = None  # the body as sent (may hold Tokens)
    plain: bool = False  # every body field has its schema's type (only ``valid``, ``drop``, ``extra``)

    def describe(self, limit: int = 300) -> str:
        text = b"|".join(self.parts)[:limit].decode("utf-8", "backslashreplace")
        more = sum(map(len, self.parts)) - limit
        return f"{self.mutation} {self.msg_type}: {text}" + (f"... (+{more} bytes)" if more > 0 else "")

    def to_json(self) -> dict[str, Any]:
        """JSON for the corpus: each part zlib-compressed and base64-encoded (deep nesting compresses to bytes)."""
        return {
            "mutation": self.mutation,
            "type": self.msg_type,
            "preview": self.describe(160),
            "parts_zb64": [base64.b64encode(zlib.compress(p, 9)).decode() for p in self.parts],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Frame:
        parts = tuple(zlib.decompress(base64.b64decode(p)) for p in d["parts_zb64"])
        return cls(parts, d["mutation"], d.get("type"))


def envelope(msg_type: str, body: Any, rid: Any) -> dict[str, Any]:
    return {"v": 1, "id": rid, "type": msg_type, "body": body}


def valid_frame(msg_type: str, body: dict[str, Any], rid: str) -> Frame:
    return Frame((json.dumps(envelope(msg_type, body, rid)).encode(),), "valid", msg_type, rid, body, True)


def _huge_offsets(draw: Draw) -> Any:
    kind = draw(st.sampled_from(["partitions", "long", "duplicates", "bad_entry"]))
    if kind == "partitions":  # few bytes that ask the store for a buffer per topic up to the largest partition
        big = st.sampled_from([(1 << 20) - 1] * 4 + [(1 << 20) - 2, 1 << 20, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64])
        n_topics, partition = draw(st.integers(1, 25)), draw(big)
        return [[f"t{i}", partition, draw(st.integers(0, 2**63 - 1))] for i in range(n_topics)]
    if kind == "long":
        n = draw(st.integers(1000, HUGE_LIST))
        return [["t0", p, p] for p in range(n)]
    if kind == "duplicates":
        return [["t0", 0, 1]] * draw(st.integers(2, 2000))
    return [["t0", 0, 1], draw(hostile_value())]


class _Builder:
    """Draws one frame; ``draw`` is hypothesis' data.draw."""

    def __init__(self, draw: Draw, handlers: dict[str, type]) -> None:
        self.draw = draw
        self.types = sorted(handlers)
        tracked, untracked = body_schemas(TRACKED_GROUPS), body_schemas(UNTRACKED_GROUPS)
        for msg_type, cls in handlers.items():
            tracked.setdefault(msg_type, derived_body(cls))
            untracked.setdefault(msg_type, derived_body(cls))
        self.tracked, self.untracked = tracked, untracked

    def frame(self, rid: str) -> Frame:
        draw = self.draw
        mutation = draw(st.integers(0, sum(WEIGHTS) - 1).map(_pick_mutation))
        msg_type = draw(st.sampled_from(self.types))
        if mutation == "envelope":
            return self._envelope(msg_type, rid)
        if mutation == "raw":
            return self._raw(msg_type, rid)
        body = dict(draw(self.tracked[msg_type]))
        if mutation == "offsets" and "offsets" not in body:
            mutation = "field"
        elif mutation == "offsets":
            # huge maps go to untracked groups: every read of a tracked group is decoded and
            # compared with the model, which would slow the whole run down as they pile up
            body = dict(draw(self.untracked[msg_type]))
        if mutation == "valid":
            return valid_frame(msg_type, body, rid)
        plain = True
        if mutation == "field" and body:
            key = draw(st.sampled_from(sorted(body)))
            body[key] = draw(hostile_value())
            plain = False
        elif mutation == "nested":
            plain = not self._nested(body)
        elif mutation == "drop" and body:
            del body[draw(st.sampled_from(sorted(body)))]
        elif mutation == "extra":
            body[draw(st.sampled_from(["zz", "extra", "group ", ""]))] = draw(any_json)
        elif mutation == "offsets":
            body["offsets"] = _huge_offsets(draw)
            plain = False
        ascii_escapes = draw(st.booleans())
        data = encode_json(envelope(msg_type, body, rid), ascii_escapes=ascii_escapes)
        return Frame((data,), mutation, msg_type, rid, body, plain)

    def _nested(self, body: dict[str, Any]) -> bool:
        """Replace a value inside a nested field; False when the body has none."""
        draw = self.draw
        if isinstance(body.get("config"), dict):
            key = draw(
                st.sampled_from(
                    [
                        "index",
                        "mode",
                        "period_s",
                        "drain_timeout_s",
                        "reset_timeout_s",
                        "max_consecutive_resets",
                        "failure_memory_s",
                        "reset_backoff_s",
                        "reset_backoff_max_s",
                        "member_timeout_s",
                        "min_members",
                        "join_grace_s",
                        "rebalance_settle_max_s",
                        "name",
                    ]
                )
            )
            body["config"] = {**body["config"], key: draw(hostile_value())}
            return True
        if isinstance(body.get("kafka"), dict):
            key = draw(st.sampled_from(["member_id", "generation", "rebalancing"]))
            body["kafka"] = {**body["kafka"], key: draw(hostile_value())}
            return True
        if isinstance(body.get("offsets"), list):
            triple = list(draw(st.sampled_from(body["offsets"]))) if body["offsets"] else ["t0", 0, 0]
            triple[draw(st.integers(0, 2))] = draw(hostile_value())
            body["offsets"] = [*body["offsets"], triple]
            return True
        return False

    def _envelope(self, msg_type: str, rid: str) -> Frame:
        draw = self.draw
        body = dict(draw(self.untracked[msg_type]))
        env: dict[str, Any] = envelope(msg_type, body, rid)
        part = draw(st.sampled_from(["v", "id", "type", "body", "extra", "deep", "missing"]))
        keep_rid: str | None = None
        if part == "id":
            env["id"] = draw(hostile_value())
        elif part == "extra":
            env[draw(st.sampled_from(["x", "V", "ids"]))] = draw(any_json)
            keep_rid = rid
        elif part == "deep":
            env["body"] = {"group": "u0", "nested": deep(draw(st.sampled_from([999, 1500, 5000, 50_000])))}
            keep_rid = rid
        elif part == "missing":
            del env[draw(st.sampled_from(["v", "id", "type", "body"]))]
            keep_rid = rid if "id" in env else None
        else:
            env[part] = draw(hostile_value())
            keep_rid = rid
        data = encode_json(env, ascii_escapes=draw(st.booleans()))
        return Frame((data,), f"envelope.{part}", msg_type, keep_rid, None)

    def _raw(self, msg_type: str, rid: str) -> Frame:
        draw = self.draw
        kind = draw(st.sampled_from(["bytes", "truncated", "flipped", "empty", "multipart", "deep", "surrogate"]))
        valid = json.dumps(envelope(msg_type, dict(draw(self.untracked[msg_type])), rid)).encode()
        if kind == "bytes":
            parts: tuple[bytes, ...] = (draw(st.binary(min_size=1, max_size=300)),)
        elif kind == "truncated":
            parts = (valid[: draw(st.integers(1, max(1, len(valid) - 1)))],)
        elif kind == "flipped":
            i = draw(st.integers(0, len(valid) - 1))
            parts = (valid[:i] + bytes([draw(st.integers(0, 255))]) + valid[i + 1 :],)
        elif kind == "empty":
            parts = (b"",)
        elif kind == "multipart":
            parts = (valid, draw(st.binary(max_size=20)))
        elif kind == "deep":
            parts = (Token(b"[" * 100_000).raw,)
        else:  # a lone surrogate as raw UTF-8 in the request id
            parts = (valid.replace(f'"{rid}"'.encode(), b'"\xed\xa0\x80"', 1),)
        return Frame(parts, f"raw.{kind}", msg_type, None, None)


def _pick_mutation(n: int) -> str:
    for name, weight in zip(MUTATIONS, WEIGHTS):
        if n < weight:
            return name
        n -= weight
    return MUTATIONS[-1]


def frame_builder(draw: Draw, handlers: dict[str, type]) -> Callable[[str], Frame]:
    """A function rid -> Frame drawing from ``draw`` (hypothesis' ``data.draw``)."""
    return _Builder(draw, handlers).frame
