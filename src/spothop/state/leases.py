"""Fenced claim-with-lease on the rows of any table: the shard queue's, and the job store's to come.

Like dstack's pipelines: a claimer locks rows it may take, writes a new token
and an expiry into them, extends the expiry while it works, and makes every
later write conditional on its token, so a holder that lost its lease cannot
commit. The contract, for a table whose row carries a lease in a token column
and an expiry column:

1. **Lock.** :meth:`Leases.lock` selects the rows a claimer may take (the
   caller's ``where``: say, pending rows and leased rows whose expiry passed)
   and keeps them locked until the transaction ends. On PostgreSQL that is
   ``SELECT … FOR UPDATE SKIP LOCKED``: rows another claimer holds are
   skipped, not waited on, so many claimers take different rows at once. On
   SQLite the transaction began with ``BEGIN IMMEDIATE`` (every engine of
   :func:`spothop.db.make_engine`), the database's write lock, so no other
   claim can interleave between this read and its write.
2. **Grant.** :meth:`Leases.grant` gives each locked row token + 1 and the
   new expiry (plus the caller's columns), in the same transaction. The token
   only grows: a row claimed again after its lease expired has a token the old
   holder does not know.
3. **Fenced writes.** Every later write on a leased row (heartbeat, complete,
   release, fail) goes through :meth:`Leases.fenced_update`, whose ``WHERE``
   repeats the row's key, the holding condition, the token and
   ``expiry > now``. The database, not the caller, decides whether the lease
   is still valid: zero rows changed means it is not (expired, claimed again,
   or no longer held), and the caller says why from a fresh read.
4. **Expiry.** Nothing is done when a lease expires: the row matches the
   claimers' ``where`` again, and the next grant fences the old holder out.

Every method runs inside the caller's transaction (a :class:`~sqlalchemy.Connection`
in ``engine.begin()``) and commits nothing itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    CursorResult,
    Row,
    Table,
    and_,
    bindparam,
    select,
    update,
)
from sqlalchemy.sql.elements import KeyedColumnElement


@dataclass(frozen=True)
class Leases:
    """The lease columns of ``table``.

    ``key``: the columns that name one row; ``token``: the fencing token (an
    integer, + 1 at each grant); ``expires``: when the lease ends (unix
    seconds); ``held``: what is true of a row while it is leased (its state
    column says so), so a fenced write never touches a row that was completed
    or released, whatever its token.
    """

    table: Table
    key: tuple[KeyedColumnElement[Any], ...]
    token: KeyedColumnElement[Any]
    expires: KeyedColumnElement[Any]
    held: ColumnElement[bool]

    def lock(
        self,
        conn: Connection,
        columns: Sequence[KeyedColumnElement[Any]],
        *,
        where: ColumnElement[bool],
        order_by: Sequence[ColumnElement[Any]],
        limit: int,
    ) -> Sequence[Row[Any]]:
        """Up to ``limit`` rows matching ``where``, in ``order_by``, locked until the transaction ends.

        The rows come with ``columns`` plus the key and the token (which
        :meth:`grant` needs), skipping rows another transaction holds.
        """
        wanted = list(dict.fromkeys([*self.key, self.token, *columns]))
        query = (
            select(*wanted)
            .where(where)
            .order_by(*order_by)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return conn.execute(query).all()

    def grant(
        self,
        conn: Connection,
        rows: Sequence[Row[Any]],
        expires_at: float,
        values: Mapping[str, Any],
        per_row: Callable[[Row[Any]], Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """Lease ``rows`` (from :meth:`lock`, same transaction) until ``expires_at``; returns their new tokens.

        ``values`` go into every row, ``per_row(row)`` into each one.
        """
        if not rows:
            return []
        extra = [dict(per_row(r)) if per_row else {} for r in rows]
        names = sorted({name for e in extra for name in e})
        statement = (
            update(self.table)
            .where(and_(*(col == bindparam(f"k_{i}") for i, col in enumerate(self.key))))
            .values(
                {
                    self.token.key: bindparam("b_token"),
                    self.expires.key: expires_at,
                    **values,
                    **{name: bindparam(f"b_{name}") for name in names},
                }
            )
        )
        tokens = [int(getattr(r, self.token.key)) + 1 for r in rows]
        conn.execute(
            statement,
            [
                {
                    **{f"k_{i}": getattr(r, col.key) for i, col in enumerate(self.key)},
                    "b_token": token,
                    **{f"b_{name}": e[name] for name in names},
                }
                for r, token, e in zip(rows, tokens, extra, strict=True)
            ],
        )
        return tokens

    def fenced(self, key: Sequence[Any], token: int, now: float) -> ColumnElement[bool]:
        """The condition that makes a write take effect only while the lease ``token`` on ``key`` is valid."""
        return and_(
            *(col == value for col, value in zip(self.key, key, strict=True)),
            self.held,
            self.token == token,
            self.expires > now,
        )

    def fenced_update(
        self,
        conn: Connection,
        key: Sequence[Any],
        token: int,
        now: float,
        values: Mapping[str, Any],
        returning: Sequence[KeyedColumnElement[Any]] = (),
    ) -> CursorResult[Any]:
        """``UPDATE … SET values WHERE`` :meth:`fenced`: ``rowcount`` 0 (or no returned row) means the lease is lost."""
        statement = update(self.table).where(self.fenced(key, token, now)).values(dict(values))
        if returning:
            statement = statement.returning(*returning)
        return conn.execute(statement)
