"""Checkpoint replicas: a durable store per region, filled in the background, read nearest first.

A job that may move between regions names a store per region (the spec's
``checkpoint.replicas``: ``{"us-east-1": "s3://ckpt-use1/run", "gcp-sim/us-central1":
"gs://…"}``). The launcher hands them to the instance as ``$SPOTHOP_CHECKPOINT_REPLICAS``
(JSON) with the instance's own place, ``$SPOTHOP_PROVIDER`` and ``$SPOTHOP_REGION``.

Contracts:

1. **Replication.** Once a checkpoint commits in the primary durable store,
   :meth:`Replicator.submit` queues its copy to every replica on one
   background thread. Per replica: the checkpoint's ancestors the replica
   lacks (an emergency delta's durable base) are copied first, oldest first;
   per checkpoint its data files first and its manifest last. The manifest is
   the replica's commit, so a copy that was cut off leaves no manifest and is
   never loaded. A failed copy is logged and counted in ``failures``. It never
   touches the replica's earlier checkpoints. The next save copies what the
   replica still lacks, so the replica catches up. After each copy the
   replica keeps the same number of chains as the primary (the same gc,
   quick check). When the worker has been told to stop (a preemption notice:
   ``sdk.stop_requested()``), closing does not wait for copies. The copy in
   flight stops at its next block and the queued ones are dropped. The notice's
   seconds belong to the primary's emergency save, and a restore reads the
   primary for a checkpoint a replica lacks.
2. **Nearest first.** :meth:`ReplicaSet.nearest` orders the replicas for a
   restore: the one keyed ``provider/region`` of this instance, then the one
   keyed by its ``region``, then the others (those of the same provider
   first, then by key). The checkpointer reads its local snapshot first, then
   these, then the primary. The restore keeps its own rules (the newest step
   that verifies wins). At equal step the earlier store serves it. So the own
   region's replica serves the newest checkpoint when it holds it. When it
   lacks that checkpoint or its bytes fail to verify, the next store that
   holds it serves it. A replica that is behind never makes a restore go back
   to an older step.
   A restore also tries, first, the union of every store, :class:`NearestFirst`. It reads
   each checkpoint's files from the nearest store that has committed that
   checkpoint. A delta the replicas lack is then read from the primary and its
   durable base from the own region's replica: the bulk of the bytes stays near.
   The manifests' checksums verify every byte whatever store it came from.
   When this fails, the single stores follow.
3. **Restore records.** Every restore that loads a checkpoint writes a
   :class:`RestoreRecord` to the primary store's root. It holds which store
   served it (``local``, a replica's key, or ``primary``), this instance's
   place, whether that was the instance's own region, and the seconds it
   took. It is written as ``RESTORE-<ns>-r<rank>.json``, a file and not a
   folder, so no checkpoint listing or gc sees it.
   :func:`read_restore_records` reads them back (``spothop report`` shows
   them). A record that cannot be written is logged; the restore stands.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from spothop.checkpoint import gc as gc_mod
from spothop.checkpoint.errors import CheckpointConfigError, CheckpointError
from spothop.checkpoint.manifest import Manifest
from spothop.checkpoint.reader import ancestors, load_manifest, manifest_path
from spothop.checkpoint.restore import Restored
from spothop.checkpoint.store import Store
from spothop.worker import sdk

log = logging.getLogger("spothop.checkpoint")

REPLICAS_ENV = "SPOTHOP_CHECKPOINT_REPLICAS"  # JSON: {"region" or "provider/region": url}
REGION_ENV = "SPOTHOP_REGION"  # the instance's region, as its cloud spells it
PROVIDER_ENV = "SPOTHOP_PROVIDER"  # the instance's provider (spothop's name for the cloud)
PRIMARY = "primary"  # how a restore record names the job's own checkpoint URL
LOCAL = "local"  # ... and the instance's local snapshot
RECORD_PREFIX = "RESTORE-"
COPY_BLOCK_BYTES = 8 * 1024 * 1024  # one read and one write per block while copying a file


def replicas_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``$SPOTHOP_CHECKPOINT_REPLICAS`` as a mapping (empty when unset).

    Raises :class:`CheckpointConfigError` when it is not a JSON object of strings."""
    raw = (os.environ if environ is None else environ).get(REPLICAS_ENV, "").strip()
    if not raw:
        return {}
    try:
        found = json.loads(raw)
    except ValueError as exc:
        raise CheckpointConfigError(
            f"${REPLICAS_ENV} is not JSON ({exc}); it should map a region to a URL"
        ) from None
    if not isinstance(found, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in found.items()
    ):
        raise CheckpointConfigError(
            f'${REPLICAS_ENV} must be a JSON object of region to URL, e.g. {{"us-east-1": '
            f'"s3://bucket/run"}}; got {raw[:200]!r}'
        )
    return dict(found)


def here_from_env(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """This instance's (provider, region) from the launcher's environment; None where unset."""
    env = os.environ if environ is None else environ
    return env.get(PROVIDER_ENV) or None, env.get(REGION_ENV) or None


@dataclass(frozen=True)
class ReplicaSet:
    """The replicas of one checkpoint location and the place of the instance that reads them."""

    replicas: Mapping[str, str] = field(default_factory=dict)
    provider: str | None = None
    region: str | None = None

    @classmethod
    def from_env(
        cls, replicas: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
    ) -> ReplicaSet:
        """``replicas`` (default: ``$SPOTHOP_CHECKPOINT_REPLICAS``) at this instance's place."""
        provider, region = here_from_env(environ)
        found = replicas_from_env(environ) if replicas is None else dict(replicas)
        return cls(found, provider, region)

    def __bool__(self) -> bool:
        return bool(self.replicas)

    @property
    def own(self) -> str | None:
        """The key of this instance's own region's replica, if there is one."""
        if self.region is None:
            return None
        for key in (f"{self.provider}/{self.region}", self.region):
            if key in self.replicas:
                return key
        return None

    def nearest(self) -> list[tuple[str, str]]:
        """(key, url) of every replica, nearest first (module contract, 2)."""
        own = self.own

        def order(key: str) -> tuple[int, str]:
            if key == own:
                return (0, key)
            provider = key.rpartition("/")[0]
            same_provider = bool(provider) and provider == self.provider
            return (1 if same_provider else 2, key)

        return [(k, self.replicas[k]) for k in sorted(self.replicas, key=order)]


NEAREST_URL_PREFIX = "nearest-first:"


class NearestFirst(Store):
    """A read-only view of several stores, nearest first: each checkpoint is read from the
    first store that has committed it (its manifest is there, so its files are whole).

    ``served`` counts the files each store's key served (for the restore record)."""

    def __init__(self, stores: Sequence[tuple[str, Store]]) -> None:  # no Store.__init__: a view
        self.stores = list(stores)
        self.url = NEAREST_URL_PREFIX + ",".join(key for key, _ in self.stores)
        self.root = ""
        self.is_local = False
        self.fs: Any = None
        self.served: dict[str, int] = {}
        self._holder: dict[str, tuple[str, Store] | None] = {}

    def _holder_of(self, relative: str) -> tuple[str, Store] | None:
        checkpoint_id = relative.split("/", 1)[0]
        if checkpoint_id not in self._holder:
            self._holder[checkpoint_id] = next(
                (
                    (key, store)
                    for key, store in self.stores
                    if _quietly_exists(store, manifest_path(checkpoint_id))
                ),
                None,
            )
        return self._holder[checkpoint_id]

    def _store_for(self, relative: str) -> tuple[str, Store]:
        found = self._holder_of(relative)
        if found is None:
            raise FileNotFoundError(relative)
        return found

    def path(self, relative: str) -> str:
        return self._store_for(relative)[1].path(relative)

    def single_url(self, checkpoint_id: str) -> str | None:
        """The one store's URL that served all of a restore of ``checkpoint_id``; None if several."""
        keys = set(self.served)
        if not keys:
            holder = self._holder_of(checkpoint_id)
            return holder[1].url if holder is not None else None
        if len(keys) > 1:
            return None
        return next(store.url for key, store in self.stores if key in keys)

    def exists(self, relative: str) -> bool:
        found = self._holder_of(relative)
        return found is not None and _quietly_exists(found[1], relative)

    def read(self, relative: str) -> bytes:
        return self._store_for(relative)[1].read(relative)

    def open_read(self, relative: str) -> Any:
        key, store = self._store_for(relative)
        self.served[key] = self.served.get(key, 0) + 1
        return store.open_read(relative)

    def list_dirs(self) -> list[str]:
        names: set[str] = set()
        for _, store in self.stores:
            try:
                names.update(store.list_dirs())
            except (OSError, CheckpointError):
                continue  # a store that cannot be listed now holds nothing for this restore
        return sorted(names)

    def remove(self, relative: str) -> None:
        raise CheckpointConfigError("a nearest-first view is read-only")

    def write_atomic(self, relative: str, text: str) -> None:
        raise CheckpointConfigError("a nearest-first view is read-only")


def _files_by_store(view: NearestFirst | None, served: str) -> dict[str, int]:
    """Files per store key of a restore: the view's counts when it served it, else one store."""
    if view is not None and served in view.served:
        return dict(view.served)
    return {served: 1}


def _quietly_exists(store: Store, relative: str) -> bool:
    try:
        return store.exists(relative)
    except OSError:
        return False


@dataclass(frozen=True)
class RestoreRecord:
    """One restore: what was loaded, which store served it, from where, and how long it took."""

    time_unix_s: float
    checkpoint_id: str
    step: int
    served_by: str  # "local", a replica's key, or "primary"
    url: str
    provider: str | None
    region: str | None
    own_replica: str | None  # the key of this instance's own region's replica (None: none named)
    from_own_region: bool
    seconds: float
    state_bytes: int
    rank: int = 0
    files_by_store: Mapping[str, int] = field(default_factory=dict)  # through NearestFirst

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RestoreRecord:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


def record_restore(primary_root: Store, record: RestoreRecord) -> None:
    """Write ``record`` at the primary store's root (module contract, 3); failures are logged."""
    name = f"{RECORD_PREFIX}{time.time_ns():020d}-r{record.rank:05d}-{secrets.token_hex(2)}.json"
    try:
        primary_root.write_atomic(name, json.dumps(record.to_dict(), sort_keys=True))
    except (OSError, CheckpointError) as exc:
        log.warning("restore record for %s not written: %s", record.checkpoint_id, exc)


def read_restore_records(
    url: str, storage_options: Mapping[str, Any] | None = None
) -> list[RestoreRecord]:
    """Every restore record under the checkpoint location ``url``, oldest first; unreadable ones
    are skipped with a log line, and a location that does not exist has none."""
    store = Store(url, storage_options)
    try:
        store.fs.invalidate_cache(store.root)
        names = [str(n) for n in store.fs.ls(store.root, detail=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[RestoreRecord] = []
    for name in sorted(n.rstrip("/").rsplit("/", 1)[-1] for n in names):
        if not (name.startswith(RECORD_PREFIX) and name.endswith(".json")):
            continue
        try:
            out.append(RestoreRecord.from_dict(json.loads(store.read(name))))
        except (OSError, ValueError, TypeError) as exc:
            log.warning("restore record %s in %s is unreadable: %s", name, url, exc)
    out.sort(key=lambda r: r.time_unix_s)
    return out


class _CopyAbandoned(Exception):
    """A copy to a replica was stopped before its manifest (internal: logged, never raised out)."""


def copy_checkpoint(
    source: Store, target: Store, manifest: Manifest, stop: threading.Event | None = None
) -> int:
    """Copy ``manifest``'s checkpoint from ``source`` to ``target``: data files, then the manifest.

    Returns the bytes copied. A checkpoint the target already holds (its
    manifest is there) is not copied again. ``stop`` set: raises
    an internal error at the next block, before the manifest is written."""
    if target.exists(manifest_path(manifest.checkpoint_id)):
        return 0
    copied = 0
    for entry in manifest.files:
        with source.open_read(entry.path) as reader, target.open_write(entry.path) as writer:
            while block := reader.read(COPY_BLOCK_BYTES):
                if stop is not None and stop.is_set():
                    raise _CopyAbandoned(
                        f"copy of {manifest.checkpoint_id} to {target.url} stopped"
                    )
                writer.write(block)
                copied += len(block)
    text = source.read(manifest_path(manifest.checkpoint_id)).decode("utf-8")
    target.write_atomic(manifest_path(manifest.checkpoint_id), text)  # the replica's commit
    return copied


@dataclass
class ReplicationStats:
    """What the replicator did so far (for tests, logs and benchmarks)."""

    copies: int = 0  # checkpoints committed on a replica
    bytes_copied: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (replica, id, why)
    seconds: float = 0.0


class Replicator:
    """Copies committed checkpoints from a primary store to its replicas on one background thread."""

    def __init__(
        self,
        primary: Store,
        replicas: Sequence[tuple[str, Store]],
        keep_chains: int,
        on_copied: Callable[[str, str], None] | None = None,
    ) -> None:
        self.primary = primary
        self.replicas = list(replicas)
        self.keep_chains = keep_chains
        self.stats = ReplicationStats()
        self._on_copied = on_copied
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(1, "spothop-ckpt-replicate")
        self._stop = threading.Event()
        self._pending: list[Future[None]] = []

    def submit(self, checkpoint_id: str) -> Future[None]:
        """Queue the copy of a checkpoint just committed in the primary to every replica."""
        future = self._executor.submit(self._replicate, checkpoint_id)
        with self._lock:
            self._pending = [f for f in self._pending if not f.done()] + [future]
        return future

    def wait(self, timeout: float | None = None) -> None:
        """Wait for every queued copy (failures are in ``stats.failures``, never raised)."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.exception(timeout)

    def close(self) -> None:
        self.wait()
        self._executor.shutdown(wait=True)

    def abandon(self) -> None:
        """Stop now: the copy in flight stops at its next block, queued ones are dropped."""
        self._stop.set()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _replicate(self, checkpoint_id: str) -> None:
        started = time.perf_counter()
        try:
            manifest = load_manifest(self.primary, checkpoint_id)
            chain = [*reversed(ancestors(self.primary, manifest)), manifest]  # oldest first
        except CheckpointError as exc:
            for key, _ in self.replicas:
                self._failed(key, checkpoint_id, f"cannot read it in the primary: {exc}")
            return
        for key, replica in self.replicas:
            try:
                for member in chain:
                    copied = copy_checkpoint(self.primary, replica, member, self._stop)
                    with self._lock:
                        self.stats.bytes_copied += copied
                        self.stats.copies += 1 if copied or not member.files else 0
                gc_mod.collect(
                    replica, self.keep_chains, protect=(checkpoint_id,), verify_bytes=False
                )
            except Exception as exc:  # one replica's failure must not stop the others
                self._failed(key, checkpoint_id, str(exc))
                continue
            if self._on_copied is not None:
                self._on_copied(key, checkpoint_id)
        with self._lock:
            self.stats.seconds += time.perf_counter() - started

    def _failed(self, key: str, checkpoint_id: str, why: str) -> None:
        log.warning("replicating %s to %s failed: %s", checkpoint_id, key, why)
        with self._lock:
            self.stats.failures.append((key, checkpoint_id, why))


class CheckpointReplicas:
    """What a :class:`~spothop.checkpoint.Checkpointer` does with replicas: one object, three hooks.

    - :meth:`stores`: the replicas' stores for this rank, nearest first (read before the primary);
    - :meth:`committed`: a checkpoint committed in the primary: queue its replication;
    - :meth:`restored`: a restore loaded a checkpoint: write its record (module contract, 3).

    ``record_restores`` False writes no records (a checkpointer used outside spothop, with no
    replicas, leaves its store as it was); None: write them when there are replicas.
    """

    def __init__(
        self,
        durable_url: str,
        per_rank: Callable[[str], str],
        *,
        rank: int = 0,
        replicas: Mapping[str, str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        keep_chains: int = 1,
        record_restores: bool | None = None,
    ) -> None:
        self.places = ReplicaSet.from_env(replicas)
        self.rank = rank
        self.primary_root = Store(durable_url, storage_options)
        self._primary = Store(per_rank(durable_url), storage_options)
        self._stores = [
            (k, Store(per_rank(url), storage_options)) for k, url in self.places.nearest()
        ]
        self._names = {store.url: key for key, store in self._stores}
        self._record = bool(self.places) if record_restores is None else record_restores
        self.replicator = (
            Replicator(self._primary, self._stores, keep_chains) if self._stores else None
        )
        self._view: NearestFirst | None = None

    def stores(self) -> list[Store]:
        """The stores a restore reads before the primary: the nearest-first view over every
        store (a fresh one: it counts what it serves), then each replica alone."""
        if not self._stores:
            return []
        self._view = NearestFirst([*self._stores, (PRIMARY, self._primary)])
        return [self._view, *(store for _, store in self._stores)]

    def committed(self, checkpoint_id: str) -> None:
        if self.replicator is None:
            return
        try:
            self.replicator.submit(checkpoint_id)
        except RuntimeError as exc:  # the interpreter is shutting down: the next save catches up
            log.warning("replication of %s not started: %s", checkpoint_id, exc)

    def resolve(self, restored: Restored) -> Restored:
        """``restored`` with the URL of the one store that served it through the nearest-first
        view (a restore served by several keeps the view's URL; its record lists them)."""
        view = self._view
        if view is None or restored.url != view.url:
            return restored
        single = view.single_url(restored.manifest.checkpoint_id)
        return restored if single is None else replace(restored, url=single)

    def served_by(self, url: str, local_url: str) -> str:
        """The key of the store that served a restore from ``url``; through the nearest-first
        view, the store that served most of its files."""
        if url == local_url:
            return LOCAL
        view = self._view
        if view is not None and url == view.url and view.served:
            return max(view.served, key=lambda k: (view.served[k], k == self.places.own))
        return self._names.get(url, PRIMARY)

    def restored(
        self, manifest: Manifest, url: str, local_url: str, seconds: float
    ) -> RestoreRecord:
        """The record of a restore that loaded ``manifest`` from ``url``; written when recording."""
        served = self.served_by(url, local_url)
        own = self.places.own
        record = RestoreRecord(
            time_unix_s=time.time(),
            checkpoint_id=manifest.checkpoint_id,
            step=manifest.step,
            served_by=served,
            url=url,
            provider=self.places.provider,
            region=self.places.region,
            own_replica=own,
            from_own_region=served == LOCAL or (own is not None and served == own),
            seconds=seconds,
            state_bytes=sum(leaf.raw_bytes for leaf in manifest.leaves.values()),
            rank=self.rank,
            files_by_store=_files_by_store(self._view, served),
        )
        log.info(
            "restore of %s (step %d) served by %s in %.3f s",
            record.checkpoint_id,
            record.step,
            served,
            seconds,
        )
        if self._record:
            record_restore(self.primary_root, record)
        return record

    def wait(self) -> None:
        """Wait for the copies in flight, except when the worker was told to stop (contract 1)."""
        if self.replicator is None:
            return
        if sdk.stop_requested():
            self.replicator.abandon()
        else:
            self.replicator.wait()

    def close(self) -> None:
        if self.replicator is None:
            return
        if sdk.stop_requested():
            log.info("stop requested: copies to the replicas left to the next instance's saves")
            self.replicator.abandon()
        else:
            self.replicator.close()
