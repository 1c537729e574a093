"""The one interface between the agent and the control plane: :class:`ControlPlane`.

Contracts every implementation keeps (``tests/agent/test_controlplane_conformance.py``
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
- :meth:`ControlPlane.flush` — try to deliver what is spooled, within
  ``timeout_s``; returns how many events are still waiting.

Any method but ``record``, ``prepare`` and ``flush`` may raise
:class:`~spothop.agent.errors.ControlPlaneError`; the agent logs it and
carries on (a missed heartbeat is the controller's signal, not the agent's
problem). None of them may take longer than its implementation's documented
timeout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from spothop.agent.eventmodel import AgentEvent, Stamp

REQUEST_KINDS = ("checkpoint", "stop")  # what a control plane may ask of an instance


@dataclass(frozen=True, kw_only=True)
class Registration(Stamp):
    """An instance introducing itself: identity, what it watches, and the self-check's verdict."""

    protocol: str = ""
    notice_blind: bool = False
    reasons: tuple[str, ...] = ()
    time_unix_s: float = field(default_factory=time.time)

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

    instance_id: str
    worker_id: str
    time_unix_s: float
    state: str  # "running", "restarting", "preempting", "preempted", "done", "failed"
    worker_pid: int | None
    worker_restarts: int
    worker_heartbeat_unix_s: float | None
    notice_blind: bool
    job_id: str = ""
    provider: str = ""
    worker_step: int | None = None

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


class ControlPlane(Protocol):
    """What the agent needs of the control plane (see the module docstring for each contract)."""

    def register(self, registration: Registration) -> None: ...

    def heartbeat(self, beat: Heartbeat) -> None: ...

    def record(self, event: AgentEvent) -> None: ...

    def release_leases(self, worker_id: str) -> int: ...

    def requests(self) -> list[ControlRequest]: ...

    def acknowledge(self, request_id: str) -> None: ...

    def prepare(self) -> None: ...

    def flush(self, timeout_s: float) -> int: ...

    def close(self) -> None: ...
