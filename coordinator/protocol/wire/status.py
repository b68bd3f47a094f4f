"""The coordinator's ``status`` reply (``status_reply``, and the JSON of HTTP
``/status``), as frozen attrs classes with ``to_body`` and a validating
``from_body``.

1. The server loop (``CoordinatorServer.status_snapshot``) builds a
   `CoordinatorStatus` with its own part: endpoint, its `Role`, the leader it
   knows (`LeaderInfo`: itself when it leads), load state, uptime, the
   store's `StoreStats`, the replay's `LoadReport`, the resource limits.
2. Each service fills its part (``Service.add_status``): the registry its
   `RegistryStatus` (groups, limit rejections), the merge service its
   `MergeStatus` (pending merges), the region controller the regions
   (``coordinator/protocol/region/status.py``).
3. ``to_body`` is the wire form (versioned: ``version`` is
   :data:`STATUS_VERSION`); the ``status`` handler returns it through
   ``coordinator.server.api.route``, HTTP ``/status`` serves it as JSON and
   ``/`` renders the typed snapshot as a page.
4. The client (``CoordinatorClient.status``) decodes it with ``from_body``:
   another version is refused, every field is type-checked and every count
   bounded; a body that does not validate raises
   :class:`~coordinator.protocol.wire.errors.Invalid` naming the field.

docs/protocol.md has the reply's JSON keys.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from coordinator.protocol.common.endpoints import check_endpoint
from coordinator.protocol.region.status import MAX_STATUS_REGIONS, RegionStatus, decode_regions, encode_regions
from coordinator.protocol.wire.envelope import MAX_EPOCH
from coordinator.protocol.wire.errors import Invalid
from coordinator.protocol.wire.fields import (
    MAX_CONTRIBUTORS,
    decode_count_table,
    decode_list,
    decode_map,
    decode_names,
    decode_number_table,
    decode_part,
    opt_int,
    opt_name,
    req_bool,
    req_enum,
    req_int,
    req_number,
    req_object,
    req_str,
)

#: Version of the status body; a client refuses any other (0.x: a change of the
#: body's keys is a new version, no compatibility shims).
STATUS_VERSION = 2
#: Most groups a status lists (the registry lists at most STATUS_MAX_GROUPS).
MAX_STATUS_GROUPS = 100_000
#: Most member names listed per group (the registry lists at most STATUS_MAX_MEMBERS).
MAX_STATUS_GROUP_MEMBERS = 100_000
#: Most pending merges listed (the server holds at most ``Limits.max_pending_merges``).
MAX_STATUS_MERGES = 1_000_000
#: Most entries of the limits and limit-rejection tables (one per limit: a handful).
MAX_STATUS_LIMITS = 64


# --------------------------------------------------------------------------- the server's part


class Role(str, enum.Enum):
    """What a coordinator process is now (the string is what travels)."""

    #: Loaded and serving: every request is answered here.
    LEADER = "leader"
    #: A standby following the leader's log (``--standby``): requests get NOT_LEADER naming
    #: the leader once it knows one, LOAD_IN_PROGRESS before.
    STANDBY = "standby"
    #: Replaying its log (a start, or a standby taking over): requests get LOAD_IN_PROGRESS.
    LOADING = "loading"


def _endpoint_or_none(_instance: object, _attribute: object, value: str | None) -> None:
    if value is not None:
        check_endpoint(value)


@attrs.frozen
class LeaderInfo:
    """The leader a coordinator knows: its advertised endpoint (None: a leader that advertises
    none, e.g. a store opened without a server) and its epoch (envelope ``epoch``)."""

    endpoint: str | None = attrs.field(validator=_endpoint_or_none)
    epoch: int = attrs.field(validator=[attrs.validators.ge(0), attrs.validators.le(MAX_EPOCH)])


@attrs.frozen
class LoadReport:
    """What the replay of the durable log found at start-up (``coordinator/store/replay.py``)."""

    records: int
    entries: int
    bytes: int
    seconds: float
    #: Bytes of a torn or corrupt tail cut off.
    truncated_bytes: int

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> LoadReport:
        return cls(
            req_int(body, "records"),
            req_int(body, "entries"),
            req_int(body, "bytes"),
            req_number(body, "seconds"),
            req_int(body, "truncated_bytes"),
        )


@attrs.frozen
class StoreStats:
    """The state store's counters (``StateStore.stats``): status and metrics."""

    control_variables: int
    groups: int
    documents: int
    #: Size of the durable log (the segment file, or the Kafka topic's live part).
    log_bytes: int
    log_records: int
    live_entries: int
    dead_entries: int
    compactions: int
    compaction_running: bool
    compaction_failures: int
    expire_failures: int
    largest_compaction_record_bytes: int
    compaction_max_pause_ms: float
    fsyncs: int
    load_seconds: float
    truncated_bytes: int

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> StoreStats:
        return cls(
            control_variables=req_int(body, "control_variables"),
            groups=req_int(body, "groups"),
            documents=req_int(body, "documents"),
            log_bytes=req_int(body, "log_bytes"),
            log_records=req_int(body, "log_records"),
            live_entries=req_int(body, "live_entries"),
            dead_entries=req_int(body, "dead_entries"),
            compactions=req_int(body, "compactions"),
            compaction_running=req_bool(body, "compaction_running"),
            compaction_failures=req_int(body, "compaction_failures"),
            expire_failures=req_int(body, "expire_failures"),
            largest_compaction_record_bytes=req_int(body, "largest_compaction_record_bytes"),
            compaction_max_pause_ms=req_number(body, "compaction_max_pause_ms"),
            fsyncs=req_int(body, "fsyncs"),
            load_seconds=req_number(body, "load_seconds"),
            truncated_bytes=req_int(body, "truncated_bytes"),
        )


# --------------------------------------------------------------------------- the services' parts


@attrs.frozen
class GroupStatus:
    """One registered group (``coordinator/services/registry.py``)."""

    region_index: int | None
    #: Registered names, sorted, the first STATUS_MAX_MEMBERS of them.
    members: tuple[str, ...]
    #: All registered names, listed or not.
    n_members: int
    reset_pending: bool
    control_variables: int

    def to_body(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "members": list(self.members)}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> GroupStatus:
        return cls(
            opt_int(body, "region_index"),
            decode_names(body, "members", MAX_STATUS_GROUP_MEMBERS),
            req_int(body, "n_members"),
            req_bool(body, "reset_pending"),
            req_int(body, "control_variables"),
        )


@attrs.frozen
class RegistryStatus:
    """The registry's part: the groups (sorted, the first STATUS_MAX_GROUPS), how
    many there are, and the requests each limit rejected."""

    groups: dict[str, GroupStatus]
    n_groups: int
    limit_rejections: dict[str, int]


@attrs.frozen
class PendingMerge:
    """A checkpoint merge waiting for contributions (``coordinator/services/merge.py``)."""

    group: str
    seq: int
    attempt: int
    n_contributors: int
    #: Who contributed so far, sorted.
    contributors: tuple[str, ...]
    #: Contributors waiting for the merged answer, sorted.
    waiting: tuple[str, ...]
    age_s: float

    def to_body(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "contributors": list(self.contributors), "waiting": list(self.waiting)}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PendingMerge:
        return cls(
            req_str(body, "group"),
            req_int(body, "seq"),
            req_int(body, "attempt"),
            req_int(body, "n_contributors", 1, MAX_CONTRIBUTORS),
            decode_names(body, "contributors", MAX_CONTRIBUTORS),
            decode_names(body, "waiting", MAX_CONTRIBUTORS),
            req_number(body, "age_s"),
        )


@attrs.frozen
class MergeStatus:
    """The merge service's part: the pending merges and their estimated memory,
    merges completed and contributions timed out since the start."""

    pending: tuple[PendingMerge, ...]
    pending_bytes: int
    completed: int
    timeouts: int


# --------------------------------------------------------------------------- the reply


@attrs.frozen
class CoordinatorStatus:
    """``status_reply`` and HTTP ``/status``. The services' parts are None until
    the store is loaded (and for a coordinator that does not run the service)."""

    #: The endpoint the loop is bound to (None before the bind).
    endpoint: str | None
    loaded: bool
    uptime_s: float
    #: None until the store is loaded.
    store: StoreStats | None
    #: None until the replay finished.
    load: LoadReport | None
    #: The resource limits (``coordinator/server/limits.py``), by name.
    limits: dict[str, float]
    registry: RegistryStatus | None = None
    merge: MergeStatus | None = None
    #: Region name -> its status (None: no region controller, or not loaded yet).
    regions: dict[str, RegionStatus] | None = None
    #: What this process is now (`Role`).
    role: Role = Role.LEADER
    #: The leader's advertised endpoint as this process knows it (its own when it leads;
    #: None: it knows none).
    leader: str | None = None
    #: The leader's epoch (0 when it knows none; 0 always with the file log).
    epoch: int = 0

    def to_body(self) -> dict[str, Any]:
        """The wire form: the server's part, then each service's part under its key."""
        r, m = self.registry, self.merge
        return {
            "version": STATUS_VERSION,
            "endpoint": self.endpoint,
            "role": self.role.value,
            "leader": self.leader,
            "epoch": self.epoch,
            "loaded": self.loaded,
            "uptime_s": self.uptime_s,
            "store": None if self.store is None else self.store.to_body(),
            "load": None if self.load is None else self.load.to_body(),
            "limits": dict(self.limits),
            "registry": None
            if r is None
            else {
                "groups": {g: v.to_body() for g, v in r.groups.items()},
                "n_groups": r.n_groups,
                "limit_rejections": dict(r.limit_rejections),
            },
            "merge": None
            if m is None
            else {
                "pending": [p.to_body() for p in m.pending],
                "pending_bytes": m.pending_bytes,
                "completed": m.completed,
                "timeouts": m.timeouts,
            },
            "regions": None if self.regions is None else encode_regions(self.regions),
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> CoordinatorStatus:
        version = body.get("version")
        if version != STATUS_VERSION or isinstance(version, bool):
            raise Invalid(f"field 'version' must be {STATUS_VERSION}, got {version!r:.40}")
        store = body.get("store")
        load = body.get("load")
        return cls(
            endpoint=opt_name(body, "endpoint"),
            role=req_enum(Role, body, "role"),
            leader=_opt_endpoint(body, "leader"),
            epoch=req_int(body, "epoch", 0, MAX_EPOCH),
            loaded=req_bool(body, "loaded"),
            uptime_s=req_number(body, "uptime_s"),
            store=None if store is None else decode_part("store", StoreStats.from_body, req_object(body, "store")),
            load=None if load is None else decode_part("load", LoadReport.from_body, req_object(body, "load")),
            limits=decode_number_table(body, "limits", MAX_STATUS_LIMITS),
            registry=None if body.get("registry") is None else _registry(req_object(body, "registry")),
            merge=None if body.get("merge") is None else _merge(req_object(body, "merge")),
            regions=None if body.get("regions") is None else decode_regions(body),
        )


def _opt_endpoint(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    try:
        return check_endpoint(value)
    except ValueError as exc:
        raise Invalid(f"field {name!r}: {exc}") from None


def _registry(body: Mapping[str, Any]) -> RegistryStatus:
    try:
        return RegistryStatus(
            decode_map(body, "groups", MAX_STATUS_GROUPS, GroupStatus.from_body),
            req_int(body, "n_groups"),
            decode_count_table(body, "limit_rejections", MAX_STATUS_LIMITS),
        )
    except Invalid as exc:
        raise Invalid(f"registry: {exc.message}") from None


def _merge(body: Mapping[str, Any]) -> MergeStatus:
    try:
        return MergeStatus(
            tuple(decode_list(body, "pending", MAX_STATUS_MERGES, PendingMerge.from_body)),
            req_int(body, "pending_bytes"),
            req_int(body, "completed"),
            req_int(body, "timeouts"),
        )
    except Invalid as exc:
        raise Invalid(f"merge: {exc.message}") from None


__all__ = [
    "MAX_STATUS_GROUPS",
    "MAX_STATUS_GROUP_MEMBERS",
    "MAX_STATUS_LIMITS",
    "MAX_STATUS_MERGES",
    "MAX_STATUS_REGIONS",
    "STATUS_VERSION",
    "CoordinatorStatus",
    "GroupStatus",
    "LeaderInfo",
    "LoadReport",
    "MergeStatus",
    "PendingMerge",
    "RegistryStatus",
    "Role",
    "StoreStats",
]
