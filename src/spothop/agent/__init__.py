"""The on-instance agent: notice watchers for every cloud, worker supervision, the emergency protocol.

::

    python -m spothop.agent run --protocol aws -- python train.py     # or: spothop agent run …

Public surface (everything else is implementation):

- :class:`Agent`, :class:`AgentConfig` — run the agent in-process.
- :class:`Notice`, :class:`NoticeKind`, :class:`SelfCheck`, :class:`Identity` — the data.
- :data:`EXIT_DONE` (0), :data:`EXIT_PREEMPTED` (75, EX_TEMPFAIL: preempted,
  resumable), :data:`EXIT_WORKER_FAILED` (1).
- :class:`LeaseReleaser`, :class:`InterruptionRecorder`, :class:`InterruptionReport`,
  :class:`Heartbeats` and its sinks — the hooks.
- :func:`read_events`, :func:`read_status`, :class:`AgentStatus` — what the
  controller and scheduler read (``notice_blind`` among it).
- :data:`WATCHERS`, :func:`make_watcher` — one watcher per protocol.

The agent imports only the standard library and this package at start (see
``tests/agent/test_footprint.py``).
"""

from __future__ import annotations

from spothop.agent.config import AgentConfig
from spothop.agent.errors import AgentConfigError, AgentError, NoticeEndpointError
from spothop.agent.events import AgentStatus, read_events, read_status
from spothop.agent.heartbeat import Heartbeat, Heartbeats, HttpHeartbeats, SqliteHeartbeats
from spothop.agent.hooks import (
    InterruptionRecorder,
    InterruptionReport,
    LeaseReleaser,
    StoreInterruptions,
)
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

__all__ = [
    "EXIT_DONE",
    "EXIT_PREEMPTED",
    "EXIT_WORKER_FAILED",
    "WATCHERS",
    "Agent",
    "AgentConfig",
    "AgentConfigError",
    "AgentError",
    "AgentStatus",
    "Heartbeat",
    "Heartbeats",
    "HttpHeartbeats",
    "Identity",
    "InterruptionRecorder",
    "InterruptionReport",
    "LeaseReleaser",
    "Notice",
    "NoticeEndpointError",
    "NoticeKind",
    "SelfCheck",
    "SqliteHeartbeats",
    "StoreInterruptions",
    "Watcher",
    "make_watcher",
    "read_events",
    "read_status",
]
