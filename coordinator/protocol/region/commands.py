"""The region controller's commands to its members (controller -> member), as
frozen attrs classes with one encode/decode pair.

Protocol (who sends what, when: ``coordinator/region/cycle.py`` and
``coordinator/region/reset.py``; the member's side: ``cr_consumer/runtime/member/process.py``):

1. The controller's state machine (:class:`~coordinator.region.machine.RegionCore`)
   builds one command per member and hands it to its ``send`` callback.
2. The service encodes it with :func:`encode_command` into the body of a
   ``region_command`` push (envelope id null)::

       {"v": 1, "region": NAME, "cmd": KIND, ...the kind's fields}

3. The member's control channel decodes it with :func:`decode_command`, which
   validates every field (names, integer ranges, offsets, free text) and the
   body version before the member acts on it. A body that does not validate is
   logged and dropped (:class:`~coordinator.protocol.wire.errors.Invalid` names the
   field): the controller then fails the phase by its timeout and resets, as for
   a push lost on the way.

The body version :data:`COMMAND_VERSION` changes whenever a field's meaning or
presence changes; a member refuses any other version (the envelope's ``v``
covers the framing, this one the command fields).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from coordinator.protocol.region.transactions import Resolve, decode_resolve, encode_resolve
from coordinator.protocol.wire import fields
from coordinator.protocol.wire.errors import Invalid

#: Envelope type of every pushed command.
COMMAND_TYPE = "region_command"
#: Version of the command body (the ``v`` field of every ``region_command``).
COMMAND_VERSION = 1
#: Most member names a reset command may carry (the checkpoint's members): the
#: same bound as the contributors of a merge.
MAX_COMMAND_MEMBERS = fields.MAX_CONTRIBUTORS

#: ``[[topic, partition, next offset], ...]``, as everywhere on the wire (a checkpoint
#: ack's, built from the same type by the member, is ``[[topic, partition, from, to], ...]``).
OffsetList = list[list[Any]]


class CommandKind(str, enum.Enum):
    """The ``cmd`` field: which command a push carries."""

    DRAIN = "drain"
    CHECKPOINT = "checkpoint"
    RESUME = "resume"
    RETIRE = "retire"
    RESET = "reset"
    RESET_TO_INITIAL = "reset_to_initial"
    FAILED = "failed"


def _seq(body: Mapping[str, Any], name: str = "seq") -> int:
    return fields.req_int(body, name)


def _offsets(body: Mapping[str, Any], name: str = "offsets") -> OffsetList:
    return fields.encode_offsets(fields.decode_offsets(body.get(name), name))


def _members(body: Mapping[str, Any]) -> list[str]:
    value = body.get("members")
    if not isinstance(value, list) or len(value) > MAX_COMMAND_MEMBERS:
        raise Invalid(f"field 'members' must be a list of at most {MAX_COMMAND_MEMBERS} member names")
    return [fields.check_name(m, f"members[{i}]") for i, m in enumerate(value)]


@attrs.frozen
class _Command(fields.FieldsBody):
    """A command's body: ``cmd``, then its fields."""

    KIND: ClassVar[CommandKind]

    def to_body(self) -> dict[str, Any]:
        return {"cmd": self.KIND.value, **super().to_body()}


@attrs.frozen
class Drain(_Command):
    """Block the permit and drain every operator for checkpoint ``seq``; ack."""

    KIND: ClassVar[CommandKind] = CommandKind.DRAIN
    seq: int

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Drain:
        return cls(_seq(body))


@attrs.frozen
class Checkpoint(_Command):
    """Checkpoint and store every operator for ``seq``; ack with the source's offsets."""

    KIND: ClassVar[CommandKind] = CommandKind.CHECKPOINT
    seq: int

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Checkpoint:
        return cls(_seq(body))


@attrs.frozen
class Resume(_Command):
    """Release the permit. ``complete``: the checkpoint that completed (None after
    a reset); ``offsets``: its union of every member's source offsets, sent with
    a completed checkpoint only (the source starts a partition assigned to it
    later there)."""

    KIND: ClassVar[CommandKind] = CommandKind.RESUME
    complete: int | None
    offsets: OffsetList | None = None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Resume:
        return cls(fields.opt_int(body, "complete"), None if body.get("offsets") is None else _offsets(body))


@attrs.frozen
class Retire(_Command):
    """Delete checkpoints <= ``seq`` (a newer one completed)."""

    KIND: ClassVar[CommandKind] = CommandKind.RETIRE
    seq: int

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Retire:
        return cls(_seq(body))


@attrs.frozen
class Reset(_Command):
    """Reset to the last consistent checkpoint ``seq`` in round ``attempt``: the
    source to ``offsets`` (the union of ``members``' source offsets), the other
    operators to their data of ``own`` (this member's own last completed
    checkpoint, <= ``seq``; None: initial state). ``rejoin``: a Kafka consumer
    joins or left the group, so the member's consumer rejoins at once.
    ``resolve``: the Kafka transactions this member resolves before its operators
    reset (``coordinator/protocol/region/transactions.py``, step 3)."""

    KIND: ClassVar[CommandKind] = CommandKind.RESET
    seq: int
    attempt: int
    members: list[str]
    offsets: OffsetList
    own: int | None
    rejoin: bool = False
    resolve: tuple[Resolve, ...] = attrs.field(default=(), metadata=fields.encoded(encode_resolve))

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Reset:
        seq = _seq(body)
        if "own" not in body:
            raise Invalid("field 'own' is required (a checkpoint id or null)")
        own = fields.opt_int(body, "own")
        if own is not None and own > seq:
            raise Invalid(f"field 'own' ({own}) must not be after the reset's checkpoint {seq}")
        return cls(
            seq,
            _seq(body, "attempt"),
            _members(body),
            _offsets(body),
            own,
            fields.opt_bool(body, "rejoin"),
            decode_resolve(body.get("resolve")),
        )


@attrs.frozen
class ResetToInitial(_Command):
    """Reset every operator to its initial state in round ``attempt`` (no
    consistent checkpoint yet); ``rejoin`` and ``resolve`` as for :class:`Reset`
    (with no consistent checkpoint, ``resolve`` only fences)."""

    KIND: ClassVar[CommandKind] = CommandKind.RESET_TO_INITIAL
    attempt: int
    rejoin: bool = False
    resolve: tuple[Resolve, ...] = attrs.field(default=(), metadata=fields.encoded(encode_resolve))

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ResetToInitial:
        return cls(_seq(body, "attempt"), fields.opt_bool(body, "rejoin"), decode_resolve(body.get("resolve")))


@attrs.frozen
class Failed(_Command):
    """The region gave up (terminal): the member exits with ExitCode.REGION_FAILED."""

    KIND: ClassVar[CommandKind] = CommandKind.FAILED
    reason: str

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Failed:
        return cls(fields.opt_text(body, "reason") or "no reason given")


RegionCommand = Drain | Checkpoint | Resume | Retire | Reset | ResetToInitial | Failed
#: Commands that replace the member's state: everything queued before one is moot.
RESETS = (Reset, ResetToInitial)

_CLASSES: dict[CommandKind, type[RegionCommand]] = {
    cls.KIND: cls for cls in (Drain, Checkpoint, Resume, Retire, Reset, ResetToInitial, Failed)
}


@attrs.frozen
class AddressedCommand:
    """A decoded push: the region it is for and the command."""

    region: str
    command: RegionCommand


def encode_command(region: str, command: RegionCommand) -> dict[str, Any]:
    """The body of the ``region_command`` push carrying ``command`` to a member of ``region``."""
    return {"v": COMMAND_VERSION, "region": region, **command.to_body()}


def decode_command(body: Any) -> AddressedCommand:
    """A ``region_command`` body, fully validated; raises Invalid naming the field."""
    if not isinstance(body, Mapping):
        raise Invalid("a region_command body must be an object")
    version = body.get("v")
    if version != COMMAND_VERSION:
        raise Invalid(
            f"region_command version {str(version)[:20]} is not supported; this member speaks {COMMAND_VERSION}"
        )
    try:
        kind = CommandKind(body.get("cmd"))
    except ValueError:
        raise Invalid(
            f"field 'cmd' must be one of {[k.value for k in CommandKind]}, got {body.get('cmd')!r:.40}"
        ) from None
    return AddressedCommand(fields.req_str(body, "region"), _CLASSES[kind].from_body(body))


__all__ = [
    "COMMAND_TYPE",
    "COMMAND_VERSION",
    "RESETS",
    "AddressedCommand",
    "Checkpoint",
    "CommandKind",
    "Drain",
    "Failed",
    "RegionCommand",
    "Reset",
    "ResetToInitial",
    "Resume",
    "Retire",
    "decode_command",
    "encode_command",
]
