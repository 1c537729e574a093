"""One save outside the Checkpointer: the handle its caller holds, what it cost, and the job the
save thread writes and commits.

Contracts
    * :class:`SaveHandle` is what :meth:`~spothop.checkpoint.checkpointer.Checkpointer.save`
      returns: ``wait()`` gives the committed manifest or raises
      :class:`~spothop.checkpoint.errors.CheckpointWriteError` (a failure, or a cancellation by
      an emergency save); ``wait_copied()`` holds back a write to the state until an overlapped
      copy is done; ``stats`` waits for the save and gives its :class:`SaveStats`.
    * :class:`SaveJob` is everything the save thread needs to write one checkpoint, captured
      when ``save()`` was called (the step, the tier, the delta's base, RNG states, the data
      position, metadata, sharding). :meth:`SaveJob.commit` writes it: the pack files first,
      the :class:`~spothop.checkpoint.manifest.Manifest` last and atomically (the commit); a
      failure removes what it wrote and never touches an earlier checkpoint.
    * :func:`flatten_state` is a save's step 2: the state as leaves by path, with their sharding
      and the leaves trusted as unchanged; it raises
      :class:`~spothop.checkpoint.errors.CheckpointConfigError` before anything is written.
    * :func:`direct_leaves` gives the leaves a synchronous full save writes straight from the
      caller's arrays (no host copy).
    * :func:`log_failure` logs, on the ``spothop.checkpoint`` logger, why a save did not commit.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from spothop.checkpoint import reshard
from spothop.checkpoint import tree as tree_mod
from spothop.checkpoint.errors import CheckpointConfigError, CheckpointWriteError
from spothop.checkpoint.manifest import FORMAT_VERSION, Manifest, Shard, Tier, WorldLayout
from spothop.checkpoint.pack import HostLeaf, PackSet, SaveCancelled, write_packs
from spothop.checkpoint.reader import manifest_path
from spothop.checkpoint.snapshot import DeltaBase, Snapshot
from spothop.checkpoint.store import Store
from spothop.errors import SpothopError

log = logging.getLogger("spothop.checkpoint")


@dataclass(frozen=True)
class SaveStats:
    """What one save cost and what it wrote."""

    # The copy to host memory: the loop's stall when the copy runs inside ``save()``; an overlapped
    # copy runs beside the next step, and its stall is the handle's ``blocking_s + waited_s``.
    blocking_s: float
    total_s: float  # from the ``save()`` call to the commit
    bytes_written: int
    bytes_copied: int
    chunks_written: int
    chunks_reused: int  # taken from the parent (emergency deltas), matched chunks included
    chunks_matched: int = (
        0  # found equal to the parent by comparison with the retained host copy: not hashed
    )


class SaveHandle:
    """A save in progress. ``wait()`` returns its manifest or raises why it failed.

    ``blocking_s`` is the time :meth:`~spothop.checkpoint.checkpointer.Checkpointer.save` held
    the caller. For an overlapped save (``overlap=True``) the copy runs afterwards, and the caller
    must :meth:`wait_copied` before it changes the state; the time that waited is added up in
    ``waited_s``. The training loop's stall is ``blocking_s + waited_s``.
    """

    def __init__(
        self,
        checkpoint_id: str,
        step: int,
        tier: Tier,
        blocking_s: float,
        future: Future[tuple[Manifest, SaveStats]],
        cancel: threading.Event,
        copied: Future[Snapshot] | None = None,
    ) -> None:
        self.checkpoint_id, self.step, self.tier, self.blocking_s = (
            checkpoint_id,
            step,
            tier,
            blocking_s,
        )
        self.waited_s = 0.0
        self._future, self._cancel, self._copied = future, cancel, copied

    def done(self) -> bool:
        return self._future.done()

    def copied(self) -> bool:
        """Whether the state has been copied, so the live tensors may change (always, unless overlapped)."""
        return self._copied is None or self._copied.done()

    def wait_copied(self, timeout: float | None = None) -> float:
        """Block until the state has been copied; returns the seconds waited (also added to ``waited_s``).

        A failed copy does not raise here: :meth:`wait` reports it."""
        if self._copied is None or self._copied.done():
            return 0.0
        start = time.perf_counter()
        with contextlib.suppress(Exception):
            self._copied.exception(timeout)
        waited = time.perf_counter() - start
        self.waited_s += waited
        return waited

    def wait(self, timeout: float | None = None) -> Manifest:
        """The committed manifest; raises :class:`CheckpointWriteError` if the save failed or was cancelled."""
        try:
            return self._future.result(timeout)[0]
        except SaveCancelled:
            raise CheckpointWriteError(
                f"save {self.checkpoint_id} was cancelled for an emergency save"
            ) from None

    @property
    def stats(self) -> SaveStats:
        """The save's measurements; waits for it to finish."""
        return self._future.result()[1]


@dataclass(frozen=True)
class SaveJob:
    """One save as the save thread receives it: what :meth:`Checkpointer.save` captured."""

    checkpoint_id: str
    step: int
    tier: Tier
    copying: Future[Snapshot]  # resolved at once unless the save overlaps its copy
    base: DeltaBase | None
    rng: dict[str, Any]
    data_position: dict[str, Any]
    user_metadata: dict[str, Any]
    wall_time: float
    started: float
    sharding: dict[str, Shard]

    def manifest(
        self,
        snapshot: Snapshot,
        leaves: Mapping[str, Any],
        files: tuple[Any, ...],
        world: WorldLayout,
        format_version: int = FORMAT_VERSION,
    ) -> Manifest:
        return Manifest(
            self.checkpoint_id,
            self.step,
            self.wall_time,
            self.tier,
            self.base.manifest.checkpoint_id if self.base else None,
            files,
            leaves,
            snapshot.tree,
            self.rng,
            self.data_position,
            world,
            self.user_metadata,
            format_version=format_version,
            sharding=self.sharding,
        )

    def commit(
        self,
        store: Store,
        cancel: threading.Event,
        *,
        streams: int,
        level: int | None,
        chunk_bytes: int,
        workers: int,
        compress_below: float,
        world: WorldLayout,
        made_on: dict[str, Any],
    ) -> tuple[Snapshot, Manifest, PackSet]:
        """Write this save into ``store``: data first, manifest last (the commit); returns the
        snapshot written, the manifest and the packs.

        Waits for the copy (an overlapped one cannot be cancelled). On any failure the
        checkpoint's folder is removed and the error raised: a :class:`SpothopError`,
        :class:`SaveCancelled` or a ``BaseException`` that is no ``Exception`` as it is,
        anything else as :class:`CheckpointWriteError`.
        """
        try:
            snapshot = self.copying.result()
            result = write_packs(
                store,
                self.checkpoint_id,
                snapshot.leaves,
                streams=streams,
                parent=self.base.manifest.leaves if self.base else None,
                level=level,
                chunk_bytes=chunk_bytes,
                workers=workers,
                cancel=cancel,
                compress_below=compress_below,
                ready=snapshot.streamed.wait if snapshot.streamed is not None else None,
            )
            manifest = self.manifest(
                snapshot, result.leaves, result.files, world, result.digest.format_version
            )
            if made_on:
                manifest = replace(manifest, made_on=made_on)
            store.write_atomic(manifest_path(self.checkpoint_id), manifest.to_json())  # the commit
        except BaseException as exc:
            with contextlib.suppress(Exception):
                store.remove(self.checkpoint_id)
            if isinstance(exc, SpothopError | SaveCancelled) or not isinstance(exc, Exception):
                raise
            raise CheckpointWriteError(
                f"saving {self.checkpoint_id} to {store.url} failed: {exc}"
            ) from exc
        return snapshot, manifest, result


def flatten_state(
    state: Any, frozen: Iterable[Any], sharded: Mapping[str, Shard] | None
) -> tuple[tree_mod.Flattened, dict[str, Shard], frozenset[str]]:
    """Step 2 of a save: the state's leaves, the sharding of each sharded one, and the leaves
    trusted as unchanged (those sharing storage with ``frozen`` tensors); CheckpointConfigError
    for what cannot be stored."""
    flat = tree_mod.flatten(state)
    sharding = reshard.resolve_sharding(sharded, list(flat.arrays))
    trusted = frozenset[str]()
    frozen = list(frozen)
    if frozen:
        if "torch" not in sys.modules:
            raise CheckpointConfigError(
                "frozen= takes torch tensors (the frozen parameters); torch is not in use"
            )
        from spothop.checkpoint import _torch_arrays as ta

        trusted = ta.sharing_storage(flat.arrays, frozen)
    return flat, sharding, trusted


Direct = tuple[dict[str, HostLeaf], dict[str, Any]]  # leaves written from the arrays, their sources


def direct_leaves(arrays: Mapping[str, Any]) -> Direct:
    """The leaves a synchronous full save writes straight from the caller's memory, and the torch
    tensors' sources (version keys) among them.

    The caller waits for the commit, so the state cannot change under the write: no host copy is
    needed. Taken: C-contiguous NumPy arrays and CPU tensors whose bytes are their values in order
    (:func:`_torch_arrays.plain_bytes`). Left to the copying path: device tensors (they still need
    a device-to-host copy) and anything strided, conjugated or negated."""
    leaves: dict[str, HostLeaf] = {}
    sources: dict[str, Any] = {}
    for key, value in arrays.items():
        if isinstance(value, np.ndarray):
            if value.flags.c_contiguous:
                data = value.reshape(-1).view(np.uint8)
                leaves[key] = HostLeaf(
                    key, "numpy", value.dtype.str, tuple(value.shape), data, owner=value
                )
            continue
        from spothop.checkpoint import _torch_arrays as ta

        live = ta.plain_bytes(value)
        if live is not None:
            shape = tuple(value.shape)
            leaves[key] = HostLeaf(key, "torch", ta.dtype_name(value), shape, live, owner=value)
            sources[key] = ta.source_of(value)
    return leaves, sources


def resolved(snapshot: Snapshot) -> Future[Snapshot]:
    """A copy made inside ``save()``, as the future an overlapped copy would be."""
    done: Future[Snapshot] = Future()
    done.set_result(snapshot)
    return done


def log_failure(checkpoint_id: str, future: Future[Any]) -> None:
    """Log why a save ended without a commit (a done callback of its future)."""
    exc = future.exception()
    if isinstance(exc, SaveCancelled):
        log.info("save %s cancelled for an emergency save", checkpoint_id)
    elif exc is not None:
        log.error("save %s failed: %s", checkpoint_id, exc)
