"""Setting up a member: its settings, loading the pipeline module, building its
Kafka source, and telling rebalance-caused failures from real ones (used by
``process.py`` and ``executor.py``)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs

from coordinator.protocol.region.config import RegionConfig
from cr_consumer.kafka.properties import redacted_repr
from cr_consumer.operator.region import RegionPermit, RegionRequests
from cr_consumer.runtime.pipeline.wiring import KafkaSource

#: The region runtime's Kafka defaults, under the pipeline's and the member's
#: own properties: incremental rebalancing, so a membership change stops only
#: the partitions that move (docs/region.md, "Cooperative (incremental)
#: rebalancing"); ``partition.assignment.strategy=range,roundrobin`` is eager.
#: ``fetch.max.bytes``: Kafka's own default (50 MB), not the operator's 1 MB for
#: kafka-python (``DEFAULT_FETCH_MAX_BYTES``, which shortens a drain's wait behind
#: a fetch response being decoded): a member fetches several MB per request like
#: any kafka-python consumer, so ~5x fewer fetch round trips per record, 0.1 us
#: less CPU per record (BENCHMARKS.md, "Pipeline member: CPU per record"), with
#: the same checkpoint stops measured. (librdkafka's
#: default is the same 50 MB.)
RUNTIME_KAFKA_DEFAULTS = {"partition.assignment.strategy": "cooperative-sticky", "fetch.max.bytes": 52428800}

if TYPE_CHECKING:
    from coordinator.client import CoordinatorClient
    from coordinator.protocol.region.transactions import Resolve
    from cr_consumer.operator.consumer import ConsumerOperator
    from cr_consumer.operator.restore_hold import StateRestorer


class SettingsError(ValueError):
    """A setting the member cannot run with (the process exits with ExitCode.CONFIG)."""


#: Kafka errors that mean "the group is rebalancing", not "this member is broken".
_REBALANCE_ERRORS = ("RebalanceInProgressError", "CommitFailedError", "IllegalGenerationError", "UnknownMemberIdError")


def caused_by_rebalance(exc: BaseException) -> bool:
    """True when a failed drain/checkpoint/reset was caused by a group rebalance
    (the controller then resets in force mode: a rebalance is not a failure and
    must not count towards max_consecutive_resets)."""
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 10:
        if type(cause).__name__ in _REBALANCE_ERRORS or "rebalanc" in str(cause).lower():
            return True
        cause = cause.__cause__ or cause.__context__
        seen += 1
    return False


def split_spec(spec: str) -> tuple[str, str]:
    """``module``, ``module:attr``, ``path.py`` or ``path.py:attr`` -> (module or path, attr);
    the attribute defaults to ``build``."""
    where, sep, attr = spec.rpartition(":")
    if not sep or "/" in attr or attr.endswith(".py"):
        return spec, "build"
    if not attr.isidentifier():
        raise SettingsError(f"pipeline {spec!r}: {attr!r} is not a Python name (give MODULE:FUNCTION)")
    return where, attr


def default_stem(pipeline: str) -> str:
    """``examples.wordcount``, ``examples/wordcount.py`` or ``...:build`` -> ``wordcount``."""
    return Path(split_spec(pipeline)[0]).name.removesuffix(".py").split(".")[-1]


def load_pipeline_module(spec: str) -> ModuleType:
    """A module name (``examples.wordcount``, imported with the working directory on
    ``sys.path``, as ``python -m`` does) or a path (``examples/wordcount.py``);
    an optional ``:attr`` names the build function (default ``build``)."""
    spec, attr = split_spec(spec)
    if spec.endswith(".py") or "/" in spec:
        path = Path(spec)
        if not path.is_file():
            raise SettingsError(f"pipeline module {spec!r}: no such file")
        name = f"crpipeline_{path.stem}"
        loaded = sys.modules.get(name)
        if loaded is not None and os.path.realpath(getattr(loaded, "__file__", None) or "") == os.path.realpath(path):
            module = loaded  # loaded ahead by a standby process (cr_consumer/cli/standby.py): not run twice
        else:
            mod_spec = importlib.util.spec_from_file_location(name, path)
            if mod_spec is None or mod_spec.loader is None:
                raise SettingsError(f"pipeline module {spec!r} cannot be loaded")
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            try:
                mod_spec.loader.exec_module(module)
            except BaseException:  # re-raised; a half-run module must not be reused (as importlib does)
                sys.modules.pop(name, None)
                raise
    else:
        cwd = os.getcwd()
        if cwd not in sys.path and "" not in sys.path:
            sys.path.insert(0, cwd)
        try:
            module = importlib.import_module(spec)
        except ModuleNotFoundError as exc:
            raise SettingsError(
                f"pipeline module {spec!r} not found ({exc}); give a module name or a .py path"
            ) from None
    if not callable(getattr(module, attr, None)):
        raise SettingsError(f"pipeline module {spec!r} has no {attr}(ctx) -> Pipeline function")
    return module


def load_build(spec: str) -> Callable[..., object]:
    """The build function ``spec`` names (:func:`load_pipeline_module`, :func:`split_spec`)."""
    # the user's module is untyped: its build function is only known to be callable
    build: Callable[..., object] = getattr(load_pipeline_module(spec), split_spec(spec)[1])
    return build


@attrs.frozen
class MemberSettings:
    """Everything one member process needs (``crkafka member`` builds it from its arguments)."""

    pipeline: str
    bootstrap: str
    coordinator: str
    group: str
    member: str
    output_dir: Path = attrs.field(converter=Path)
    state_dir: Path = attrs.field(converter=Path)
    region_index: int = 0
    #: RegionConfig settings sent with the join (period_s, drain_timeout_s, ...).
    region: dict[str, object] = attrs.field(factory=dict)
    #: ``--param`` values: strings, or ints where the string is an integer.
    params: dict[str, object] = attrs.field(factory=dict)
    #: Kafka consumer properties by dotted name, over the pipeline's own.
    kafka: dict[str, object] = attrs.field(factory=dict, repr=redacted_repr)
    #: The source's Kafka client ("kafka-python" or "librdkafka"); None: the pipeline's choice, else kafka-python.
    kafka_client: str | None = None
    #: CURVE: the coordinator's public key file (.key) and this member's keypair
    #: (.key_secret from ``cr-coordinator keygen``); both or neither.
    curve_server_key: str | None = None
    curve_keypair: str | None = None
    #: Serve /metrics on metrics_host:metrics_port (None: no endpoint; 0: any free port).
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"

    def curve_keys(self) -> tuple[bytes, bytes, bytes] | None:
        """(server public, client public, client secret), or None without CURVE."""
        if (self.curve_server_key is None) != (self.curve_keypair is None):
            raise SettingsError("--curve-server-key and --curve-keypair go together (CURVE needs both)")
        if self.curve_server_key is None or self.curve_keypair is None:
            return None
        from coordinator.protocol.curve_keys import SecurityConfigError, load_keypair, load_public_key

        try:
            server = load_public_key(self.curve_server_key)
            public, secret = load_keypair(self.curve_keypair)
        except SecurityConfigError as exc:
            raise SettingsError(f"CURVE keys: {exc}") from None
        return server, public, secret


def make_source(
    settings: MemberSettings,
    spec: KafkaSource,
    region_config: RegionConfig,
    *,
    permit: RegionPermit,
    region: RegionRequests,
    submit: Callable[[list[Any]], None],
    curve: tuple[bytes, bytes, bytes] | None,
    restorer: StateRestorer | None = None,
) -> tuple[ConsumerOperator, CoordinatorClient | None]:
    """The member's Kafka source for the pipeline's ``spec``: its own options, the
    region's drain/reset timeouts and mode, the member's Kafka properties over the
    pipeline's, over RUNTIME_KAFKA_DEFAULTS. ``region`` is the member (reset requests, operator-driven
    triggers); ``restorer`` the pipeline's partition-scoped state, restored while its partitions
    are held. With CURVE the source gets its own CURVE client, returned for the
    caller to close. Raises SettingsError for settings the source refuses."""
    from cr_consumer.operator.config import ConfigError, OperatorConfig
    from cr_consumer.operator.consumer import ConsumerOperator

    s = settings
    options = dict(spec.options)
    options.setdefault("drain_timeout_s", region_config.drain_timeout_s)
    options.setdefault("reset_timeout_s", region_config.reset_timeout_s)
    if region_config.mode == "operator_driven":
        options.setdefault("region_mode", "operator_driven")
    if s.kafka_client is not None:
        options["client"] = s.kafka_client
    try:
        config = OperatorConfig(
            bootstrap_servers=s.bootstrap,
            group_id=s.group,
            operator_name=s.member,
            coordinator=s.coordinator,
            topics=spec.topics,
            pattern=spec.pattern,
            region_index=s.region_index,
            consumer_properties={**RUNTIME_KAFKA_DEFAULTS, **dict(spec.kafka), **dict(s.kafka)},
            **options,
        )
    except (ConfigError, TypeError) as exc:
        raise SettingsError(f"{s.pipeline}: Kafka source settings: {exc}") from None
    client = None
    if curve is not None:  # the source's own coordinator client must use CURVE too
        from coordinator.client import CoordinatorClient

        server, public, secret = curve
        client = CoordinatorClient(
            s.coordinator, timeout=config.coordinator_timeout_s, curve_server_key=server, curve_keypair=(public, secret)
        )
    source = ConsumerOperator(
        config, submit_batch=submit, permit=permit, region=region, control=client, restorer=restorer
    )
    return source, client


#: The resolver's bound of each Kafka request (a reset's transactions, ``transaction_resolver``):
#: a broker that stops answering fails the reset instead of holding it until its timeout.
RESOLVE_REQUEST_TIMEOUT_MS = 10_000


def transaction_resolver(source: ConsumerOperator) -> Callable[[tuple[Resolve, ...]], None]:
    """The executor's resolver of a reset's Kafka transactions: ``kafka_python.transactions.resolve``
    with the source's cluster and connection settings (a transactional sink writes to the cluster
    the member reads from)."""
    from coordinator.kafka.transactions import resolve
    from cr_consumer.kafka.kafka_python.admin import admin_settings

    config = source.config
    settings = admin_settings(
        config.bootstrap_servers,
        dict(config.consumer_properties),
        request_timeout_ms=RESOLVE_REQUEST_TIMEOUT_MS,
        client_id=f"{config.operator_name}-resolve",
    )

    def resolver(entries: tuple[Resolve, ...]) -> None:
        resolve(settings, entries)

    return resolver
