"""The agent's events: typed, versioned models, one definition for the agent, the store and the server.

Every event is a frozen dataclass with the fields every event carries —
``event_id`` (uuid4 hex: the dedup key, so an event sent twice is stored
once), ``schema_version``, ``instance_id``, ``provider``, ``region``,
``zone``, ``instance_type``, ``job_id``, ``worker_id``, ``time_unix_s`` —
and its own typed fields (``lead_time_s`` and ``cause`` where they apply).
:meth:`AgentEvent.to_dict` gives plain JSON types with ``kind`` beside the
fields; :func:`event_from_dict` reads one back. The instance's own
``events.jsonl`` (:mod:`spothop.agent.events`), the embedded store's
``agent_events`` rows and the HTTP control plane's request bodies all hold
exactly these dictionaries.

Reading back what this code does not know is explicit, never a guess:

- an unknown ``kind`` at a schema version this code reads comes back as
  :class:`UnknownEvent` (its common fields parsed, the rest kept whole in
  ``fields``), so a reader can skip it or store it as it is;
- a ``schema_version`` newer than :data:`SCHEMA_VERSION` also comes back as
  :class:`UnknownEvent`, with ``reason`` saying so, even for a known kind:
  a newer writer may have changed what a field means;
- a dictionary without an ``event_id``, ``kind`` or ``instance_id``, or with a
  field of the wrong type, raises :class:`EventFormatError`.

The bounds of the fields every event carries are declared on them
(:mod:`spothop.wire.fields`); the server checks a received event against them.

Standard library only: the agent imports it while it watches.
"""

from __future__ import annotations

import copy
import dataclasses
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from spothop.wire.errors import EventFormatError
from spothop.wire.fields import (
    EventId,
    Id,
    OptionalId,
    Place,
    Provider,
    SchemaVersionNumber,
    UnixTime,
)

SCHEMA_VERSION = 1  # bump when a field's meaning changes; adding an optional field does not need it


def new_event_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, kw_only=True)
class Stamp:
    """Who an event (or a registration) is about: the instance, where it runs, its job and worker."""

    instance_id: Id
    provider: Provider = ""
    region: Place = ""
    zone: Place = ""
    instance_type: Place = ""
    job_id: OptionalId = ""
    worker_id: OptionalId = ""


@dataclass(frozen=True, kw_only=True)
class AgentEvent(Stamp):
    """What every event carries. Subclasses set :attr:`kind` and add their own fields."""

    kind: ClassVar[str] = ""  # on the wire: a string of 1..32 characters (fields.EventKind)
    time_unix_s: UnixTime = field(default_factory=time.time)
    event_id: EventId = field(default_factory=new_event_id)
    schema_version: SchemaVersionNumber = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: ``kind`` first, then every field (tuples become lists, mappings dicts).

        Built from the class's field names, read once (:func:`field_names`), not with
        ``dataclasses.asdict``, which copies every value deeply: the server turns every event it
        stores into this dictionary, and most fields are strings and numbers, kept as they are."""
        out: dict[str, Any] = {"kind": self.kind}
        for name in field_names(type(self)):
            out[name] = _plain(getattr(self, name))
        return out


_SCALARS = frozenset({str, int, float, bool, type(None)})


_FIELD_NAMES: dict[type[AgentEvent], tuple[str, ...]] = {}


def field_names(cls: type[AgentEvent]) -> tuple[str, ...]:
    """The fields of the event class ``cls``, in their order (read once per class)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _plain(value: Any) -> Any:
    """A copy of ``value`` in plain JSON types (what ``dataclasses.asdict`` would copy deeply)."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return copy.deepcopy(value)


# -- start-up and supervision ----------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SelfCheckEvent(AgentEvent):
    """The start-up check: ``notice_blind`` when a notice might be missed, ``reasons`` why, and what the
    endpoint said this instance is (``identity``)."""

    kind: ClassVar[str] = "self_check"
    protocol: str = ""
    notice_blind: bool = False
    reasons: tuple[str, ...] = ()
    # What the metadata endpoint answered (instance_id, instance_type, region, zone, and ``fallbacks``:
    # the degraded modes it is read in, e.g. AWS IMDSv1), beside the stamp the agent settled on.
    identity: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class NoticeBlind(AgentEvent):
    """The instance may miss an interruption notice; the scheduler keeps spot work off its type."""

    kind: ClassVar[str] = "notice_blind"
    protocol: str = ""
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Probe(AgentEvent):
    """The first-boot GPU probe of this instance type: whether it ran, and why (not)."""

    kind: ClassVar[str] = "probe"
    ran: bool = False
    reason: str = ""
    duration_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class WorkerStarted(AgentEvent):
    kind: ClassVar[str] = "worker_started"
    pid: int = 0
    command: tuple[str, ...] = ()
    restarts: int = 0


@dataclass(frozen=True, kw_only=True)
class WorkerExited(AgentEvent):
    """The worker's process ended with ``code``. ``phase``: the part of the job's command it
    was in (``setup`` or ``run``, as the launcher's driver wrote it to
    :func:`~spothop.wire.logs.worker_phase_path`; empty where not known): a failing ``setup``
    is told apart from a failing ``run``."""

    kind: ClassVar[str] = "worker_exited"
    code: int = 0
    restarts: int = 0
    phase: str = ""


@dataclass(frozen=True, kw_only=True)
class WatcherRestarted(AgentEvent):
    kind: ClassVar[str] = "watcher_restarted"
    protocol: str = ""
    restarts: int = 0


@dataclass(frozen=True, kw_only=True)
class RequestReceived(AgentEvent):
    """The control plane asked something of this instance (``checkpoint`` now, ``stop``)."""

    kind: ClassVar[str] = "request_received"
    request_id: str = ""
    request: str = ""
    reason: str = ""


# -- notices and the emergency protocol --------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _NoticeEvent(AgentEvent):
    """The fields of an event about a notice: what was read, when the cloud issued it, the lead it gave."""

    protocol: str = ""
    cause: str = ""
    notice_id: str | None = None  # the cloud's own id for the event, where it gives one
    notice_time_unix_s: float = 0.0
    deadline_unix_s: float | None = (
        None  # when the instance will be taken (an advance notice: may be None)
    )
    lead_time_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class AdvanceNotice(_NoticeEvent):
    """The instance may be taken soon; the worker was asked for a durable checkpoint (``checkpoint_seq``)."""

    kind: ClassVar[str] = "advance_notice"
    checkpoint_seq: int = 0


@dataclass(frozen=True, kw_only=True)
class FinalNotice(_NoticeEvent):
    """The instance will be taken at ``deadline_unix_s``; the emergency protocol starts."""

    kind: ClassVar[str] = "final_notice"
    raw: str = ""


@dataclass(frozen=True, kw_only=True)
class SaveRequested(AgentEvent):
    """The worker was told to stop: by ``sigterm`` or its ``callback``, with ``budget_s`` to save."""

    kind: ClassVar[str] = "save_requested"
    cause: str = ""
    delivery: str = ""  # "sigterm" | "callback" | "none" (the worker had already gone)
    budget_s: float = 0.0
    deadline_unix_s: float | None = None
    lead_time_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Saved(AgentEvent):
    """How the save ended: ``saved`` (the worker said so), ``exited`` (it ended in time), ``nothing``."""

    kind: ClassVar[str] = "saved"
    outcome: str = ""
    detail: Mapping[str, Any] | None = None
    duration_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Uploaded(AgentEvent):
    kind: ClassVar[str] = "uploaded"
    ok: bool = False
    error: str | None = None
    duration_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class LeasesReleased(AgentEvent):
    """``count`` leases went back to the queue (None: it failed, ``error`` says why); ``via`` names the path."""

    kind: ClassVar[str] = "leases_released"
    count: int | None = None
    cause: str = ""
    via: str = (
        ""  # "control-plane" | "queue" (locally, the control plane being unreachable) | "hook"
    )
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Interruption(_NoticeEvent):
    """One preemption as the agent handled it; the store's preemption history is written from it."""

    kind: ClassVar[str] = "interruption"
    notice_kind: str = ""
    budget_s: float = 0.0
    saved: str = ""
    saved_detail: Mapping[str, Any] | None = None
    uploaded: bool | None = None  # None: no upload hook
    leases_released: int | None = None  # None: nothing released them, or it failed
    steps_s: Mapping[str, float] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class InterruptionRecorded(AgentEvent):
    """The interruption reached the control plane (or its spool); every step's time, the record's included."""

    kind: ClassVar[str] = "interruption_recorded"
    steps_s: Mapping[str, float] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Exited(AgentEvent):
    """The agent's own exit, with its code (0 done, 75 preempted, 1 the worker failed)."""

    kind: ClassVar[str] = "exited"
    code: int = 0


@dataclass(frozen=True, kw_only=True)
class UnknownEvent(AgentEvent):
    """An event this code cannot read as its kind: ``reason`` says why, ``fields`` keeps the rest whole."""

    unknown_kind: str = ""
    reason: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        common = {name: getattr(self, name) for name in _COMMON}
        return {**dict(self.fields), "kind": self.unknown_kind, **common}


EVENT_TYPES: dict[str, type[AgentEvent]] = {
    cls.kind: cls
    for cls in (
        SelfCheckEvent,
        NoticeBlind,
        Probe,
        WorkerStarted,
        WorkerExited,
        WatcherRestarted,
        RequestReceived,
        AdvanceNotice,
        FinalNotice,
        SaveRequested,
        Saved,
        Uploaded,
        LeasesReleased,
        Interruption,
        InterruptionRecorded,
        Exited,
    )
}
_COMMON = field_names(AgentEvent)


def event_from_dict(data: Mapping[str, Any]) -> AgentEvent:
    """The event ``data`` describes (see the module docstring for unknown kinds and newer versions)."""
    for name in ("event_id", "kind", "instance_id"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise EventFormatError(
                f"an agent event needs a non-empty string {name!r}; got {data.get(name)!r}"
            )
    version = data.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise EventFormatError(f"schema_version must be a positive integer; got {version!r}")
    cls = EVENT_TYPES.get(str(data["kind"]))
    if cls is None or version > SCHEMA_VERSION:
        reason = (
            f"unknown kind {data['kind']!r}"
            if cls is None
            else f"schema_version {version} is newer than this code's {SCHEMA_VERSION}: upgrade spothop"
        )
        common = {name: data[name] for name in _COMMON if name in data}
        rest = {k: v for k, v in data.items() if k not in _COMMON and k != "kind"}
        return _build(
            UnknownEvent, {**common, "unknown_kind": data["kind"], "reason": reason, "fields": rest}
        )
    names = _NAME_SETS.get(cls)
    if names is None:
        names = _NAME_SETS[cls] = frozenset(field_names(cls))
    return _build(cls, {k: v for k, v in data.items() if k in names})


_NAME_SETS: dict[type[AgentEvent], frozenset[str]] = {}


def _build(cls: type[AgentEvent], values: dict[str, Any]) -> AgentEvent:
    for name, value in values.items():  # only fields of ``cls`` (another name fails in cls(...))
        if isinstance(value, list):
            values[name] = tuple(value)
    if not isinstance(values.get("time_unix_s", 0.0), int | float):
        raise EventFormatError(f"time_unix_s must be a number; got {values['time_unix_s']!r}")
    try:
        return cls(**values)
    except TypeError as exc:
        raise EventFormatError(f"{cls.__name__}: {exc}") from exc
