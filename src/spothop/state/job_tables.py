"""The job store's tables (:mod:`spothop.jobs.store` works on them).

- ``jobs``: one row per job: its spec (JSON), its lifecycle state
  (:class:`spothop.jobs.lifecycle.JobState`), its counters, and two kinds of
  fencing: ``version`` (+ 1 at every write: a writer that read version *n*
  can make its write conditional on it) and a controller lease
  (``lease_owner``, ``lease_token``, ``lease_expires_unix_s``, as
  :mod:`spothop.state.leases` claims rows), so several controllers can share
  one store's jobs.
- ``job_nodes``: one row per node (task jobs) or worker (batch jobs).
- ``job_attempts``: one row per instance launched (or about to be) for a node:
  written *before* the launch call, with its launch token, so an instance the
  cloud started is never unknown to the store.
- ``job_events``: what happened to a job, in order (``seq``); every state change
  is written in the same transaction as its event.
- ``market_cooldowns``: markets excluded from placement until a time (after a
  preemption), persisted so a restarted controller keeps them.
- ``job_secrets``: a job's secrets, each sealed (:mod:`spothop.state.sealed`): the name in
  clear, the value only encrypted (migration 0015).
- ``controller_cursor``: how far the controller has read a stream (the agents'
  events), by name.

Times are unix seconds (``*_unix_s``).
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, Index, Integer, String, Table, Text, false

from spothop.state.registry import metadata

_ID = 128  # job, attempt and instance ids, launch tokens: far shorter than this
_NAME = 200  # job names, like the queue's
_PLACE = 128  # provider, region, zone, instance type

jobs = Table(
    "jobs",
    metadata,
    Column("job_id", String(32), primary_key=True),
    Column("name", String(_NAME), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("spec_json", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("created_unix_s", Float, nullable=False),
    Column("updated_unix_s", Float, nullable=False),
    Column("interruptions", Integer, nullable=False, default=0),
    Column("retries_used", Integer, nullable=False, default=0),
    Column("on_demand_forced", Boolean, nullable=False, default=False),
    Column("reason", Text, nullable=False, default=""),
    Column("version", Integer, nullable=False, default=1),
    Column("lease_owner", String(_ID), nullable=True),
    Column("lease_token", Integer, nullable=False, default=0),
    Column("lease_expires_unix_s", Float, nullable=True),
    # The sha256 of the job's packed workdir (spothop.controlplane.archives); None: no workdir.
    Column("code_sha256", String(64), nullable=True),
    # The job's file_mounts as planned at launch (spothop.controlplane.mounts), JSON; None: none.
    Column("mounts_json", Text, nullable=True),
    Index(None, "state", "created_unix_s"),
)

job_nodes = Table(
    "job_nodes",
    metadata,
    Column("job_id", String(32), primary_key=True),
    Column("node", Integer, primary_key=True),
    Column("state", String(16), nullable=False),
    Column("updated_unix_s", Float, nullable=False),
)

job_attempts = Table(
    "job_attempts",
    metadata,
    Column("attempt_id", String(32), primary_key=True),
    Column("job_id", String(32), nullable=False),
    Column("node", Integer, nullable=False),
    Column("launch_token", String(_ID), nullable=False, unique=True),
    Column("provider", String(_PLACE), nullable=False),
    Column("region", String(_PLACE), nullable=False),
    Column("zone", String(_PLACE), nullable=False),
    Column("instance_type", String(_PLACE), nullable=False),
    Column("market_kind", String(16), nullable=False),
    Column("price_usd_per_hour", Float, nullable=False),
    Column("instance_id", String(_ID), nullable=True),
    Column("state", String(16), nullable=False),
    Column("launched_unix_s", Float, nullable=False),
    Column("running_unix_s", Float, nullable=True),
    Column("noticed_unix_s", Float, nullable=True),
    Column("ended_unix_s", Float, nullable=True),
    Column("end_reason", String(32), nullable=True),
    Column("error_code", String(_NAME), nullable=True),
    Column("error_message", Text, nullable=True),
    Column("exit_code", Integer, nullable=True),
    # A grouped task's generation and its node count (migration 0008; docs/multinode.md).
    Column("generation", Integer, nullable=False, server_default="0"),
    Column("group_nnodes", Integer, nullable=True),
    Column("group_nproc_per_node", Integer, nullable=True),  # its processes per node (0014)
    # The cloud gave its instance a final notice (0015; lifecycle.interrupted).
    Column("notice_final", Boolean, nullable=False, server_default=false()),
    Index(None, "job_id", "launched_unix_s"),
    Index(None, "instance_id"),
)

job_events = Table(
    "job_events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(32), nullable=False),
    Column("time_unix_s", Float, nullable=False),
    Column("kind", String(64), nullable=False),
    Column("data", Text, nullable=False),
    Index(None, "job_id", "seq"),
)

job_secrets = Table(
    "job_secrets",
    metadata,
    Column("job_id", String(32), primary_key=True),
    Column("name", String(_ID), primary_key=True),
    Column("sealed", Text, nullable=False),  # a Fernet token: never the value in clear
)

market_cooldowns = Table(
    "market_cooldowns",
    metadata,
    Column("provider", String(_PLACE), primary_key=True),
    Column("region", String(_PLACE), primary_key=True),
    Column("zone", String(_PLACE), primary_key=True),
    Column("instance_type", String(_PLACE), primary_key=True),
    Column("until_unix_s", Float, nullable=False),
    Column("reason", Text, nullable=False, default=""),
    Column("created_unix_s", Float, nullable=False),
)

controller_cursor = Table(
    "controller_cursor",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("position", Text, nullable=False),
    Column("updated_unix_s", Float, nullable=False),
)
