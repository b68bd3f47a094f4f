"""The acknowledged writes, and the checks that a (restarted) coordinator still holds them.

The fuzzer owns every request to the tracked groups (``schemas.TRACKED_GROUPS``)
and the regions, on one socket, answered in order; so each success reply to
one of them is the coordinator's acknowledged state at that point:

* ``register`` / ``unregister`` replies: the group's region index and members;
* ``put_initial_offsets`` replies: the effective value of each entry (first
  writer wins: an acknowledged value never changes);
* ``region_join`` replies (not refused): the region exists with that config;
  every reply naming ``last_consistent``: it never goes back.

Checks as replies arrive (a violation is a string naming what differs):
a register's reply lists its operator and keeps the group's region index; a
put's reply keeps every earlier acknowledged value and gives a new entry the
requested value; reads (``members``, ``get_initial_offsets``) match the model.
``verify(client)`` reads every tracked group and every region back (after a
restart: replay kept every acknowledged write; and a tracked group the model
does not know must not exist: an error reply changed nothing).

A write sent just before a crash, whose reply never came, may or may not have
reached the disk: its group is *uncertain* until the next ``verify``, which
then checks only that every acknowledged fact is still there and adopts the rest.

Findings (not crashes): ``INTERNAL`` error replies (an exception no
validation caught), success replies that echo out-of-range numbers, and names
with control characters that were accepted.
"""

from __future__ import annotations

from typing import Any

import attrs

from coordinator.client import CoordinatorClient
from coordinator.protocol.wire.errors import CoordinatorError, NotRegistered
from tests.fuzz.frames import Frame
from tests.fuzz.schemas import TRACKED_GROUPS
from tests.fuzz.target import Reply

MAX_PARTITION_ECHO = 2**31 - 1
MAX_OFFSET_ECHO = 2**63 - 1
NAME_FIELDS = ("group", "operator", "region", "member", "incarnation")


@attrs.define
class GroupFacts:
    region_index: int
    members: set[str]


@attrs.define
class AckModel:
    groups: dict[str, GroupFacts] = attrs.field(factory=dict)
    offsets: dict[str, dict[tuple[str, int], int]] = attrs.field(factory=dict)
    regions: dict[str, dict[str, Any]] = attrs.field(factory=dict)  # region -> acknowledged config
    last_consistent: dict[str, int] = attrs.field(factory=dict)
    joined: dict[str, set[tuple[str, str]]] = attrs.field(factory=dict)  # region -> {(member, incarnation)}
    uncertain: set[str] = attrs.field(factory=set)
    violations: list[str] = attrs.field(factory=list)
    findings: dict[str, str] = attrs.field(factory=dict)  # signature -> example
    acked_writes: int = 0

    # ------------------------------------------------------------------ replies
    def observe(self, frame: Frame, reply: Reply) -> None:
        body = frame.body if isinstance(frame.body, dict) else {}
        if reply.type == "error" and isinstance(reply.body, dict) and reply.body.get("code") == "INTERNAL":
            # INTERNAL is an exception no validation caught: the request may have changed state first.
            message = str(reply.body.get("message"))[:100]
            self._finding(f"{frame.msg_type}: INTERNAL error reply ({message.split(':')[0]})", frame)
        if reply.type == "error" or not isinstance(reply.body, dict):
            return
        self._check_bounds(frame, reply.body)
        group = body.get("group")
        tracked = isinstance(group, str) and group in TRACKED_GROUPS
        handlers = {
            "register": self._on_register,
            "unregister": self._on_unregister,
            "members": self._on_members,
            "put_initial_offsets": self._on_put_initial_offsets,
            "get_initial_offsets": self._on_get_initial_offsets,
        }
        region_handlers = {"region_join": self._on_region_join, "region_heartbeat": self._on_region_heartbeat}
        if tracked and frame.msg_type in handlers:
            handlers[frame.msg_type](frame, body, reply.body)
        elif frame.msg_type in region_handlers:
            region_handlers[frame.msg_type](frame, body, reply.body)

    def unanswered(self, frame: Frame) -> None:
        """A frame sent before a crash without a reply: its write may or may not be durable."""
        body = frame.body if isinstance(frame.body, dict) else {}
        group = body.get("group")
        if isinstance(group, str) and group in TRACKED_GROUPS:
            self.uncertain.add(group)
        region = body.get("region")
        if frame.msg_type == "region_join" and isinstance(region, str):
            self.uncertain.add(f"region:{region}")

    def _violation(self, text: str) -> None:
        self.violations.append(text)

    def _on_register(self, frame: Frame, body: dict, reply: dict) -> None:
        group, op = body["group"], body.get("operator")
        facts = self.groups.get(group)
        if facts is not None and group not in self.uncertain:
            if reply.get("region_index") != facts.region_index:
                self._violation(
                    f"register {group}: region index {reply.get('region_index')} != acknowledged {facts.region_index}"
                )
            expected = facts.members | ({op} if isinstance(op, str) else set())
            if frame.plain and set(reply.get("members", [])) != expected:
                self._violation(
                    f"register {group}/{op}: members {sorted(reply.get('members', []))} != {sorted(expected)}"
                )
        if frame.plain and op not in reply.get("members", []):
            self._violation(f"register {group}/{op}: reply does not list the operator")
        self._set_group(group, reply)

    def _on_unregister(self, frame: Frame, body: dict, reply: dict) -> None:
        group, op = body["group"], body.get("operator")
        facts = self.groups.get(group)
        if facts is not None and group not in self.uncertain and frame.plain:
            expected = facts.members - {op}
            if set(reply.get("members", [])) != expected:
                self._violation(
                    f"unregister {group}/{op}: members {sorted(reply.get('members', []))} != {sorted(expected)}"
                )
        self._set_group(group, reply)

    def _on_members(self, frame: Frame, body: dict, reply: dict) -> None:
        facts = self.groups.get(body["group"])
        if facts is None:
            if body["group"] not in self.uncertain:
                self._violation(f"members {body['group']}: a group no acknowledged register created exists: {reply}")
        elif body["group"] not in self.uncertain and set(reply.get("members", [])) != facts.members:
            self._violation(
                f"members {body['group']}: {sorted(reply.get('members', []))} != acknowledged {sorted(facts.members)}"
            )

    def _set_group(self, group: str, reply: dict) -> None:
        index, members = reply.get("region_index"), reply.get("members")
        if isinstance(index, int) and isinstance(members, list):
            self.groups[group] = GroupFacts(index, set(members))
            self.acked_writes += 1

    def _on_put_initial_offsets(self, frame: Frame, body: dict, reply: dict) -> None:
        group = body["group"]
        known = self.offsets.setdefault(group, {})
        effective = _triples(reply.get("offsets"))
        requested = _triples(body.get("offsets")) if frame.plain else {}
        for key, value in requested.items():
            if key not in effective:
                self._violation(f"put {group}: reply lacks requested entry {key}")
            elif key in known and effective[key] != known[key] and group not in self.uncertain:
                self._violation(
                    f"put {group}: {key} became {effective[key]}, acknowledged {known[key]} (first writer wins)"
                )
            elif key not in known and effective[key] != value and group not in self.uncertain:
                self._violation(f"put {group}: new entry {key} = {effective[key]}, requested {value}")
        for key, value in effective.items():
            known.setdefault(key, value)
        self.acked_writes += 1

    def _on_get_initial_offsets(self, frame: Frame, body: dict, reply: dict) -> None:
        group = body["group"]
        if group in self.uncertain:
            return
        actual, known = _triples(reply.get("offsets")), self.offsets.get(group, {})
        if actual != known:
            self._violation(f"get {group}: {_diff(actual, known)}")

    def _on_region_join(self, frame: Frame, body: dict, reply: dict) -> None:
        region = reply.get("region")
        if not isinstance(region, str) or "refused" in reply:
            return
        self.regions.setdefault(region, reply.get("config") or {})
        if isinstance(body.get("member"), str) and isinstance(body.get("incarnation"), str):
            self.joined.setdefault(region, set()).add((body["member"], body["incarnation"]))
        self._note_last(region, reply)
        self.acked_writes += 1

    def _on_region_heartbeat(self, frame: Frame, body: dict, reply: dict) -> None:
        if isinstance(body.get("region"), str):
            self._note_last(body["region"], reply)

    def _note_last(self, region: str, reply: dict) -> None:
        last = reply.get("last_consistent")
        if isinstance(last, int) and not isinstance(last, bool):
            before = self.last_consistent.get(region)
            if before is not None and last < before:
                self._violation(f"region {region}: last_consistent went back from {before} to {last}")
            self.last_consistent[region] = max(last, before or last)

    # ------------------------------------------------------------------ findings
    def _check_bounds(self, frame: Frame, reply: dict) -> None:
        for key in ("offsets",):
            value = reply.get(key)
            if not isinstance(value, list):
                continue
            for item in value:
                if isinstance(item, list) and len(item) == 3:
                    _, p, o = item
                    if isinstance(p, int) and p > MAX_PARTITION_ECHO:
                        self._finding(f"{frame.msg_type}: success reply echoes partition >= 2^31", frame)
                    if isinstance(o, int) and o > MAX_OFFSET_ECHO:
                        self._finding(f"{frame.msg_type}: success reply echoes offset >= 2^63", frame)
        body = frame.body if isinstance(frame.body, dict) else {}
        for name in NAME_FIELDS:
            value = body.get(name)
            if isinstance(value, str) and any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in value):
                self._finding(f"{frame.msg_type}: accepted a {name} with control characters", frame)

    def _finding(self, signature: str, frame: Frame) -> None:
        self.findings.setdefault(signature, frame.describe(200))

    # ------------------------------------------------------------------ read back
    def verify(self, client: CoordinatorClient) -> list[str]:
        """Read every tracked group and region back; returns (and records) the violations."""
        found: list[str] = []
        for group in TRACKED_GROUPS:
            found += self._verify_group(client, group)
        for region, config in self.regions.items():
            found += self._verify_region(client, region, config)
        self.uncertain.clear()
        self.violations += found
        return found

    def _verify_group(self, client: CoordinatorClient, group: str) -> list[str]:
        out = []
        uncertain = group in self.uncertain
        facts = self.groups.get(group)
        try:
            reply = client.request("members", {"group": group})
            actual = GroupFacts(reply["region_index"], set(reply["members"]))
        except NotRegistered:
            actual = None
        if facts is not None and actual is None:
            out.append(f"group {group}: acknowledged (members {sorted(facts.members)}) but unknown after replay")
        elif facts is None and actual is not None and not uncertain:
            out.append(f"group {group}: exists ({sorted(actual.members)}) though no register was acknowledged")
        elif facts is not None and actual is not None and not uncertain and actual != facts:
            out.append(f"group {group}: {actual} != acknowledged {facts}")
        if actual is not None:
            self.groups[group] = actual
        else:
            self.groups.pop(group, None)
        known = self.offsets.get(group, {})
        stored = _triples(client.request("get_initial_offsets", {"group": group})["offsets"])
        lost = {k: v for k, v in known.items() if stored.get(k) != v}
        if lost:
            out.append(f"offsets {group}: acknowledged entries lost or changed: {dict(list(lost.items())[:5])}")
        extra = set(stored) - set(known)
        if extra and not uncertain:
            out.append(f"offsets {group}: entries no acknowledged put wrote: {sorted(extra)[:5]}")
        self.offsets[group] = stored
        return out

    def _verify_region(self, client: CoordinatorClient, region: str, config: dict[str, Any]) -> list[str]:
        try:
            status = client.request("region_status", {"region": region})["region"]
        except NotRegistered:
            return [f"region {region}: acknowledged join but unknown after replay"]
        except CoordinatorError as exc:
            return [f"region {region}: status failed: {exc}"]
        out = []
        last = self.last_consistent.get(region)
        actual = status.get("last_consistent")
        if last is not None and (actual is None or actual < last):
            out.append(f"region {region}: last_consistent {actual} < acknowledged {last}")
        return out


def _triples(value: Any) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    if isinstance(value, list):
        for item in value:
            if (
                isinstance(item, list)
                and len(item) == 3
                and isinstance(item[0], str)
                and type(item[1]) is int
                and type(item[2]) is int
            ):
                out[(item[0], item[1])] = item[2]
    return out


def _diff(actual: dict, known: dict) -> str:
    missing = {k: v for k, v in known.items() if actual.get(k) != v}
    extra = {k: v for k, v in actual.items() if k not in known}
    return f"missing/changed {dict(list(missing.items())[:5])}, unexpected {dict(list(extra.items())[:5])}"
