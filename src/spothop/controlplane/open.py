"""How the agent reaches the control plane: one protocol (:class:`~spothop.wire.contract.ControlPlane`), three ways.

- :class:`~spothop.controlplane.embedded.EmbeddedControlPlane` — ``--control-plane sqlite:///…`` or
  ``postgresql://…`` (the default: spothop's default database): the store and
  the queue directly, from a store process the agent starts
  (:mod:`~spothop.controlplane.host`), so SQLAlchemy never loads into
  the agent. :class:`~spothop.controlplane.store.StoreControlPlane` is that process's in-process plane.
- :class:`~spothop.controlplane.http.HttpControlPlane` — ``--control-plane https://…``: ``spothop
  server``'s agent API with a bearer token and an on-disk spool.
- :class:`NoControlPlane` — ``--control-plane none``: the instance's own log
  only (``events.jsonl``); leases are released through the queue directly.

:func:`open_control_plane` picks one from the option's value. Importing this
module loads only the standard library.
"""

from __future__ import annotations

from pathlib import Path

from spothop.controlplane.embedded import EmbeddedControlPlane
from spothop.controlplane.http import HttpControlPlane
from spothop.controlplane.queue_leases import QueueLeases
from spothop.wire.contract import TOKEN_ENV, ControlPlane, ControlRequest, Heartbeat, Registration
from spothop.wire.errors import AgentConfigError
from spothop.wire.events import AgentEvent
from spothop.wire.group import Rendezvous
from spothop.wire.logs import LogChunk

NONE = "none"
__all__ = ["NONE", "TOKEN_ENV", "NoControlPlane", "open_control_plane"]


class NoControlPlane:
    """No control plane: every call is a no-op; leases go back through ``queue`` when there is one."""

    def __init__(self, queue: QueueLeases | None = None) -> None:
        self.queue = queue

    def register(self, registration: Registration) -> None:
        del registration

    def heartbeat(self, beat: Heartbeat) -> None:
        del beat

    def record(self, event: AgentEvent) -> None:
        del event

    def release_leases(self, worker_id: str) -> int:
        return self.queue.release_worker(worker_id) if self.queue is not None else 0

    def requests(self) -> list[ControlRequest]:
        return []

    def acknowledge(self, request_id: str) -> None:
        del request_id

    def ship_log(self, chunk: LogChunk) -> None:
        del chunk  # the output stays in the instance's own file

    def rendezvous(self) -> Rendezvous | None:
        return None  # no control plane hands one out: a group's agent waits out its deadline

    def secrets(self) -> dict[str, str]:
        return {}  # nothing delivers them: an agent told of secrets fails before its worker starts

    def prepare(self) -> None:
        if self.queue is not None:
            self.queue.prepare()

    def flush(self, timeout_s: float) -> int:
        del timeout_s
        return 0

    def close(self) -> None:
        pass


def open_control_plane(
    spec: str | None,
    *,
    instance_id: str,
    state_dir: Path,
    token: str | None = None,
    queue: QueueLeases | None = None,
) -> ControlPlane:
    """The control plane ``spec`` names: None or a database URL (embedded), ``http(s)://…``, or ``none``.

    ``queue`` is the job's queue, for the embedded and ``none`` planes' releases
    (the HTTP plane's server knows the queue; the agent falls back on it).
    AgentConfigError names what is accepted for anything else.
    """
    if spec is None or spec.startswith(("sqlite:", "postgresql:", "postgresql+", "postgres:")):
        plane = EmbeddedControlPlane(spec, instance_id, queue=queue)
        plane.start()  # the store process warms up while the agent starts its worker
        return plane
    if spec == NONE:
        return NoControlPlane(queue)
    if spec.startswith(("http://", "https://")):
        return HttpControlPlane(spec, instance_id, token=token, spool_dir=state_dir)
    raise AgentConfigError(
        f"--control-plane {spec!r}: give a database URL (sqlite:///PATH, postgresql://HOST/DB),"
        " an http(s):// URL of spothop server, or 'none'"
    )
