"""The one interface between the agent and the control plane: :class:`ControlPlane`, and what it carries.

The bodies (:class:`Registration`, :class:`Heartbeat`, the events of
:mod:`spothop.wire.events`, :class:`LeaseRelease`) are declared here once, with
the bounds of their fields (:mod:`spothop.wire.fields`): the agent builds them,
the store side (:mod:`spothop.controlplane`) reads them, and the server's
request-body models are derived from them (:mod:`spothop.controlplane.bodies`).

Contracts every implementation keeps (``tests/controlplane/test_conformance.py``
runs them on each):

- :meth:`ControlPlane.register` — once at start, after the self-check: who
  this instance is and whether it is notice-blind. Calling it again replaces
  the registration.
- :meth:`ControlPlane.heartbeat` — the latest beat per instance wins.
- :meth:`ControlPlane.record` — store one event. Idempotent by
  ``event.event_id``: an event recorded twice is stored once. An
  ``interruption`` event also goes to the market's preemption history.
  Implementations that can lose their link (HTTP) never raise for that: the
  event waits in their spool and is sent when the link is back.
- :meth:`ControlPlane.release_leases` — put every shard leased to
  ``worker_id`` back in its queue; return how many.
- :meth:`ControlPlane.requests` — what the control plane asks of this
  instance and the agent has not yet acknowledged, oldest first;
  :meth:`ControlPlane.acknowledge` marks one handled.
- :meth:`ControlPlane.prepare` — called when a final notice arrives, before
  the worker's save: import or connect what the emergency protocol's last
  steps need, so that cost runs while the worker saves instead of after.
  Never raises; may return at once and finish in the background.
- :meth:`ControlPlane.ship_log` — store one :class:`~spothop.wire.logs.LogChunk` of an
  attempt's output, in order: a chunk at the stored end is appended, the part of a chunk
  already stored is skipped (a resend stores nothing twice), and a chunk past the stored end
  raises :class:`~spothop.wire.errors.LogOffsetGap` carrying the stored end (resend from
  there). Never duplicated, never reordered. The HTTP plane raises
  :class:`~spothop.wire.errors.ControlPlaneError` while the server is unreachable (the agent's
  shipper keeps the bytes in the file and retries: the file is the spool).
- :meth:`ControlPlane.rendezvous` — a grouped task's node asks where its group meets
  (:class:`~spothop.wire.group.Rendezvous`: node 0's registered private address, the
  generation's port, this instance's rank, the group's shape, every node's address in rank
  order), for the attempt of the job's current generation this instance runs. None while
  not every node of that generation has registered an address (or the instance runs no
  such attempt): the agent asks again later. The same answer for every node of a generation.
- :meth:`ControlPlane.secrets` — the values of the job's secrets (NAME → value), for the live
  attempt this instance runs, asked with the instance's own token (another instance's path is
  refused: 403). Empty when the instance runs no live attempt or the job has none. The agent
  asks once before its worker starts and puts them in the worker's environment only; they are
  never in a boot script, the launch's environment, a log or an event.
- :meth:`ControlPlane.flush` — try to deliver what is spooled, within
  ``timeout_s``; returns how many events are still waiting.

Any method but ``record``, ``prepare`` and ``flush`` may raise
:class:`~spothop.wire.errors.ControlPlaneError`; the agent logs it and
carries on (a missed heartbeat is the controller's signal, not the agent's
problem). None of them may take longer than its implementation's documented
timeout.

Standard library only: the agent imports it while it watches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

from spothop.errors import EXIT_PREEMPTED as EXIT_RESUMABLE
from spothop.wire.events import AgentEvent, Stamp
from spothop.wire.fields import (
    Count,
    Id,
    OptionalId,
    ProtocolName,
    Provider,
    Reasons,
    State,
    UnixTime,
    WireDefault,
)
from spothop.wire.group import Address, Rendezvous
from spothop.wire.logs import LogChunk

REQUEST_KINDS = ("checkpoint", "stop")  # what a control plane may ask of an instance
EVENTS_BATCH = 100  # events in one request at most (``POST …/events``)
# The names (never the values) of the job's secrets, comma-separated: the agent asks the control
# plane for their values (ControlPlane.secrets) before its worker starts.
SECRET_NAMES_ENV = "SPOTHOP_SECRET_NAMES"
TOKEN_ENV = "SPOTHOP_AGENT_TOKEN"  # the HTTP control plane's bearer token (better than --token: ps shows argv)
# The protocol of a notice that is the control plane's own stop request (not a cloud's notice).
CONTROL_PLANE_PROTOCOL = "control-plane"

# The agent's exit codes: how the controller reads an instance's end (docs/agent.md).
EXIT_DONE = 0  # the worker finished its work
EXIT_WORKER_FAILED = 1  # the worker kept crashing past the restart limit
EXIT_USAGE = 2  # a bad option (spothop's CLI convention)
EXIT_PREEMPTED = EXIT_RESUMABLE  # preempted, resumable: sysexits.h EX_TEMPFAIL, "try again later"


@dataclass(frozen=True, kw_only=True)
class Registration(Stamp):
    """An instance introducing itself: identity, what it watches, and the self-check's verdict.

    ``private_address`` is the instance's address on its cloud's private network, as its
    metadata service gives it (empty when unknown): a group's nodes meet at node 0's
    (:meth:`ControlPlane.rendezvous`)."""

    protocol: ProtocolName = ""
    notice_blind: bool = False
    reasons: Reasons = ()
    time_unix_s: UnixTime = field(default_factory=time.time)
    private_address: Address = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Registration:
        return cls(**{**data, "reasons": tuple(data.get("reasons") or ())})

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class Heartbeat:
    """The agent is alive; ``worker_heartbeat_unix_s`` is the worker's own last beat (SDK), if any,
    and ``worker_step`` the training step the worker last reported (``sdk.heartbeat(step=)`` or
    ``sdk.saved(step=)``), if any."""

    # The agent sends every field; a body may omit those marked WireDefault (the server fills them in).
    instance_id: Id
    worker_id: Annotated[OptionalId, WireDefault("")]
    time_unix_s: UnixTime
    state: State  # "running", "restarting", "preempting", "preempted", "done", "failed"
    worker_pid: Annotated[Count | None, WireDefault(None)]
    worker_restarts: Annotated[Count, WireDefault(0)]
    worker_heartbeat_unix_s: Annotated[UnixTime | None, WireDefault(None)]
    notice_blind: Annotated[bool, WireDefault(False)]
    job_id: OptionalId = ""
    provider: Provider = ""
    worker_step: Count | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Heartbeat:
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ControlRequest:
    """Something the control plane asks of this instance: ``checkpoint`` now, or ``stop`` by ``deadline_unix_s``."""

    request_id: str
    kind: str
    reason: str = ""
    created_unix_s: float = 0.0
    deadline_unix_s: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ControlRequest:
        deadline = data.get("deadline_unix_s")
        return cls(
            request_id=str(data["request_id"]),
            kind=str(data["kind"]),
            reason=str(data.get("reason") or ""),
            created_unix_s=float(data.get("created_unix_s") or 0.0),
            deadline_unix_s=float(deadline) if deadline is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LeaseRelease:
    """The body of ``leases/release``: the worker whose leases go back to its job's queue."""

    worker_id: Id


class ControlPlane(Protocol):
    """What the agent needs of the control plane (see the module docstring for each contract)."""

    def register(self, registration: Registration) -> None: ...

    def heartbeat(self, beat: Heartbeat) -> None: ...

    def record(self, event: AgentEvent) -> None: ...

    def release_leases(self, worker_id: str) -> int: ...

    def requests(self) -> list[ControlRequest]: ...

    def acknowledge(self, request_id: str) -> None: ...

    def ship_log(self, chunk: LogChunk) -> None: ...

    def rendezvous(self) -> Rendezvous | None: ...

    def secrets(self) -> dict[str, str]: ...

    def prepare(self) -> None: ...

    def flush(self, timeout_s: float) -> int: ...

    def close(self) -> None: ...


def secrets_from(answer: Any, where: str) -> dict[str, str]:
    """A control plane's answer to :meth:`ControlPlane.secrets` (NAME → value), checked;
    :class:`~spothop.wire.errors.ControlPlaneError` (naming no value) when it is not one."""
    from spothop.wire.errors import ControlPlaneError

    if not isinstance(answer, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in answer.items()
    ):
        raise ControlPlaneError(
            f"{where}: the job's secrets came as a {type(answer).__name__}, not NAME → text"
        )
    return dict(answer)
