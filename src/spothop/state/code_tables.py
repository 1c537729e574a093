"""Uploaded code in the store: ``code_archives``, ``code_archive_chunks``, ``code_archive_projects``.

The archives ``spothop launch --server`` uploads (``PUT /v1/code/{sha256}``) live
in the store, the truth every replica of the server shares, so that whichever
replica runs the job (or takes it over) serves its agents the same bytes
(:mod:`spothop.state.code_archives`). A replica's home keeps a copy only as a cache.

- ``code_archives``: one row per archive whose chunks are all written, by sha256,
  with its size and chunk count. It is written last, in the transaction of the
  chunks: a row here means every chunk is there.
- ``code_archive_chunks``: the archive's bytes in order, ``seq`` from 0, a few MiB
  each so that no row is huge.
- ``code_archive_projects``: which project uploaded which archive (an archive is
  stored once however many projects upload it, and held only for those).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Integer, LargeBinary, String, Table

from spothop.state.registry import metadata

_SHA = 64
_NAME = 128

code_archives = Table(
    "code_archives",
    metadata,
    Column("sha256", String(_SHA), primary_key=True),
    Column("size_bytes", BigInteger, nullable=False),
    Column("chunks", Integer, nullable=False),
    Column("stored_unix_s", Float, nullable=False),
)

code_archive_chunks = Table(
    "code_archive_chunks",
    metadata,
    Column("sha256", String(_SHA), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("data", LargeBinary, nullable=False),
)

code_archive_projects = Table(
    "code_archive_projects",
    metadata,
    Column("project", String(_NAME), primary_key=True),
    Column("sha256", String(_SHA), primary_key=True),
    Column("uploaded_unix_s", Float, nullable=False),
)
