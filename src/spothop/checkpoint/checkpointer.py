"""The :class:`Checkpointer`: three tiers, asynchronous saves, restore with fallback.

Tiers
    ``local``      a full, uncompressed snapshot on instance disk (survives a process restart)
    ``durable``    a full checkpoint in the object store (a folder by default, S3 or any fsspec URL)
    ``emergency``  a delta against the last durable checkpoint, written when notice is short

A save, step by step (:meth:`Checkpointer.save`; steps 1–5 run on the caller's thread)
    1. ``room`` — wait for the save in flight (backpressure: one at a time; an emergency save
       cancels a local or durable one instead) and for host buffers being prepared.
    2. ``flatten`` — the state as leaves by path, the sharded leaves resolved, the leaves of
       ``frozen`` tensors trusted; a value that cannot be stored raises
       :class:`CheckpointConfigError` here, before anything is written.
    3. ``name`` — the checkpoint's id, and for an emergency delta its base (the newest durable
       checkpoint of this world size).
    4. ``copy`` — the leaves into host memory (:func:`~spothop.checkpoint.snapshot.take_snapshot`),
       inside ``save()``, or on the copy thread with ``overlap``; a ``sync`` full save's CPU arrays
       are not copied.
    5. ``submit`` — RNG states, data position and metadata captured into a
       :class:`~spothop.checkpoint.saving.SaveJob`, its write queued on the save thread, the
       :class:`~spothop.checkpoint.saving.SaveHandle` returned.
    6. ``write`` (save thread) — packs, then the manifest (the commit); then the base of the next
       delta, the copies to the replicas, and the clean-up of superseded checkpoints, queued next.

Contracts
    * A save copies the state to host memory and returns; that copy is the only
      part the training loop waits for; host buffers are kept and reused between
      saves (``reuse_host_buffers``), and with ``skip_unchanged`` a tensor whose
      version counter has not moved since the last save is not copied again
      (opt-in: fused optimizers and ``.data`` writes do not bump the counter).
      With ``overlap=True`` the copy itself runs on a background thread while
      the caller goes on reading the state (forward and backward passes), and
      :meth:`SaveHandle.wait_copied` (an optimizer pre-step hook in
      :class:`TorchState`) holds back the first write to it.
      An emergency delta compares the live state with the host copy kept from its base (when
      that copy still holds the base's bytes) chunk by chunk, and copies and hashes only the
      chunks that differ; otherwise it hashes all. Hashing, compression and upload run on a
      background thread (with a pool of hashing/compression threads). At most one save is in
      flight: the next ``save`` waits for it (backpressure), except an emergency save, which
      cancels an in-flight local or durable save so that the emergency upload goes first.
    * Data first, manifest last: the manifest being written is the commit; a
      checkpoint without a manifest does not exist. A failed save leaves no
      manifest and never touches an earlier checkpoint.
    * :meth:`Checkpointer.restore` loads the newest checkpoint whose every byte
      verifies (and which the optional validation hook accepts), logging why
      each newer one was skipped.
    * With ``replicas`` (a durable store per region, :mod:`spothop.checkpoint.replicas`) every
      durable commit is copied to each in the background, and a restore reads the nearest
      replica that holds the newest checkpoint before the primary, and records which one served.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from spothop.checkpoint import gc as gc_mod
from spothop.checkpoint import reshard
from spothop.checkpoint import tree as tree_mod
from spothop.checkpoint.errors import CheckpointConfigError
from spothop.checkpoint.hardware import HardwareCheck
from spothop.checkpoint.interval import IntervalPolicy, SaveCostMeter, interval_from_env
from spothop.checkpoint.manifest import Manifest, Shard, Tier, WorldLayout, world_from_environment
from spothop.checkpoint.pack import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_COMPRESS_BELOW,
    DEFAULT_UPLOAD_STREAMS,
    SaveCancelled,
)
from spothop.checkpoint.reader import manifest_path, manifests_parsed_once
from spothop.checkpoint.replicas import CheckpointReplicas
from spothop.checkpoint.restore import (
    Restored,
    Validator,
    restore_agreed,
    restore_newest,
    steps_every_rank_committed,
)
from spothop.checkpoint.rng import capture_rng
from spothop.checkpoint.saving import (
    Direct,
    SaveHandle,
    SaveJob,
    SaveStats,
    direct_leaves,
    flatten_state,
    log_failure,
    resolved,
)
from spothop.checkpoint.snapshot import (
    DeltaBase,
    HostBuffers,
    Snapshot,
    allocate,
    take_snapshot,
    unprepared,
)
from spothop.checkpoint.store import Store
from spothop.errors import SpothopError
from spothop.paths import spothop_home
from spothop.worker import sdk

log = logging.getLogger("spothop.checkpoint")

# Checkpointers that may have a save in flight. A script that ends without ``close()`` would lose
# its last save: at exit ``concurrent.futures`` stops accepting work, and the save's hashing pool
# could not start. ``threading`` runs its exit hooks newest first, so this one (registered after
# ``concurrent.futures`` was imported) lets every save finish before that happens.
_open_checkpointers: weakref.WeakSet[Checkpointer] = weakref.WeakSet()


def _finish_saves_at_exit() -> None:
    for checkpointer in list(_open_checkpointers):
        with contextlib.suppress(Exception):  # a failed save has logged its reason
            checkpointer.wait()
        checkpointer.replicas.wait()  # and its copies to the replicas (failures are logged)


getattr(threading, "_register_atexit", lambda hook: None)(_finish_saves_at_exit)

DEFAULT_KEEP_CHAINS = 3
DEFAULT_KEEP_LOCAL = 2
# Local disk outruns zstd, so local snapshots are raw; durable saves cross a network and
# pay for compression; emergency saves favour speed (level 1 is zstd's fastest real level).
# Either way a chunk is compressed only if a sample of it shrinks enough (``compress_below``).
DEFAULT_ZSTD_LEVELS: Mapping[Tier, int | None] = {
    Tier.LOCAL: None,
    Tier.DURABLE: 3,
    Tier.EMERGENCY: 1,
}
MAX_HASH_WORKERS = 8  # hashing and compression threads; more rarely helps a single upload stream


class Checkpointer:
    """Saves and restores training state in three tiers. One per rank; not shared between threads.

    ``url`` (the durable store) defaults to ``$SPOTHOP_CHECKPOINT_URL``, which the agent sets for
    its worker, then to a folder under ``$SPOTHOP_HOME``; ``local_url`` to a folder under
    ``$SPOTHOP_HOME`` named after the durable URL. ``world`` (this rank's place) defaults to what
    the launcher's environment says (:func:`spothop.worker.world`): a world of one outside a
    group, this process's rank when the launcher names it (one process per node, or torchrun's
    ``RANK``); a node running several processes that the environment does not tell apart must
    pass it.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        local_url: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        keep_chains: int = DEFAULT_KEEP_CHAINS,
        keep_local: int = DEFAULT_KEEP_LOCAL,
        zstd_levels: Mapping[Tier, int | None] | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        workers: int | None = None,
        interval: IntervalPolicy | None = None,
        world: WorldLayout | None = None,
        track_versions: bool = False,
        reuse_host_buffers: bool = True,
        skip_unchanged: bool = False,
        compress_below: float = DEFAULT_COMPRESS_BELOW,
        upload_streams: int = DEFAULT_UPLOAD_STREAMS,
        clock: Callable[[], float] = time.monotonic,
        replicas: Mapping[str, str] | None = None,
        gpu: str | None = None,
    ) -> None:
        if keep_chains < 1 or keep_local < 1:
            raise CheckpointConfigError("keep_chains and keep_local must be at least 1")
        if chunk_bytes < 1:
            raise CheckpointConfigError(f"chunk_bytes must be positive; got {chunk_bytes}")
        if upload_streams < 1:
            raise CheckpointConfigError(f"upload_streams must be at least 1; got {upload_streams}")
        self.upload_streams = upload_streams
        self.world = world or world_from_environment()
        durable = url or sdk.checkpoint_url() or str(spothop_home() / "checkpoints" / "default")
        local = local_url or str(
            spothop_home() / "snapshots" / hashlib.sha256(durable.encode()).hexdigest()[:12]
        )
        self.durable = Store(self._per_rank(durable), storage_options)
        self._durable_url, self._local_url, self._storage_options = durable, local, storage_options
        self.local = Store(self._per_rank(local))
        self.keep_chains, self.keep_local = keep_chains, keep_local
        # ``replicas`` None: the launcher's $SPOTHOP_CHECKPOINT_REPLICAS (none outside spothop).
        self.replicas = CheckpointReplicas(
            durable,
            self._per_rank,
            rank=self.world.rank,
            replicas=replicas,
            storage_options=storage_options,
            keep_chains=keep_chains,
        )
        # The GPU saves record and restores are checked against (``gpu`` None: $SPOTHOP_GPU).
        self.hardware = HardwareCheck.from_env(gpu)
        self.zstd_levels = {**DEFAULT_ZSTD_LEVELS, **(zstd_levels or {})}
        self.chunk_bytes = chunk_bytes
        self.workers = workers or min(MAX_HASH_WORKERS, os.cpu_count() or 1)
        # No policy given: what the job's environment says (spec interval, else the market's λ).
        self.interval = interval or interval_from_env()
        # Off by default: fused optimizers (AdamW(fused=True), the Hugging Face
        # default) write parameters without bumping PyTorch's version counter, so
        # trusting the counter could keep stale weights in a delta. Content
        # hashes always see the change; opt in only with unfused optimizers.
        self.track_versions = track_versions
        self.compress_below = compress_below
        self.skip_unchanged = skip_unchanged
        # One host copy of the state stays resident between saves; None: fresh copies each save.
        self._buffers: HostBuffers | None = HostBuffers() if reuse_host_buffers else None
        self.cost = SaveCostMeter()
        self._clock = clock
        self._last_save_at = clock()
        self._base: DeltaBase | None = None
        self._executor = ThreadPoolExecutor(1, "spothop-ckpt-save")
        # Overlapped copies run here, not behind a clean-up queued on the save thread.
        self._copier = ThreadPoolExecutor(1, "spothop-ckpt-copy")
        self._inflight: SaveHandle | None = None
        # The clean-up after the last commit (same thread).
        self._collecting: Future[None] | None = None
        self._preparing: Future[int] | None = None  # host buffers being allocated ahead of a save
        _open_checkpointers.add(self)

    def _per_rank(self, url: str) -> str:
        return (
            url if self.world.world_size == 1 else f"{url.rstrip('/')}/rank-{self.world.rank:05d}"
        )

    # -- when -----------------------------------------------------------------------------

    def next_interval_s(self) -> float:
        """Seconds between saves under the interval policy and the save cost measured so far."""
        return self.interval.interval_s(self.cost.estimate_s, self.cost.stall_s)

    def should_save(self, now: float | None = None) -> bool:
        """True once the interval has passed since the last save started."""
        current = self._clock() if now is None else now
        return current - self._last_save_at >= self.next_interval_s()

    # -- save -----------------------------------------------------------------------------

    def prepare(self, state: Any) -> Future[int]:
        """Allocate, in the background, the host buffers a save of ``state`` will copy into.

        Otherwise the first save allocates them inside the training loop's stall, where the page
        faults (and, for device tensors, pinning) cost several times the copy itself. Call it once
        the state has its final shapes: after the first optimizer step, which creates Adam's
        moments. Only shapes and dtypes are read, so training may go on meanwhile; a save waits
        for a prepare still running. The future gives the bytes allocated (0 when host buffers
        are not kept: ``reuse_host_buffers=False``).
        """
        if self._buffers is None:
            nothing: Future[int] = Future()
            nothing.set_result(0)
            return nothing
        self._await_prepared()
        self._preparing = self._executor.submit(
            allocate, unprepared(state, self._buffers), self._buffers
        )
        return self._preparing

    def _await_prepared(self) -> None:
        preparing, self._preparing = self._preparing, None
        if preparing is not None and preparing.exception() is not None:  # saves still work
            log.warning("preparing host buffers failed: %s", preparing.exception())

    def save(
        self,
        state: Any,
        step: int,
        *,
        tier: Tier | str = Tier.DURABLE,
        data_position: Mapping[str, Any] | None = None,
        user_metadata: Mapping[str, Any] | None = None,
        overlap: bool = False,
        frozen: Iterable[Any] = (),
        sharded: Mapping[str, Shard] | None = None,
        sync: bool = False,
    ) -> SaveHandle:
        """Copy ``state`` to host memory and write it in the background; returns at once after the copy.

        ``state`` is a tree of dicts/lists/tuples with NumPy arrays, torch
        tensors and plain values. ``data_position`` (where the data loader
        is) and ``user_metadata`` must be JSON-serialisable; RNG states and
        the plain values are captured here. Raises :class:`CheckpointConfigError`
        for a value that cannot be stored, before anything is written.

        With ``overlap`` the copy of the arrays runs on a background thread
        too, and ``save`` returns before it: the caller may go on with work
        that only *reads* the arrays (the next forward and backward pass) and
        must call :meth:`SaveHandle.wait_copied` before anything writes them
        (the optimizer step). :meth:`TorchState.save` does that with an
        optimizer hook; :meth:`Checkpointer.save` cannot see who writes what.

        ``frozen`` lists tensors every write to which bumps their version
        counter (frozen weights: ``requires_grad=False``, in no optimizer,
        never written through ``.data``): leaves sharing their storage are
        trusted as unchanged while their counter stands still, so neither
        copied nor compared, whatever ``track_versions`` and ``skip_unchanged``
        say. That makes a LoRA save or delta cost the adapter's size.
        :meth:`TorchState.save` passes the model's frozen parameters.

        ``sharded`` marks the leaves this rank holds one slice of (``fnmatch`` patterns over
        leaf paths, such as ``"optimizer/state/*/exp_avg"``, each with a :class:`Shard`: the
        dim and the split rule); the manifest records them, so a restore into another world
        size concatenates and re-splits them (:mod:`spothop.checkpoint.reshard`). Every other
        leaf is taken to be replicated: the same bytes on every rank.

        ``sync``: return once committed (or raise); a full save then writes CPU arrays straight
        from ``state`` (:func:`saving.direct_leaves`), their kept buffers untouched: after a
        durable one the next emergency delta hashes those leaves instead of comparing them.
        """
        start, tier = time.perf_counter(), Tier(tier)
        if sync and overlap:
            raise CheckpointConfigError("a save cannot both overlap its copy and be synchronous")
        self._make_room(tier)  # 1. room
        self._await_prepared()  # the buffers belong to one thread at a time
        flat, sharding, trusted = flatten_state(state, frozen, sharded)  # 2. flatten
        base = self._delta_base() if tier is Tier.EMERGENCY else None  # 3. name
        # Named before the copy: the host buffers record which save's bytes they hold, so that a later
        # emergency delta against this checkpoint can compare with them instead of hashing everything.
        checkpoint_id = gc_mod.checkpoint_id(step, tier.value, secrets.token_hex(3))
        direct = direct_leaves(flat.arrays) if sync and base is None else None
        copying = self._copy(flat, base, checkpoint_id, trusted, overlap, direct)  # 4. copy
        job = SaveJob(
            checkpoint_id,
            step,
            tier,
            copying,
            base,
            capture_rng(),
            dict(data_position or {}),
            dict(user_metadata or {}),
            time.time(),
            start,
            sharding,
        )
        self._inflight = self._submit(job, copying if overlap else None)  # 5. submit
        self._last_save_at = self._clock()
        if sync:  # the write reads the caller's arrays: it must end before save() does
            self._inflight.wait()
        return self._inflight

    def _copy(
        self,
        flat: tree_mod.Flattened,
        base: DeltaBase | None,
        checkpoint_id: str,
        trusted: frozenset[str],
        overlap: bool,
        direct: Direct | None = None,
    ) -> Future[Snapshot]:
        """Step 4: the leaves copied to host memory, here or (``overlap``) on the copy thread."""

        def copy(stream: bool) -> Snapshot:
            return take_snapshot(
                flat,
                base,
                self.track_versions,
                self._buffers,
                self.skip_unchanged,
                save_id=checkpoint_id,
                chunk_bytes=self.chunk_bytes,
                frozen=trusted,
                stream=stream,
                direct=direct,
            )

        # Inside save() the bulk of the copy is streamed: made after the write is queued, which
        # follows it leaf by leaf (snapshot.StreamedCopy); save() still returns once it is done.
        return self._copier.submit(copy, False) if overlap else resolved(copy(True))

    def _submit(self, job: SaveJob, copying: Future[Snapshot] | None) -> SaveHandle:
        """Step 5: the write queued on the save thread; its handle (``copying``: an overlapped copy)."""
        cancel = threading.Event()
        future = self._executor.submit(self._write, job, cancel)
        future.add_done_callback(lambda f: log_failure(job.checkpoint_id, f))
        streamed = job.copying.result().streamed if copying is None else None
        if streamed is not None:
            try:
                streamed.run()  # the rest of the copy, with the writer one step behind it
            except BaseException:
                with contextlib.suppress(BaseException):
                    future.exception()  # the write fails with the same error: let it clean up
                if self._buffers is not None:
                    # They claim copies the failed copy never finished: the next save starts afresh.
                    self._buffers.clear()
                raise
        handle = SaveHandle(
            job.checkpoint_id,
            job.step,
            job.tier,
            time.perf_counter() - job.started,
            future,
            cancel,
            copying,
        )
        # The stall is known once the copy is (an overlapped save's wait happens at the next step,
        # usually before its write is done): record it when the save ends.
        future.add_done_callback(
            lambda f: self.cost.record_stall(handle.blocking_s + handle.waited_s)
        )
        return handle

    def wait(self) -> Manifest | None:
        """Wait for the save in flight (if any) and its clean-up; returns its manifest or raises its error."""
        manifest = self._inflight.wait() if self._inflight is not None else None
        self._settle()
        return manifest

    def _settle(self) -> None:
        """Wait for the deletion of superseded checkpoints queued after the last commit."""
        collecting = self._collecting
        if collecting is not None:
            collecting.result()  # _collect logs its own failures and never raises

    def _make_room(self, tier: Tier) -> None:
        """Step 1: wait for the save in flight; an emergency save cancels a local or durable one."""
        inflight = self._inflight
        if inflight is None or inflight.done():
            return
        if tier is Tier.EMERGENCY and inflight.tier is not Tier.EMERGENCY:
            inflight._cancel.set()  # the emergency delta goes first
        with contextlib.suppress(SaveCancelled, SpothopError):
            inflight._future.result()  # backpressure: one save in flight at most

    def _delta_base(self) -> DeltaBase | None:
        if self._base is not None:
            return self._base
        from spothop.checkpoint.reader import committed

        # A re-formed job's rank folder may also hold another world's checkpoints: not a base.
        durable = [
            m
            for m in committed(self.durable)[0]
            if m.tier is Tier.DURABLE and m.world.world_size == self.world.world_size
        ]
        return DeltaBase(durable[-1]) if durable else None

    def _write(self, job: SaveJob, cancel: threading.Event) -> tuple[Manifest, SaveStats]:
        """Step 6, on the save thread: the commit, then the next delta's base, the replicas, and
        the clean-up queued behind it."""
        store = self.local if job.tier is Tier.LOCAL else self.durable
        snapshot, manifest, result = job.commit(
            store,
            cancel,
            # A local disk is written in place by every worker already; an object store gets streams.
            streams=1 if store.is_local else self.upload_streams,
            level=self.zstd_levels.get(job.tier),
            chunk_bytes=self.chunk_bytes,
            workers=self.workers,
            compress_below=self.compress_below,
            world=self.world,
            made_on=self.hardware.made_on,
        )
        total_s = time.perf_counter() - job.started
        self.cost.record(total_s)
        if job.tier is Tier.DURABLE:
            self._base = DeltaBase(manifest, snapshot.version_keys)
        if store is self.durable:
            self.replicas.committed(job.checkpoint_id)
        # Deleting superseded checkpoints (whole files: ~0.15 s per GiB on a local disk, a round trip per
        # object on S3) is no part of this save: it runs next on the same thread, after
        # ``SaveHandle.wait()`` has returned and before the next save's write starts.
        # ``Checkpointer.wait()``, ``restore()``, ``gc()`` and ``close()`` wait for it.
        try:
            self._collecting = self._executor.submit(self._collect, store, job.checkpoint_id)
        except RuntimeError:  # the executor is shutting down: clean up here
            self._collect(store, job.checkpoint_id)
        return manifest, SaveStats(
            snapshot.stall_s,
            total_s,
            sum(f.size_bytes for f in result.files),
            snapshot.copied_bytes,
            result.chunks_written,
            result.chunks_reused,
            snapshot.matched_chunks,
        )

    def _collect(self, store: Store, protect: str) -> None:
        keep = self.keep_local if store is self.local else self.keep_chains
        try:
            # Sizes, not bytes: re-reading the kept chains after every save would cost more than the
            # save; a truncated file or a deleted parent manifest is still found (``ckpt gc`` reads all).
            gc_mod.collect(store, keep, protect=(protect,), verify_bytes=False)
        except Exception as exc:  # a failed clean-up must not fail a committed save
            log.warning("checkpoint gc in %s failed: %s", store.url, exc)

    # -- restore --------------------------------------------------------------------------

    def restore(
        self,
        validate: Validator | None = None,
        *,
        apply_rng: bool = True,
        agree: Callable[[int], int] | None = None,
        reshard_worlds: bool = True,
    ) -> Restored | None:
        """Load the newest checkpoint that verifies (local or durable); None if none was ever committed.

        Raises :class:`NoValidCheckpoint` when checkpoints exist but none verifies or passes
        ``validate``. With ``apply_rng`` the global RNG states are put back after validation,
        just before returning.

        With several ranks, only steps that every rank has committed are
        candidates (each rank reads the others' manifests in the durable store,
        and their local snapshots when they share this machine), so a save
        that one rank finished and another did not, when the instance went,
        never splits the ranks across two steps. ``agree`` goes further: a
        collective that returns the minimum of what every rank passes (an
        ``all_reduce`` with MIN; :meth:`TorchState.restore` brings one when
        ``torch.distributed`` is initialised). With it the ranks also agree
        when a checkpoint verifies on one rank and not on another: all go back
        to the newest step that every rank can load, or all raise.

        With ``reshard_worlds`` (the default) a newer step written by another world size (a
        re-formed job) is restored re-sharded to this one (:mod:`spothop.checkpoint.reshard`:
        replicated leaves from one old rank, sharded leaves concatenated and re-split, the RNG
        derived per rank; ``Restored.resharded`` says so); a checkpoint that cannot be
        re-sharded raises :class:`ReshardError`. Without it such steps are skipped.
        """
        self._make_room(Tier.DURABLE)
        self._settle()
        started = time.perf_counter()
        validate = self.hardware.validator(validate)  # a GPU the matrix refuses falls back
        with manifests_parsed_once():  # each manifest parsed once however often it is looked at
            steps = (
                steps_every_rank_committed(
                    self._durable_url, self._local_url, self.world, self._storage_options
                )
                if self.world.world_size > 1
                else None
            )
            stores = [self.local, *self.replicas.stores(), self.durable]

            def this_world(max_step: int | None) -> Restored | None:
                return restore_newest(stores, self.world, validate, False, steps, max_step)

            def other_worlds(max_step: int | None) -> list[reshard.Candidate]:
                return reshard.candidates(
                    self._durable_url, self._local_url, self.world, self._storage_options, max_step
                )

            newest = (
                reshard.newest_any_world(stores, self.world, validate, steps, other_worlds)
                if reshard_worlds
                else this_world
            )
            if agree is None:
                restored = newest(None)
            else:
                restored = restore_agreed(newest, agree, ", ".join(s.url for s in stores))
        if restored is not None and apply_rng:
            reshard.put_back_rng(restored)
        if restored is not None:
            restored = self.replicas.resolve(restored)
            self.replicas.restored(
                restored.manifest, restored.url, self.local.url, time.perf_counter() - started
            )
        if restored is not None and restored.resharded is None:
            # A replica's copy is the primary's checkpoint: deltas may build on it there.
            in_primary = restored.url == self.durable.url or (
                restored.url != self.local.url
                and self.durable.exists(manifest_path(restored.manifest.checkpoint_id))
            )
            if in_primary:
                self._base = DeltaBase(restored.manifest)
        return restored

    def gc(self, *, dry_run: bool = False) -> gc_mod.GcPlan:
        """Keep the newest ``keep_chains`` chains that verify (every byte) in the durable store.

        The clean-up after every save runs the same rules with the quick check (files and sizes)."""
        self._settle()
        return gc_mod.collect(self.durable, self.keep_chains, dry_run=dry_run)

    def close(self) -> None:
        """Wait for the save in flight, then stop the background thread."""
        _open_checkpointers.discard(self)
        with contextlib.suppress(SpothopError, SaveCancelled):
            self.wait()
        self._executor.shutdown(wait=True)
        self.replicas.close()  # every queued copy to a replica finishes first
        self._copier.shutdown(wait=True)
        if self._buffers is not None:
            self._buffers.clear()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
