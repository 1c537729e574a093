"""Exactly-once shard outputs in an object store (fsspec: a local folder, S3, …).

The protocol, per attempt of a shard:

1. write the output under a temporary name unique to the attempt,
   ``<root>/_tmp/<shard>.<token>`` (the fencing token names the attempt);
2. ``queue.complete(lease, final_ref)``, the fenced commit: exactly one
   attempt of a shard can succeed, and its token is recorded;
3. publish: move the winner's temporary object to ``<root>/<shard>``
   (a rename on a local disk; a server-side copy then delete on S3, where a
   copy makes the whole object appear at once). An output in a format a
   reader finds by its suffix keeps it: a Parquet file (its bytes begin with
   ``PAR1``) is published as ``<root>/<shard>.parquet``, so ``out/*.parquet``
   finds every shard. :meth:`OutputStore.read` and :meth:`OutputStore.published`
   take a shard id and find either name (outputs published before the suffix).

An attempt whose complete raises :class:`LeaseLost` deletes its temporary
object and never publishes, so no second output can be committed. A worker
killed between steps 2 and 3 leaves a done shard whose winner is still under
its temporary name: :func:`finalize_outputs` publishes it (publishing is
idempotent) and deletes the temporary objects of losers.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from spothop.queue.base import ShardQueue
from spothop.queue.errors import LeaseLost, QueueError
from spothop.queue.model import Completion, Lease, ShardState

TEMP_DIR = "_tmp"
PARQUET_MAGIC = b"PAR1"
SUFFIXES = (".parquet",)  # the suffixes an output is published with (module contract, 3)


def output_suffix(head: bytes) -> str:
    """The suffix an output whose bytes begin with ``head`` is published with ("" for none)."""
    return ".parquet" if head[: len(PARQUET_MAGIC)] == PARQUET_MAGIC else ""


@dataclass(frozen=True)
class FinalizeReport:
    published: int
    losers_removed: int


class OutputStore:
    """Where a job's outputs go: ``url`` is any fsspec URL or a local path."""

    def __init__(self, url: str, **storage_options: Any) -> None:
        self.url = url
        self.fs, root = fsspec.core.url_to_fs(url, **storage_options)
        self.root = root.rstrip("/")
        self._local = isinstance(self.fs, LocalFileSystem)
        self.fs.makedirs(f"{self.root}/{TEMP_DIR}", exist_ok=True)

    def final_path(self, shard_id: str, suffix: str = "") -> str:
        return f"{self.root}/{shard_id}{suffix}"

    def temp_path(self, shard_id: str, token: int) -> str:
        return f"{self.root}/{TEMP_DIR}/{shard_id}.{token}"

    def ref(self, shard_id: str, suffix: str = "") -> str:
        """The output reference recorded at complete: the final object's full URL."""
        return str(self.fs.unstrip_protocol(self.final_path(shard_id, suffix)))

    def write_temp(self, lease: Lease, data: bytes) -> str:
        """Write ``data`` under the attempt's temporary name, durably before returning."""
        path = self.temp_path(lease.shard_id, lease.token)
        if self._local:
            # fsync before the commit: a completed shard's bytes must survive a crash.
            with open(path, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        else:
            with self.fs.open(path, "wb") as handle:
                handle.write(data)
        return path

    def commit(self, queue: ShardQueue, lease: Lease, data: bytes) -> Completion:
        """Write, complete (fenced), publish. On LeaseLost the temporary object is removed
        and the error propagates: nothing of this attempt is published."""
        self.write_temp(lease, data)
        suffix = output_suffix(data)
        try:
            completion = queue.complete(lease, self.ref(lease.shard_id, suffix))
        except LeaseLost:
            self.discard(lease.shard_id, lease.token)
            raise
        self.publish(lease.shard_id, completion.token, suffix)
        return completion

    def publish(self, shard_id: str, token: int, suffix: str | None = None) -> None:
        """Move the winning attempt's temporary object to the final name; idempotent.

        Only call it with the token the queue recorded at complete. ``suffix``: the final
        name's (None: from the temporary object's first bytes, module contract 3).
        """
        temp = self.temp_path(shard_id, token)
        if suffix is None:
            suffix = self._suffix_of(temp, shard_id)
        final = self.final_path(shard_id, suffix)
        try:
            if self._local:
                os.replace(temp, final)  # atomic on POSIX
            else:
                self.fs.copy(temp, final)
                self.fs.rm(temp)
        except FileNotFoundError:
            pass  # another publisher (the worker, or finalize) moved it first
        if not self.fs.exists(final):
            raise QueueError(
                f"shard {shard_id!r} is done (token {token}) but its output "
                f"{temp!r} is gone and {final!r} was never published"
            )

    def _suffix_of(self, temp: str, shard_id: str) -> str:
        """The final suffix of ``temp``'s output: from its first bytes, or (it is gone: another
        publisher moved it) the suffix of the final object already there."""
        try:
            with self.fs.open(temp, "rb") as handle:
                return output_suffix(handle.read(len(PARQUET_MAGIC)))
        except FileNotFoundError:
            found = self._final_of(shard_id)
            return "" if found is None else found[len(self.final_path(shard_id)) :]

    def _final_of(self, shard_id: str) -> str | None:
        """The path of ``shard_id``'s published output, with or without a suffix (None: none)."""
        for suffix in ("", *SUFFIXES):
            path = self.final_path(shard_id, suffix)
            if self.fs.exists(path):
                return path
        return None

    def discard(self, shard_id: str, token: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.temp_path(shard_id, token))

    def read(self, shard_id: str) -> bytes:
        """``shard_id``'s published output, whichever suffix it was published with."""
        path = self._final_of(shard_id)
        return bytes(self.fs.cat_file(self.final_path(shard_id) if path is None else path))

    def published(self) -> list[str]:
        """Shard ids with a published output (each without its suffix)."""
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self._list(self.root)]
        return sorted(_shard_of(n) for n in names if n != TEMP_DIR)

    def temporaries(self) -> list[tuple[str, int]]:
        """(shard id, token) of every temporary object left."""
        found: list[tuple[str, int]] = []
        for path in self._list(f"{self.root}/{TEMP_DIR}"):
            shard_id, _, token = path.rstrip("/").rsplit("/", 1)[-1].rpartition(".")
            if token.isdigit():
                found.append((shard_id, int(token)))
        return found

    def _list(self, folder: str) -> list[str]:
        # Object stores have no empty folders, and s3fs caches listings: ask afresh.
        self.fs.invalidate_cache(folder)
        try:
            return [str(p) for p in self.fs.ls(folder, detail=False)]
        except FileNotFoundError:
            return []


def finalize_outputs(queue: ShardQueue, store: OutputStore) -> FinalizeReport:
    """Publish every done shard whose winner is still temporary; remove losers' objects.

    Safe while workers run: it removes only temporaries of done shards whose
    token is not the winner's (those attempts can never commit), plus every
    temporary object once the queue has no pending or leased shard left.
    """
    done = {r.id: r.token for r in queue.records(ShardState.DONE)}
    stats = queue.stats()
    drained = stats.pending == 0 and stats.leased == 0
    published = removed = 0
    for shard_id, token in store.temporaries():
        winner = done.get(shard_id)
        if winner == token:
            store.publish(shard_id, token)
            published += 1
        elif winner is not None or drained:
            store.discard(shard_id, token)
            removed += 1
    return FinalizeReport(published, removed)


def _shard_of(name: str) -> str:
    """The shard id of a published output's file name (its suffix, if any, dropped)."""
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
