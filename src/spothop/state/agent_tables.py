"""What the agents tell the control plane, and what it asks of them.

- ``agent_heartbeats``: the latest beat per instance (upserted).
- ``agent_events``: every typed agent event (:mod:`spothop.wire.events`),
  one row each, keyed by the event's own id so a resent event is stored once.
  ``payload`` is the whole event as JSON; the columns beside it are what
  queries filter on.
- ``agent_requests``: what the control plane wants of an instance
  (``checkpoint`` now, ``stop``); the agent reads the ones it has not yet
  acknowledged.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, Index, Integer, String, Table, Text

from spothop.state.registry import metadata

_ID = 128  # instance ids, worker ids and job ids are far shorter than this

agent_heartbeats = Table(
    "agent_heartbeats",
    metadata,
    Column("instance_id", String(_ID), primary_key=True),
    Column("worker_id", String(_ID), nullable=False, default=""),
    Column("job_id", String(_ID), nullable=False, default=""),
    Column("provider", String(32), nullable=False, default=""),
    Column("time_unix_s", Float, nullable=False),
    Column("state", String(32), nullable=False),
    Column("worker_pid", Integer, nullable=True),
    Column("worker_restarts", Integer, nullable=False, default=0),
    Column("worker_heartbeat_unix_s", Float, nullable=True),
    Column("notice_blind", Boolean, nullable=False, default=False),
    Column("worker_step", Integer, nullable=True),  # the worker's last reported step (0006)
    # The instance's private address as its registration gave it; "" unknown (0014).
    Column("private_address", String(64), nullable=False, default="", server_default=""),
)

agent_events = Table(
    "agent_events",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("schema_version", Integer, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("instance_id", String(_ID), nullable=False),
    Column("job_id", String(_ID), nullable=False, default=""),
    Column("provider", String(32), nullable=False, default=""),
    Column("region", String(_ID), nullable=False, default=""),
    Column("zone", String(_ID), nullable=False, default=""),
    Column("instance_type", String(_ID), nullable=False, default=""),
    Column("time_unix_s", Float, nullable=False),
    Column("received_unix_s", Float, nullable=False),
    Column("payload", Text, nullable=False),
    Index(None, "instance_id", "time_unix_s"),
    Index(None, "job_id", "time_unix_s"),
    # Events of a few kinds: every job's (the metrics), one job's (its report) (0010).
    Index(None, "kind", "job_id"),
)

agent_requests = Table(
    "agent_requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("instance_id", String(_ID), nullable=False),
    Column("kind", String(16), nullable=False),  # "checkpoint" | "stop"
    Column("reason", String(256), nullable=False, default=""),
    Column("created_unix_s", Float, nullable=False),
    Column("deadline_unix_s", Float, nullable=True),
    Column("acknowledged_unix_s", Float, nullable=True),
    Index(None, "instance_id", "acknowledged_unix_s"),
)
