"""Who may call the control-plane server: projects, users and API tokens (:mod:`spothop.state.tokens`).

- ``projects``: one row per project, by name. A user belongs to one project and
  sees only that project's jobs.
- ``users``: one row per user (``user_id``; ``name`` unique), with its project.
- ``api_tokens``: one row per token, user or agent. ``token_id`` is the public
  part of the token (``shp_<kind>_<token_id>_<secret>``); ``secret_hash`` is
  the argon2id hash of the secret, never the secret itself. A user token has
  ``user_id`` (and its ``project``); an agent token has ``job_id`` and
  ``instance_id`` (and, when known, the job's ``project``); one issued for a
  launch keeps its ``launch_token``, and names it as its ``instance_id`` until
  it is bound to the instance (docs/server.md, "Security": agent tokens). A token is
  revoked by setting ``revoked_unix_s``; the row stays, so what it did can
  still be traced to it.
- ``job_projects``: which project (and user) a job launched through the server
  belongs to; a job without a row is the ``default`` project's.

Times are unix seconds (``*_unix_s``).
"""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Index, String, Table

from spothop.state.registry import metadata

_ID = 128  # job and instance ids, as in the agent tables
_NAME = 64  # user and project names
TOKEN_ID_LENGTH = 16  # hex characters of the token's public id
_HASH = 256  # an argon2id encoded hash is ~100 characters

projects = Table(
    "projects",
    metadata,
    Column("name", String(_NAME), primary_key=True),
    Column("created_unix_s", Float, nullable=False),
)

users = Table(
    "users",
    metadata,
    Column("user_id", String(32), primary_key=True),
    Column("name", String(_NAME), nullable=False, unique=True),
    Column("project", String(_NAME), ForeignKey("projects.name"), nullable=False),
    Column("created_unix_s", Float, nullable=False),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("token_id", String(TOKEN_ID_LENGTH), primary_key=True),
    Column("kind", String(8), nullable=False),  # "user" | "agent"
    Column("secret_hash", String(_HASH), nullable=False),
    Column("user_id", String(32), nullable=True),
    Column("project", String(_NAME), nullable=True),
    Column("job_id", String(_ID), nullable=True),
    Column("instance_id", String(_ID), nullable=True),
    # The launch an agent token was issued for (0017): its instance_id until it is bound.
    Column("launch_token", String(_ID), nullable=True),
    Column("label", String(_NAME), nullable=False, default=""),
    Column("created_unix_s", Float, nullable=False),
    Column("revoked_unix_s", Float, nullable=True),
    Index(None, "job_id", "instance_id"),
    Index(None, "user_id"),
)

# Which project a job belongs to (the server writes it when a user launches); a job without a row,
# launched by the CLI on the embedded store, belongs to DEFAULT_PROJECT.
DEFAULT_PROJECT = "default"
job_projects = Table(
    "job_projects",
    metadata,
    Column("job_id", String(32), primary_key=True),
    Column("project", String(_NAME), nullable=False),
    Column("user_id", String(32), nullable=True),
    Index(None, "project"),
)
