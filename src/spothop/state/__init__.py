"""spothop's own state: every table it owns, in one metadata registry, created by migrations.

Table owners (the shard queue, the market's stores, the agents' heartbeats and
events, the job store, the ledger) have their tables defined here, on
:data:`metadata`, and call :func:`ensure_schema` when they open a store, so one Alembic history
(``spothop/state/migrations``) creates and upgrades all of them, on SQLite and
PostgreSQL alike (``spothop db upgrade`` runs it by hand; ``docs/state.md``).
The local cloud keeps its own records (``localcloud/cloud.db``): it imitates a
cloud's control plane, not spothop's.

- :mod:`~spothop.state.registry`: the :data:`metadata` and its naming convention.
- :mod:`~spothop.state.migrate`: :func:`ensure_schema`, :func:`upgrade`, :func:`status`.
- :mod:`~spothop.state.leases`: fenced claim-with-lease on any table's rows.
- ``*_tables.py``: the tables themselves, one module per owner (the market, the
  queue, the agents, the jobs, the ledger, the tokens). Every owner sits above
  this layer, which imports nothing above the ground floor.

Alembic is imported only when a store is opened, not by ``import spothop.state``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spothop.state.registry import metadata

if TYPE_CHECKING:
    from spothop.state.migrate import ensure_schema, status, upgrade

__all__ = ["ensure_schema", "metadata", "status", "upgrade"]


def __getattr__(name: str) -> Any:
    if name in ("ensure_schema", "status", "upgrade"):
        from spothop.state import migrate

        return getattr(migrate, name)
    raise AttributeError(f"module 'spothop.state' has no attribute {name!r}")
