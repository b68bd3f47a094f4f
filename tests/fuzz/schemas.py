"""A valid body for every message type the coordinator answers, as hypothesis strategies.

``discover_handlers()`` lists the message types and classes exactly as the
coordinator's services register them (``server.add_handler``), by attaching
every service class of the coordinator package to a recorder. Every listed
type must have a schema here: a body strategy whose values the server accepts
(names from small pools, so that requests of one batch meet the same groups,
regions and members). A type registered by a future service without a schema
here falls back to a body derived from its attrs fields, and the fuzz test's
completeness check names it.

Names: ``TRACKED_GROUPS`` are the groups whose writes the model checks
exactly; frames whose request id is mutated use ``UNTRACKED_GROUPS`` (their
replies cannot be matched to the request, so their effect is unknown).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import strategies as st

import coordinator
from coordinator.services.registry import RegistryService

TRACKED_GROUPS = [f"g{i}" for i in range(6)]
UNTRACKED_GROUPS = [f"u{i}" for i in range(3)]
OPERATORS = [f"op{i}" for i in range(4)]
REGIONS = [f"r{i}" for i in range(24)]
MEMBERS = [f"m{i}" for i in range(3)]
INCARNATIONS = ["i0", "i1"]
TOPICS = ["t0", "t1", "t2"]


class _HandlerRecorder:
    """Stands in for the server while services attach: records their add_handler calls."""

    #: No metrics: services attach without registering their collectors.
    metrics = None

    def __init__(self) -> None:
        self.handlers: dict[str, type] = {}

    def add_handler(self, msg_type: str, message_cls: type, handler: Callable[..., Any]) -> None:
        self.handlers[msg_type] = message_cls


def service_classes() -> list[type]:
    """Every service class of the coordinator package and its sub-packages: a class defined
    there with an ``attach`` method."""
    found: list[type] = []
    for info in pkgutil.walk_packages(coordinator.__path__, "coordinator."):
        if info.name.rpartition(".")[2] == "__main__":
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and "attach" in vars(cls) and not _is_protocol(cls):
                found.append(cls)
    return found


def _is_protocol(cls: type) -> bool:
    return typing.Protocol in cls.__mro__[1:] and cls.__dict__.get("_is_protocol", False)


def discover_handlers() -> dict[str, type]:
    """Message type -> message class, for every service of the coordinator package.

    Each service is attached to a recorder of ``add_handler`` calls; a
    constructor parameter named ``registry`` gets the shared RegistryService
    (as coordinator/cli/serve.py wires them), other parameters are not supported.
    """
    recorder = _HandlerRecorder()
    registry = RegistryService()
    for cls in service_classes():
        params = [p for p in inspect.signature(cls).parameters.values() if p.default is inspect.Parameter.empty]
        if any(p.name != "registry" for p in params):
            raise TypeError(
                f"{cls.__qualname__}{inspect.signature(cls)}: the fuzzer cannot build this service; "
                f"teach tests/fuzz/schemas.py how"
            )
        service = registry if cls is RegistryService else cls(**{p.name: registry for p in params})
        service.attach(recorder)  # the recorder has the one method attach uses
    return recorder.handlers


# --------------------------------------------------------------------------- field strategies


def offsets(max_size: int = 6) -> st.SearchStrategy[list[list[Any]]]:
    """A valid offset map as triples, each (topic, partition) once."""
    return st.dictionaries(
        st.tuples(st.sampled_from(TOPICS), st.integers(0, 7)), st.integers(0, 10_000), max_size=max_size
    ).map(lambda d: [[t, p, o] for (t, p), o in d.items()])


def claims(max_size: int = 6) -> st.SearchStrategy[list[list[Any]]]:
    """A valid checkpoint answer: [topic, partition, from, to] entries (from <= to), each
    (topic, partition) once."""
    entry = st.tuples(st.integers(0, 10_000), st.integers(0, 50)).map(lambda a: [a[0], a[0] + a[1]])
    return st.dictionaries(st.tuples(st.sampled_from(TOPICS), st.integers(0, 7)), entry, max_size=max_size).map(
        lambda d: [[t, p, *e] for (t, p), e in d.items()]
    )


def transactions() -> st.SearchStrategy[dict[str, Any]]:
    """A checkpoint answer's Kafka transactions (coordinator/protocol/region/transactions.py)."""
    tid = st.sampled_from(["tx-0", "tx-1", "tx-2"])
    partition = st.tuples(st.sampled_from(TOPICS), st.integers(0, 7), st.integers(0, 10_000)).map(list)
    prepared = st.fixed_dictionaries(
        {
            "tid": tid,
            "pid": st.integers(0, 1 << 20),
            "epoch": st.integers(0, (1 << 15) - 1),
            "partitions": st.lists(partition, max_size=3),
        }
    )
    bootstrap = st.one_of(st.none(), st.sampled_from(["127.0.0.1:9092", "kafka-0.example:9093,[::1]:9092"]))
    return st.fixed_dictionaries(
        {"prepared": st.lists(prepared, max_size=2), "fence": st.lists(tid, max_size=3), "bootstrap": bootstrap}
    )


def region_config() -> st.SearchStrategy[dict[str, Any]]:
    """A RegionConfig dict (without ``name``): small timeouts so that time-driven paths run within a batch."""
    seconds = st.sampled_from([0.02, 0.05, 0.2, 1.0, 30.0])
    return st.fixed_dictionaries(
        {},
        optional={
            "index": st.integers(0, 2),
            "mode": st.sampled_from(["periodic", "operator_driven"]),
            "period_s": seconds,
            "drain_timeout_s": seconds,
            "reset_timeout_s": seconds,
            "max_consecutive_resets": st.integers(1, 4),
            "failure_memory_s": seconds,
            "reset_backoff_s": seconds,
            "reset_backoff_max_s": seconds,
            "member_timeout_s": seconds,
            "min_members": st.integers(1, 3),
            "join_grace_s": seconds,
            "rebalance_settle_max_s": seconds,
        },
    )


def _who() -> dict[str, st.SearchStrategy[Any]]:
    return {
        "region": st.sampled_from(REGIONS),
        "member": st.sampled_from(MEMBERS),
        "incarnation": st.sampled_from(INCARNATIONS),
    }


def _kafka_report() -> st.SearchStrategy[Any]:
    return st.none() | st.fixed_dictionaries(
        {
            "member_id": st.none() | st.sampled_from(["k-a", "k-b"]),
            "generation": st.none() | st.integers(0, 5),
            "rebalancing": st.booleans(),
        }
    )


def body_schemas(groups: list[str]) -> dict[str, st.SearchStrategy[dict[str, Any]]]:
    """Valid body strategies by message type; group names drawn from ``groups``."""
    group = st.sampled_from(groups)
    op = st.sampled_from(OPERATORS)
    seq = st.integers(0, 6)
    return {
        "ping": st.just({}),
        "status": st.just({}),
        "register": st.fixed_dictionaries({"group": group, "region_index": st.integers(0, 2), "operator": op}),
        "unregister": st.fixed_dictionaries({"group": group, "operator": op}),
        "members": st.fixed_dictionaries({"group": group}),
        "put_initial_offsets": st.fixed_dictionaries({"group": group, "offsets": offsets()}),
        "get_initial_offsets": st.fixed_dictionaries({"group": group}),
        "merge_checkpoint": st.fixed_dictionaries(
            {
                "group": group,
                "seq": seq,
                "attempt": st.integers(0, 2),
                "n_contributors": st.integers(1, 3),
                "operator": op,
                "offsets": offsets(),
                "timeout_ms": st.sampled_from([1, 50, 300]),
            }
        ),
        "retire_checkpoint": st.fixed_dictionaries({"group": group, "seq": seq}),
        "set_reset_pending": st.fixed_dictionaries({"group": group, "value": st.booleans()}),
        "region_join": st.fixed_dictionaries(
            {**_who(), "pid": st.none() | st.integers(1, 1 << 22), "config": region_config()},
            optional={"host": st.sampled_from(["h1", "h2"]), "replace": st.booleans()},
        ),
        "region_heartbeat": st.fixed_dictionaries(_who(), optional={"kafka": _kafka_report()}),
        "region_ack": st.fixed_dictionaries(
            {
                **_who(),
                "command": st.sampled_from(["drain", "checkpoint", "reset"]),
                "seq": st.none() | seq,
                "attempt": st.none() | st.integers(0, 8),
                "ok": st.booleans(),
                "error": st.none() | st.just("sink failed"),
                "offsets": st.none() | claims(),
            },
            optional={"rebalance": st.booleans(), "transactions": st.none() | transactions()},
        ),
        "region_reset_request": st.fixed_dictionaries(
            {**_who(), "force": st.booleans(), "reason": st.sampled_from(["rebalance", "sink error"])}
        ),
        "region_trigger": st.fixed_dictionaries(_who()),
        "region_leave": st.fixed_dictionaries(_who()),
        "region_status": st.fixed_dictionaries({}, optional={"region": st.sampled_from(REGIONS)}),
    }


def derived_body(message_cls: type) -> st.SearchStrategy[dict[str, Any]]:
    """A body for a message class without a schema: one value per attrs field, by its annotation."""
    hints = typing.get_type_hints(message_cls)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in attrs.fields(message_cls):
        hint = str(hints.get(field.name, ""))
        if "bool" in hint:
            fields[field.name] = st.booleans()
        elif "int" in hint:
            fields[field.name] = st.integers(0, 10)
        elif "dict[tuple" in hint or field.name == "offsets":
            fields[field.name] = offsets()
        elif "dict" in hint:
            fields[field.name] = st.just({})
        elif "list" in hint:
            fields[field.name] = st.just([])
        else:
            fields[field.name] = st.sampled_from(TRACKED_GROUPS + OPERATORS)
    return st.fixed_dictionaries(fields)
