"""The uploaded archives of code, kept in the store every replica shares (:mod:`.code_tables`).

The contract:

1. :meth:`CodeArchives.put` writes an archive's bytes in chunks of
   :data:`CHUNK_BYTES` (read from a file, never whole in memory), hashed on the
   way: bytes whose sha256 is not the one named are refused and nothing is kept.
   The chunks and the ``code_archives`` row go in one transaction, the row last,
   so an archive is either whole in the store or absent. Putting an archive the
   store has writes nothing (two replicas putting the same one at once: one
   writes, the other finds it stored). The uploading project is recorded either way.
2. :meth:`CodeArchives.held` is what a project may launch with: the archive's
   size when the project uploaded it and it is stored.
3. :meth:`CodeArchives.read_into` writes the stored bytes to a file and checks
   them on the way: a chunk missing, or bytes whose size or sha256 are not the
   archive's, is :class:`CodeArchiveDamaged` naming the sha256 (never wrong bytes
   passed on as the archive).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import BinaryIO

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from spothop.errors import SpothopError
from spothop.state.code_tables import code_archive_chunks as chunks_t
from spothop.state.code_tables import code_archive_projects as projects_t
from spothop.state.code_tables import code_archives as archives_t

CHUNK_BYTES = 4 * 1024 * 1024  # a row of a few MiB: well under any database's limits


class CodeArchiveDamaged(SpothopError):
    """An archive the store says it holds cannot be read back as itself: a chunk is missing or
    its bytes are not the archive's. Nothing is served from it; the fix is to upload it again
    (``spothop launch --server`` sends it again once its ``code_archives`` row is deleted)."""


class CodeArchives:
    """The archives in the store over ``engine`` (see the module)."""

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock

    def stored(self, sha256: str) -> int | None:
        """The archive's size when the store holds it whole; else None."""
        with self._engine.connect() as conn:
            return _size(conn, sha256)

    def held(self, project: str, sha256: str) -> int | None:
        """The archive's size when ``project`` uploaded it and the store holds it; else None."""
        query = (
            select(archives_t.c.size_bytes)
            .join(projects_t, projects_t.c.sha256 == archives_t.c.sha256)
            .where(archives_t.c.sha256 == sha256, projects_t.c.project == project)
        )
        with self._engine.connect() as conn:
            size = conn.execute(query).scalar_one_or_none()
        return None if size is None else int(size)

    def put(self, sha256: str, source: BinaryIO, project: str) -> bool:
        """Store the bytes read from ``source`` as archive ``sha256`` and record ``project`` as
        holding it; whether the bytes were written (False: the store had them). ValueError, and
        nothing kept, when the bytes' sha256 is not ``sha256``."""
        written = False
        if self.stored(sha256) is None:
            try:
                with self._engine.begin() as conn:
                    self._write(conn, sha256, source)
                written = True
            except IntegrityError:
                if self.stored(sha256) is None:  # not a replica's put of the same archive
                    raise
        try:
            with self._engine.begin() as conn:
                row = {"project": project, "sha256": sha256, "uploaded_unix_s": self._clock()}
                conn.execute(insert(projects_t).values(**row))
        except IntegrityError:  # the project had it already: uploaded again now (pruning reads it)
            with self._engine.begin() as conn:
                conn.execute(
                    update(projects_t)
                    .where(projects_t.c.project == project, projects_t.c.sha256 == sha256)
                    .values(uploaded_unix_s=self._clock())
                )
        return written

    def _write(self, conn: Connection, sha256: str, source: BinaryIO) -> None:
        digest, size, seq = hashlib.sha256(), 0, 0
        # Chunks left by an archive whose row was deleted (damaged, to be uploaded again).
        conn.execute(delete(chunks_t).where(chunks_t.c.sha256 == sha256))
        while data := source.read(CHUNK_BYTES):
            digest.update(data)
            size += len(data)
            conn.execute(insert(chunks_t).values(sha256=sha256, seq=seq, data=data))
            seq += 1
        if digest.hexdigest() != sha256:
            raise ValueError(
                f"the bytes' sha256 is {digest.hexdigest()} ({size} bytes), not {sha256}"
            )
        row = {"sha256": sha256, "size_bytes": size, "chunks": seq}
        conn.execute(insert(archives_t).values(**row, stored_unix_s=self._clock()))

    def read_into(self, sha256: str, out: BinaryIO) -> bool:
        """Write archive ``sha256`` to ``out``, checked (see the module); False when the store
        does not hold it. :class:`CodeArchiveDamaged` when what it holds is not the archive
        (``out`` then has partial bytes: the caller drops them)."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(archives_t.c.size_bytes, archives_t.c.chunks).where(
                    archives_t.c.sha256 == sha256
                )
            ).first()
            if row is None:
                return False
            size, count = int(row.size_bytes), int(row.chunks)
            present = conn.execute(
                select(func.count()).where(chunks_t.c.sha256 == sha256, chunks_t.c.seq < count)
            ).scalar_one()
            if present != count:
                raise _damaged(sha256, f"{count - present} of its {count} chunks are missing")
            digest, got = hashlib.sha256(), 0
            for seq in range(count):
                data = conn.execute(
                    select(chunks_t.c.data).where(
                        chunks_t.c.sha256 == sha256, chunks_t.c.seq == seq
                    )
                ).scalar_one_or_none()
                if data is None:
                    raise _damaged(sha256, f"chunk {seq} of its {count} is missing")
                digest.update(data)
                got += len(data)
                out.write(data)
        if got != size or digest.hexdigest() != sha256:
            raise _damaged(
                sha256, f"its chunks read back as {got} bytes with sha256 {digest.hexdigest()}"
            )
        return True


def _size(conn: Connection, sha256: str) -> int | None:
    size = conn.execute(
        select(archives_t.c.size_bytes).where(archives_t.c.sha256 == sha256)
    ).scalar_one_or_none()
    return None if size is None else int(size)


def _damaged(sha256: str, what: str) -> CodeArchiveDamaged:
    return CodeArchiveDamaged(
        f"the stored archive {sha256} is damaged: {what}; it was not served. Delete its row "
        f"(DELETE FROM code_archives WHERE sha256 = '{sha256}') and upload it again "
        "(`spothop launch --server` sends what the server lacks)"
    )
