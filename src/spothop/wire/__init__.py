"""The agent <-> control-plane contract, declared once: what crosses the wire, as frozen dataclasses.

A ground-floor package: every layer may read it (the agent that writes the
bodies, the control plane that stores them, the controller and ``observe/``
that read the events back, the server that checks them), and it imports only
the standard library and :mod:`spothop.errors`.

- :mod:`spothop.wire.events` — the typed, versioned agent events
  (:class:`AgentEvent`, every kind, :func:`event_from_dict`).
- :mod:`spothop.wire.contract` — :class:`Registration`, :class:`Heartbeat`,
  :class:`ControlRequest` (:data:`REQUEST_KINDS`), :class:`LeaseRelease`, the
  :class:`ControlPlane` protocol and its contracts, :data:`EVENTS_BATCH`.
- :mod:`spothop.wire.group` — :class:`Rendezvous`, where a grouped task's nodes meet, and
  the worker's variables it sets.
- :mod:`spothop.wire.fields` — the bounds of each field (:class:`Limits`),
  from which the server's request-body models are derived.
- :mod:`spothop.wire.logs` — :class:`LogChunk`, a piece of the worker's output the agent
  ships, and :func:`worker_log_path`.
- :mod:`spothop.wire.errors` — the errors both sides raise and catch.
- :mod:`spothop.wire.client` — the one small JSON HTTP client (standard-library
  ``urllib``, a bearer token, timeouts, bounded retries) the HTTP control plane,
  the HTTP shard queue and the CLI's remote mode send through.
"""

from __future__ import annotations

from spothop.wire.contract import (
    CONTROL_PLANE_PROTOCOL,
    EVENTS_BATCH,
    REQUEST_KINDS,
    ControlPlane,
    ControlRequest,
    Heartbeat,
    LeaseRelease,
    Registration,
)
from spothop.wire.errors import (
    AgentConfigError,
    AgentError,
    ControlPlaneAuthError,
    ControlPlaneError,
    EventFormatError,
    LogOffsetGap,
    StoreRefused,
)
from spothop.wire.events import SCHEMA_VERSION, AgentEvent, Stamp, UnknownEvent, event_from_dict
from spothop.wire.fields import Limits, WireDefault, WireField, wire_fields
from spothop.wire.group import Rendezvous
from spothop.wire.logs import LogChunk, worker_log_path

__all__ = [
    "CONTROL_PLANE_PROTOCOL",
    "EVENTS_BATCH",
    "REQUEST_KINDS",
    "SCHEMA_VERSION",
    "AgentConfigError",
    "AgentError",
    "AgentEvent",
    "ControlPlane",
    "ControlPlaneAuthError",
    "ControlPlaneError",
    "ControlRequest",
    "EventFormatError",
    "Heartbeat",
    "LeaseRelease",
    "Limits",
    "LogChunk",
    "LogOffsetGap",
    "Registration",
    "Rendezvous",
    "Stamp",
    "StoreRefused",
    "UnknownEvent",
    "WireDefault",
    "WireField",
    "event_from_dict",
    "wire_fields",
    "worker_log_path",
]
