"""spothop's own state: every table it owns, in one metadata registry, created by migrations.

Table owners (the shard queue, the market store, the agents' heartbeats and
events, the job store to come) define their tables on :data:`metadata`, so one
Alembic history (``spothop/state/migrations``) creates and upgrades all of them,
on SQLite and PostgreSQL alike. The local cloud keeps its own records
(``localcloud/cloud.db``): it imitates a cloud's control plane, not spothop's.
"""

from spothop.state.registry import metadata

__all__ = ["metadata"]
