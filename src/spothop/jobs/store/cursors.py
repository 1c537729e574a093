"""The job store's cursors: named positions a controller keeps across restarts (``controller_cursor``).

Part of :class:`~spothop.jobs.store.JobStore`. A cursor is a controller's, not a
job's, so it is never fenced by a job's lease: :meth:`CursorRows.set_cursor`
replaces the position stored under a name, :meth:`CursorRows.cursor` reads it
(None: never set), :meth:`CursorRows.delete_cursor` forgets it.
"""

from __future__ import annotations

from sqlalchemy import insert, select, update

from spothop.jobs.store.base import StoreBase
from spothop.state.job_tables import controller_cursor


class CursorRows(StoreBase):
    """Controller cursors (see the module)."""

    def cursor(self, name: str) -> str | None:
        """The position stored under ``name`` (None: never set)."""
        with self._engine.connect() as conn:
            return conn.execute(
                select(controller_cursor.c.position).where(controller_cursor.c.name == name)
            ).scalar_one_or_none()

    def delete_cursor(self, name: str) -> bool:
        """Forget the position stored under ``name`` (a replica's, at its clean stop)."""
        with self._engine.begin() as conn:
            result = conn.execute(
                controller_cursor.delete().where(controller_cursor.c.name == name)
            )
        return bool(result.rowcount)

    def set_cursor(self, name: str, position: str) -> None:
        """Store ``position`` under ``name`` (replacing what was there)."""
        with self._engine.begin() as conn:
            now = self._clock()
            result = conn.execute(
                update(controller_cursor)
                .where(controller_cursor.c.name == name)
                .values(position=position, updated_unix_s=now)
            )
            if result.rowcount == 0:
                conn.execute(
                    insert(controller_cursor).values(
                        name=name, position=position, updated_unix_s=now
                    )
                )
