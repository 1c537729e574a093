"""The worker's output, as the agents ship it: ``job_log_chunks``.

One row per stored chunk of an attempt's output (:class:`~spothop.wire.logs.LogChunk`),
keyed ``(job_id, attempt_id, offset_bytes)``; the chunks of an attempt tile its output
from byte 0 with no gap and no overlap (:mod:`spothop.state.worker_logs` keeps that).
``data`` is the chunk's raw bytes (decoded to text only when read). The key serves each
read: an attempt's whole output, its last N bytes, what came after byte X.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Integer, LargeBinary, String, Table

from spothop.state.registry import metadata

_ID = 128

job_log_chunks = Table(
    "job_log_chunks",
    metadata,
    Column("job_id", String(_ID), primary_key=True),
    Column("attempt_id", String(_ID), primary_key=True),
    Column("offset_bytes", BigInteger, primary_key=True, autoincrement=False),
    Column("length_bytes", Integer, nullable=False),
    Column("node", Integer, nullable=False, default=0),
    Column("instance_id", String(_ID), nullable=False, default=""),
    Column("received_unix_s", Float, nullable=False),
    Column("data", LargeBinary, nullable=False),
)
