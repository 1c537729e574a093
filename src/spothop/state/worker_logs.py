"""An attempt's output in ``job_log_chunks``: appended in order, read whole, tailed or followed.

:func:`append_chunk` keeps the contract of
:meth:`~spothop.wire.contract.ControlPlane.ship_log`: the chunks of an attempt tile its
output from byte 0, so a chunk at the stored end is appended, the part of a chunk already
stored is skipped, and a chunk past the stored end raises
:class:`~spothop.wire.errors.LogOffsetGap` with the stored end. The write runs in the
caller's transaction (on SQLite a ``BEGIN IMMEDIATE`` one: writers of one attempt queue).

The reads return raw bytes; the caller decodes the joined bytes once (a character split
between two chunks is whole there). Each is one range of the table's key: no read scans
an attempt's whole output unless it asks for it.
"""

from __future__ import annotations

import time

from sqlalchemy import Connection, select

from spothop.state.log_tables import job_log_chunks as t
from spothop.wire.errors import LogOffsetGap
from spothop.wire.logs import CHUNK_MAX_BYTES


def stored_end(conn: Connection, job_id: str, attempt_id: str) -> int:
    """The byte offset just past what the store holds of the attempt's output (0: nothing)."""
    last = conn.execute(
        select(t.c.offset_bytes, t.c.length_bytes)
        .where(t.c.job_id == job_id, t.c.attempt_id == attempt_id)
        .order_by(t.c.offset_bytes.desc())
        .limit(1)
    ).first()
    return 0 if last is None else int(last.offset_bytes) + int(last.length_bytes)


def append_chunk(
    conn: Connection,
    *,
    job_id: str,
    attempt_id: str,
    offset_bytes: int,
    raw: bytes,
    node: int = 0,
    instance_id: str = "",
) -> int:
    """Store ``raw`` of the attempt's output from ``offset_bytes`` on, keeping the order (see
    the module docstring); the stored end after it. :class:`LogOffsetGap` past the end."""
    end = stored_end(conn, job_id, attempt_id)
    if offset_bytes > end:
        raise LogOffsetGap(attempt_id, offset_bytes, end)
    fresh = raw[end - offset_bytes :]
    if not fresh:
        return end  # every byte of it is stored already: a resend
    conn.execute(
        t.insert().values(
            job_id=job_id,
            attempt_id=attempt_id,
            offset_bytes=end,
            length_bytes=len(fresh),
            node=node,
            instance_id=instance_id,
            received_unix_s=time.time(),
            data=fresh,
        )
    )
    return end + len(fresh)


def read_after(
    conn: Connection, job_id: str, attempt_id: str, after_bytes: int = 0
) -> tuple[int, bytes]:
    """The attempt's output from byte ``after_bytes`` on: (where it starts, the bytes)."""
    rows = conn.execute(
        select(t.c.offset_bytes, t.c.data)
        .where(
            t.c.job_id == job_id,
            t.c.attempt_id == attempt_id,
            t.c.offset_bytes > after_bytes - CHUNK_MAX_BYTES,
        )
        .order_by(t.c.offset_bytes)
    ).all()
    parts = []
    for row in rows:
        data = bytes(row.data)
        skip = after_bytes - int(row.offset_bytes)
        if skip < len(data):
            parts.append(data[max(0, skip) :])
    return after_bytes, b"".join(parts)


def read_tail(conn: Connection, job_id: str, attempt_id: str, tail_bytes: int) -> tuple[int, bytes]:
    """The attempt's last ``tail_bytes`` bytes: (where they start, the bytes)."""
    start = max(0, stored_end(conn, job_id, attempt_id) - tail_bytes)
    return read_after(conn, job_id, attempt_id, start)


def attempts_with_output(conn: Connection, job_id: str) -> set[str]:
    """The job's attempts that have shipped some output."""
    rows = conn.execute(
        select(t.c.attempt_id).where(t.c.job_id == job_id).group_by(t.c.attempt_id)
    ).all()
    return {str(r.attempt_id) for r in rows}


__all__ = ["append_chunk", "attempts_with_output", "read_after", "read_tail", "stored_end"]
