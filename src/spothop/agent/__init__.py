"""The on-instance agent: notice watchers for every cloud, worker supervision, the emergency protocol.

::

    python -m spothop.agent run --protocol aws -- python train.py     # or: spothop agent run …

Public surface (everything else is implementation):

- :class:`Agent`, :class:`AgentConfig` — run the agent in-process.
- :class:`Notice`, :class:`NoticeKind`, :class:`SelfCheck`, :class:`Identity` — the data.
- :data:`EXIT_DONE` (0), :data:`EXIT_PREEMPTED` (75, EX_TEMPFAIL: preempted,
  resumable), :data:`EXIT_WORKER_FAILED` (1).
- :class:`ControlPlane` and its implementations, :func:`open_control_plane`
  (the contract in :mod:`spothop.wire`, the implementations in
  :mod:`spothop.controlplane`); the events it records are the typed
  models of :mod:`spothop.wire.events`.
- :class:`LeaseReleaser`, ``Upload`` — the emergency protocol's hooks.
- :func:`read_events`, :func:`read_agent_events`, :func:`read_status`,
  :class:`AgentStatus` — the instance's own log.
- :data:`WATCHERS`, :func:`make_watcher` — one watcher per protocol.

The agent imports only the standard library and this package at start (see
``tests/agent/test_footprint.py``).
"""

from __future__ import annotations

from spothop.agent.config import AgentConfig
from spothop.agent.errors import NoticeEndpointError
from spothop.agent.events import AgentStatus, read_agent_events, read_events, read_status
from spothop.agent.hooks import LeaseReleaser, Upload
from spothop.agent.model import (
    EXIT_DONE,
    EXIT_PREEMPTED,
    EXIT_WORKER_FAILED,
    Identity,
    Notice,
    NoticeKind,
    SelfCheck,
)
from spothop.agent.notices import WATCHERS, Watcher, make_watcher
from spothop.agent.runtime import Agent
from spothop.controlplane.embedded import EmbeddedControlPlane
from spothop.controlplane.http import HttpControlPlane
from spothop.controlplane.open import NoControlPlane, open_control_plane
from spothop.wire.contract import ControlPlane, ControlRequest, Heartbeat, Registration
from spothop.wire.errors import (
    AgentConfigError,
    AgentError,
    ControlPlaneAuthError,
    ControlPlaneError,
    EventFormatError,
)
from spothop.wire.events import SCHEMA_VERSION, AgentEvent, UnknownEvent, event_from_dict

__all__ = [
    "EXIT_DONE",
    "EXIT_PREEMPTED",
    "EXIT_WORKER_FAILED",
    "SCHEMA_VERSION",
    "WATCHERS",
    "Agent",
    "AgentConfig",
    "AgentConfigError",
    "AgentError",
    "AgentEvent",
    "AgentStatus",
    "ControlPlane",
    "ControlPlaneAuthError",
    "ControlPlaneError",
    "ControlRequest",
    "EmbeddedControlPlane",
    "EventFormatError",
    "Heartbeat",
    "HttpControlPlane",
    "Identity",
    "LeaseReleaser",
    "NoControlPlane",
    "Notice",
    "NoticeEndpointError",
    "NoticeKind",
    "Registration",
    "SelfCheck",
    "UnknownEvent",
    "Upload",
    "Watcher",
    "event_from_dict",
    "make_watcher",
    "open_control_plane",
    "read_agent_events",
    "read_events",
    "read_status",
]
