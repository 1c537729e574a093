"""What the ``spothop ckpt`` commands see: listing, describing and verifying a checkpoint location."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from spothop.checkpoint.errors import CheckpointCorrupt, CheckpointError
from spothop.checkpoint.gc import step_of
from spothop.checkpoint.manifest import Manifest
from spothop.checkpoint.reader import ancestors, committed, verify
from spothop.checkpoint.store import Store
from spothop.errors import NotFoundError


def existing_store(url: str, storage_options: Mapping[str, Any] | None = None) -> Store:
    """The checkpoint location at ``url``; :class:`NotFoundError` if nothing is there.

    For the commands that inspect a location: a mistyped path must not look like an empty,
    healthy one. A local folder must exist; on an object store, where a prefix exists only while
    objects are under it, the bucket must. (A checkpointer, which creates its location, opens
    :class:`Store` directly.)"""
    store = Store(url, storage_options)
    where = store.root if store.is_local else store.root.split("/", 1)[0]
    try:
        present = bool(store.fs.exists(store.root)) or (
            not store.is_local and bool(store.fs.exists(where))
        )
    except OSError as exc:
        raise NotFoundError(f"checkpoint location {url} cannot be reached ({exc})") from None
    if not present:
        what = (
            "does not exist" if store.is_local else f"is in a bucket that does not exist ({where})"
        )
        raise NotFoundError(
            f"checkpoint location {url} {what}; give the folder or URL the job "
            "checkpoints to (SPOTHOP_CHECKPOINT_URL)"
        )
    return store


@dataclass(frozen=True)
class CheckpointInfo:
    """One folder under a checkpoint location: committed, damaged, or never committed."""

    checkpoint_id: str
    status: str  # "committed", "damaged" or "uncommitted"
    step: int | None
    tier: str | None = None
    parent: str | None = None
    wall_time_unix_s: float | None = None
    size_bytes: int | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready."""
        return asdict(self)


@dataclass(frozen=True)
class LeafInfo:
    """One array of a checkpoint's state: its place in the tree, type, and where its bytes are."""

    path: str
    kind: str
    dtype: str
    shape: tuple[int, ...]
    raw_bytes: int
    chunks: int
    chunks_from_parents: int  # stored by an ancestor (a delta's unchanged chunks)


@dataclass(frozen=True)
class CheckpointDetail:
    """Everything a manifest says about one checkpoint, for people and scripts."""

    checkpoint_id: str
    step: int
    tier: str
    wall_time_unix_s: float
    format_version: int
    chain: list[str]  # its ancestors, nearest first (empty for a full checkpoint)
    size_bytes: int  # what it wrote itself
    state_bytes: int  # what it restores to
    world: dict[str, int]
    data_position: dict[str, Any]
    user_metadata: dict[str, Any]
    rng: list[str]  # the generators whose states it holds
    leaves: list[LeafInfo]

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready."""
        return asdict(self)


def describe_checkpoint(
    url: str, checkpoint_id: str | None = None, storage_options: Mapping[str, Any] | None = None
) -> CheckpointDetail:
    """The manifest of ``checkpoint_id`` (default: the newest committed checkpoint), in plain fields.

    Raises :class:`NotFoundError` when there is no such checkpoint, :class:`CheckpointCorrupt`
    when its manifest is damaged. Reads manifests only: use :func:`verify_checkpoints` to check
    the data."""
    store = existing_store(url, storage_options)
    found, damaged = committed(store)
    chosen = [m for m in found if checkpoint_id in (None, m.checkpoint_id)]
    if not chosen:
        why = dict(damaged).get(checkpoint_id or "")
        if why:
            raise CheckpointCorrupt(checkpoint_id or url, why)
        raise NotFoundError(
            f"no committed checkpoint {'here' if checkpoint_id is None else repr(checkpoint_id)} "
            f"under {url} (`spothop ckpt ls {url}` lists them)"
        )
    manifest = chosen[-1]
    try:
        chain = [m.checkpoint_id for m in ancestors(store, manifest)]
    except CheckpointError as exc:
        chain = [f"(broken: {getattr(exc, 'reason', exc)})"]
    return _detail(manifest, chain)


def _detail(manifest: Manifest, chain: list[str]) -> CheckpointDetail:
    own = {f.path for f in manifest.files}
    leaves = [
        LeafInfo(
            path,
            leaf.kind,
            leaf.dtype,
            tuple(leaf.shape),
            leaf.raw_bytes,
            len(leaf.chunks),
            sum(1 for c in leaf.chunks if c.file not in own),
        )
        for path, leaf in manifest.leaves.items()
    ]
    world = manifest.world
    return CheckpointDetail(
        manifest.checkpoint_id,
        manifest.step,
        manifest.tier.value,
        manifest.wall_time_unix_s,
        manifest.format_version,
        chain,
        manifest.size_bytes,
        sum(leaf.raw_bytes for leaf in leaves),
        {
            "world_size": world.world_size,
            "rank": world.rank,
            "local_world_size": world.local_world_size,
        },
        dict(manifest.data_position),
        dict(manifest.user_metadata),
        sorted(manifest.rng),
        leaves,
    )


@dataclass(frozen=True)
class VerifyResult:
    checkpoint_id: str
    step: int
    tier: str
    ok: bool
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready."""
        return asdict(self)


@dataclass(frozen=True)
class WorldStep:
    """One step as the ranks of one world size committed it (``spothop ckpt worlds``)."""

    world_size: int
    step: int
    ranks: list[int]  # the ranks that committed it
    complete: bool  # every rank did: restorable, into this world size or re-sharded into another
    tiers: list[str]
    sharded: list[str]  # the leaves its manifests mark sharded

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready."""
        return asdict(self)


def list_worlds(url: str, storage_options: Mapping[str, Any] | None = None) -> list[WorldStep]:
    """Every step committed under ``url`` by any world size (``URL`` itself for a world of one,
    ``URL/rank-NNNNN`` for the ranks of a larger one), oldest first; see
    :mod:`spothop.checkpoint.reshard`."""
    from spothop.checkpoint.reshard import committed_by_world

    existing_store(url, storage_options)
    steps = []
    for (size, step), by_rank in committed_by_world([(url, storage_options)]).items():
        manifests = [m for parts in by_rank.values() for m, _ in parts]
        steps.append(
            WorldStep(
                size,
                step,
                sorted(by_rank),
                len(by_rank) == size,
                sorted({m.tier.value for m in manifests}),
                sorted({key for m in manifests for key in m.sharding}),
            )
        )
    return sorted(steps, key=lambda w: (w.step, w.world_size))


def list_checkpoints(
    url: str, storage_options: Mapping[str, Any] | None = None
) -> list[CheckpointInfo]:
    """Every folder under ``url``, oldest step first, with whether it is a checkpoint."""
    store = existing_store(url, storage_options)
    found, damaged = committed(store)
    infos = [
        CheckpointInfo(
            m.checkpoint_id,
            "committed",
            m.step,
            m.tier.value,
            m.parent,
            m.wall_time_unix_s,
            m.size_bytes,
        )
        for m in found
    ]
    infos += [CheckpointInfo(name, "damaged", step_of(name), reason=why) for name, why in damaged]
    known = {i.checkpoint_id for i in infos}
    infos += [
        CheckpointInfo(
            name, "uncommitted", step_of(name), reason="no manifest: the save never finished"
        )
        for name in store.list_dirs()
        if name not in known and step_of(name) is not None
    ]
    return sorted(
        infos, key=lambda i: (i.step if i.step is not None else -1, i.wall_time_unix_s or 0.0)
    )


def verify_checkpoints(
    url: str, checkpoint_id: str | None = None, storage_options: Mapping[str, Any] | None = None
) -> list[VerifyResult]:
    """Check every byte of each committed checkpoint (or just ``checkpoint_id``) and its chain."""
    store = existing_store(url, storage_options)
    found, damaged = committed(store)
    results = [
        VerifyResult(name, step_of(name) or 0, "?", False, why)
        for name, why in damaged
        if checkpoint_id in (None, name)
    ]
    for manifest in found:
        if checkpoint_id not in (None, manifest.checkpoint_id):
            continue
        try:
            verify(store, manifest)
            results.append(
                VerifyResult(manifest.checkpoint_id, manifest.step, manifest.tier.value, True, None)
            )
        except CheckpointError as exc:
            reason = getattr(exc, "reason", str(exc))
            results.append(
                VerifyResult(
                    manifest.checkpoint_id, manifest.step, manifest.tier.value, False, reason
                )
            )
    return sorted(results, key=lambda r: r.step)
