"""The control plane: the store side of the agent <-> control-plane contract, and the ways to reach it.

The contract itself — the bodies, the events, the :class:`ControlPlane`
protocol, the errors — is declared once in :mod:`spothop.wire`; this package
implements it and serves it. Its floor is above ``jobs/`` and ``observe/``,
below ``service/`` and the fronts; the on-instance agent imports it (the
client side), it imports nothing of the agent.

- :mod:`~spothop.controlplane.store` — :class:`StoreControlPlane`: the store
  and the queue, written directly (``registration_row``, ``upsert_heartbeat(s)``,
  ``ensure_agent_schema``); what the controller asks of an instance is written
  by :func:`spothop.state.agent_requests.add_request`, below both.
- :mod:`~spothop.controlplane.queue_leases` — :class:`QueueLeases`: a worker's
  leases released in the job's queue directly.
- :mod:`~spothop.controlplane.host` — the embedded plane's store process
  (``python -m spothop.controlplane.host``); :mod:`~spothop.controlplane.embedded`
  — :class:`EmbeddedControlPlane`, the agent's side of it.
- :mod:`~spothop.controlplane.http` — :class:`HttpControlPlane`: ``spothop
  server``'s agent API, with its on-disk :mod:`~spothop.controlplane.spool`.
- :mod:`spothop.wire.client` (on the ground floor) — the one small HTTP
  client (bearer token, timeouts, bounded retries with backoff, the outage
  window) that the HTTP plane, the HTTP queue and the CLI's remote mode share.
- :mod:`~spothop.controlplane.open` — :func:`open_control_plane` (picks one
  from ``--control-plane``) and :class:`NoControlPlane`.
- :mod:`~spothop.controlplane.bodies` — the server's request-body models,
  derived from the wire dataclasses (pydantic; the server imports it).

Importing this package loads only the standard library: the names below are
imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spothop._lazy import lazy_exports

_LAZY = {
    **dict.fromkeys(
        ("NONE", "TOKEN_ENV", "NoControlPlane", "open_control_plane"), "spothop.controlplane.open"
    ),
    "EmbeddedControlPlane": "spothop.controlplane.embedded",
    "HttpControlPlane": "spothop.controlplane.http",
    "EventSpool": "spothop.controlplane.spool",
    **dict.fromkeys(("QueueLeases", "queue_leases"), "spothop.controlplane.queue_leases"),
    "StoreControlPlane": "spothop.controlplane.store",
    **dict.fromkeys(
        ("ControlPlane", "ControlRequest", "Heartbeat", "Registration"), "spothop.wire.contract"
    ),
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

if TYPE_CHECKING:  # what type checkers see; at run time each comes from _LAZY
    from spothop.controlplane.embedded import EmbeddedControlPlane
    from spothop.controlplane.http import HttpControlPlane
    from spothop.controlplane.open import NONE, TOKEN_ENV, NoControlPlane, open_control_plane
    from spothop.controlplane.queue_leases import QueueLeases, queue_leases
    from spothop.controlplane.spool import EventSpool
    from spothop.controlplane.store import StoreControlPlane
    from spothop.wire.contract import ControlPlane, ControlRequest, Heartbeat, Registration

__all__ = [
    "NONE",
    "TOKEN_ENV",
    "ControlPlane",
    "ControlRequest",
    "EmbeddedControlPlane",
    "EventSpool",
    "Heartbeat",
    "HttpControlPlane",
    "NoControlPlane",
    "QueueLeases",
    "Registration",
    "StoreControlPlane",
    "open_control_plane",
    "queue_leases",
]
