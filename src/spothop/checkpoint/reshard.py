"""Re-sharding: restore a checkpoint written by a world of W ranks into a world of W' ranks.

A re-formed job (fewer or more nodes, other GPUs per node) finds its newest
checkpoint written under another world size. :meth:`Checkpointer.restore`
then builds this rank's state from the old ranks' parts. The rules, in order
(``docs/checkpoint.md``, "Re-forming a job"):

1. **Candidates.** A step written by W ranks is a candidate when every one of
   its W ranks committed it (each in ``URL/rank-NNNNN``, or ``URL`` itself for
   a world of one; durable store, and local snapshots visible on this
   machine). The newest step wins whatever world wrote it; at equal steps one
   written by this world size is preferred (it restores bit for bit, with no
   re-sharding). Only manifests are read to decide.
2. **Replicated leaves** — every array leaf not marked sharded — must be the
   same bytes on every old rank: their chunk hashes are compared in the
   manifests (nothing extra is read). A leaf that differs is refused by name:
   it was not replicated, and must be marked. A new rank reads them from an
   old rank whose files it reads anyway for its rows (the lowest), else from
   old rank ``new rank mod W``; the manifest it reports is old rank 0's.
3. **Sharded leaves** (``Checkpointer.save(sharded={pattern: Shard(...)})``,
   recorded in each manifest) are the old ranks' slices concatenated in rank
   order along ``dim`` (padding past ``length`` dropped), then split for W'
   by the leaf's :class:`ShardRule`: ``even`` needs ``length % W' == 0``;
   ``balanced`` gives the first ``length % W'`` ranks one row more;
   ``padded`` gives every rank ``ceil(length / W')`` rows, zero-padded at the
   end. A length that ``even`` cannot split is refused naming the leaf, its
   length and W'. Only the old ranks whose rows this rank needs are read.
4. **Plain values and the data position** (the tree's numbers and strings,
   ``data_position``) must be equal on every old rank; they are taken as they
   are. :class:`~spothop.checkpoint.pytorch.DistributedResumableSampler`'s
   state (epoch, seed, samples consumed globally) is the same on every rank
   and means the same thing in any world, so the rest of the epoch is split
   among the new ranks with nothing skipped or repeated.
5. **RNG: derived, per new rank.** W random streams cannot become W' streams
   exactly, so each new rank seeds Python's, NumPy's and torch's generators
   from ``sha256(old rank 0's checkpoint id, W, W', new rank)``: distinct per
   rank, and the same each time this re-form is restored (a re-formed run is
   reproducible; it is not bit-identical to the uninterrupted run).

Every refusal raises :class:`ReshardError` on every rank alike (the decision
depends only on manifests every rank reads), so no rank is left waiting in a
collective. A part that fails to verify is a skipped candidate, as in
:mod:`spothop.checkpoint.restore`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import random
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from spothop.checkpoint import tree
from spothop.checkpoint.errors import (
    CheckpointConfigError,
    CheckpointError,
    NoValidCheckpoint,
    ReshardError,
)
from spothop.checkpoint.manifest import LeafEntry, Manifest, Shard, ShardRule, WorldLayout
from spothop.checkpoint.reader import ancestors, committed, read_leaves
from spothop.checkpoint.restore import (
    Resharded,
    Restored,
    Validator,
    leaf_array,
    restore_newest,
)
from spothop.checkpoint.rng import restore_rng
from spothop.checkpoint.store import Store

log = logging.getLogger("spothop.checkpoint")
RANK_FOLDER = re.compile(r"rank-(\d{5})")
RNG_DOMAIN = "spothop-reshard-rng-v1"


def rank_folder(rank: int) -> str:
    """The folder under a checkpoint URL that rank ``rank`` of a multi-rank world writes."""
    return f"rank-{rank:05d}"


def resolve_sharding(
    patterns: Mapping[str, Shard] | None, leaf_keys: Sequence[str]
) -> dict[str, Shard]:
    """Leaf path → its :class:`Shard`, from ``fnmatch`` patterns over the state's leaf paths
    (``"optimizer/state/*/momentum_buffer"``; the leading ``/`` of a path may be left out); a
    pattern that matches no leaf is a mistake."""
    found: dict[str, Shard] = {}
    for pattern, shard in (patterns or {}).items():
        if not isinstance(shard, Shard):
            raise CheckpointConfigError(
                f"sharded[{pattern!r}] must be a spothop.checkpoint.Shard, got {type(shard).__name__}"
            )
        if shard.rule is ShardRule.PADDED and shard.length is None:
            raise CheckpointConfigError(
                f"sharded[{pattern!r}] uses the padded rule, which needs the true length: "
                "Shard(rule='padded', length=N)"
            )
        rooted = pattern if pattern.startswith("/") else f"/{pattern}"  # leaf paths start at /
        matched = [key for key in leaf_keys if fnmatch.fnmatchcase(key, rooted)]
        if not matched:
            raise CheckpointConfigError(
                f"sharded pattern {pattern!r} matches no array of the state; its arrays are "
                f"{', '.join(sorted(leaf_keys)[:8])}{' …' if len(leaf_keys) > 8 else ''}"
            )
        found.update(dict.fromkeys(matched, shard))
    return found


# -- candidates ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One step committed by every rank of another world: each old rank's parts, best first."""

    step: int
    world_size: int
    parts: tuple[tuple[tuple[Manifest, Store], ...], ...]  # [old rank] -> (manifest, store), ...

    @property
    def wall_time_unix_s(self) -> float:
        return max(m.wall_time_unix_s for options in self.parts for m, _ in options)


def candidates(
    durable_url: str,
    local_url: str,
    world: WorldLayout,
    storage_options: Mapping[str, Any] | None = None,
    max_step: int | None = None,
) -> list[Candidate]:
    """Steps that every rank of some other world size committed, newest first (rule 1)."""
    found = committed_by_world(((local_url, None), (durable_url, storage_options)))
    complete = [
        Candidate(step, size, tuple(tuple(by_rank[r]) for r in range(size)))
        for (size, step), by_rank in found.items()
        if len(by_rank) == size
        and size != world.world_size
        and (max_step is None or step <= max_step)
    ]
    complete.sort(key=lambda c: (c.step, c.wall_time_unix_s), reverse=True)
    return complete


def committed_by_world(
    roots: Sequence[tuple[str, Mapping[str, Any] | None]],
) -> dict[tuple[int, int], dict[int, list[tuple[Manifest, Store]]]]:
    """``(world size, step) → rank → [(manifest, store), …]`` for every checkpoint committed under
    the ``(url, storage_options)`` roots, in root order: each in its world's own folder (``URL``
    for a world of one, ``URL/rank-NNNNN`` for rank N of a larger one)."""
    found: dict[tuple[int, int], dict[int, list[tuple[Manifest, Store]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for url, options in roots:
        for rank, store in _rank_stores(url, options):
            for manifest in committed(store)[0]:
                size = manifest.world.world_size
                # A world of one writes the URL itself; rank k of a larger world writes rank-k.
                if (size == 1) != (rank is None) or manifest.world.rank != (rank or 0):
                    continue
                found[size, manifest.step][manifest.world.rank].append((manifest, store))
    return found


def _rank_stores(
    url: str, storage_options: Mapping[str, Any] | None
) -> list[tuple[int | None, Store]]:
    """The world-of-one store (rank None) and every ``rank-NNNNN`` folder under ``url``."""
    root = Store(url, storage_options)
    stores: list[tuple[int | None, Store]] = [(None, root)]
    for name in root.list_dirs():
        if match := RANK_FOLDER.fullmatch(name):
            stores.append((int(match[1]), Store(f"{url.rstrip('/')}/{name}", storage_options)))
    return stores


# -- the plan: what this rank takes from each old rank --------------------------------------


@dataclass(frozen=True)
class _Slice:
    """Rows [start, stop) of old rank ``rank``'s slice of a leaf go to [at, at + stop - start) of ours."""

    rank: int
    start: int
    stop: int
    at: int


@dataclass(frozen=True)
class _LeafPlan:
    key: str
    shard: Shard
    rows: int  # this rank's rows, padding included
    slices: tuple[_Slice, ...]


def new_range(shard: Shard, length: int, world_size: int, rank: int, key: str) -> tuple[int, int]:
    """Rows [start, stop) of the whole leaf that ``rank`` of ``world_size`` holds (stop may pass
    ``length`` under the padded rule: those rows are zeros)."""
    if shard.rule is ShardRule.EVEN:
        if length % world_size:
            raise ReshardError(
                f"sharded leaf {key!r} has {length} rows along dim {shard.dim}, which do not split "
                f"evenly into {world_size} ranks ({length} % {world_size} = {length % world_size}) "
                "and its rule 'even' has no padding; save it with Shard(rule='padded', length=N) "
                "or 'balanced', or re-form to a world size that divides it"
            )
        rows = length // world_size
        return rank * rows, (rank + 1) * rows
    if shard.rule is ShardRule.BALANCED:
        base, extra = divmod(length, world_size)
        start = rank * base + min(rank, extra)
        return start, start + base + (1 if rank < extra else 0)
    rows = -(-length // world_size)
    return rank * rows, (rank + 1) * rows


def _plan(manifests: Sequence[Manifest], world: WorldLayout) -> list[_LeafPlan]:
    """Check the old ranks' manifests against each other (rules 2–4) and plan the sharded leaves."""
    first = manifests[0]
    sharding = dict(first.sharding)
    for rank, m in enumerate(manifests[1:], start=1):
        if dict(m.sharding) != sharding or set(m.leaves) != set(first.leaves):
            raise ReshardError(
                f"old ranks 0 and {rank} of step {first.step} hold different leaves or shard "
                "them differently; every rank must save the same structure"
            )
        _same_plain_values(first.tree, m.tree, rank, "")
        if dict(m.data_position) != dict(first.data_position):
            raise ReshardError(
                f"old ranks 0 and {rank} of step {first.step} were at different data positions "
                f"({dict(first.data_position)} vs {dict(m.data_position)}); save the data position "
                "of a DistributedResumableSampler, which every rank shares"
            )
    for key, leaf in first.leaves.items():
        if key not in sharding:
            for rank, m in enumerate(manifests[1:], start=1):
                if not _same_bytes(leaf, m.leaves[key]):
                    raise ReshardError(
                        f"leaf {key!r} differs between old ranks 0 and {rank} (shape "
                        f"{list(leaf.shape)} vs {list(m.leaves[key].shape)}), so it is not "
                        "replicated; mark it sharded when saving (sharded={...: Shard(dim=...)}) "
                        "or restore with the world size that wrote it"
                    )
    return [_plan_leaf(key, shard, manifests, world) for key, shard in sorted(sharding.items())]


def _same_bytes(a: LeafEntry, b: LeafEntry) -> bool:
    return (a.kind, a.dtype, a.shape) == (b.kind, b.dtype, b.shape) and [
        c.sha256 for c in a.chunks
    ] == [c.sha256 for c in b.chunks]


def _same_plain_values(a: Any, b: Any, rank: int, path: str) -> None:
    if isinstance(a, dict) and isinstance(b, dict) and set(a) == set(b):
        for k in a:
            _same_plain_values(a[k], b[k], rank, f"{path}/{k}")
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_plain_values(x, y, rank, f"{path}/{i}")
        return
    if a != b:
        raise ReshardError(
            f"state value at {path or '/'!r} differs between old ranks 0 and {rank} "
            f"({a!r} vs {b!r}); a value that differs per rank must be an array marked sharded"
        )


def _plan_leaf(
    key: str, shard: Shard, manifests: Sequence[Manifest], world: WorldLayout
) -> _LeafPlan:
    entries = [m.leaves[key] for m in manifests]
    first = entries[0]
    if not 0 <= shard.dim < len(first.shape):
        raise ReshardError(
            f"sharded leaf {key!r} has shape {list(first.shape)}, which has no dim {shard.dim}"
        )
    other = [s for d, s in enumerate(first.shape) if d != shard.dim]
    for rank, entry in enumerate(entries):
        mine = [s for d, s in enumerate(entry.shape) if d != shard.dim]
        if (entry.kind, entry.dtype, mine) != (first.kind, first.dtype, other):
            raise ReshardError(
                f"sharded leaf {key!r}: old rank {rank} holds {entry.dtype}{list(entry.shape)}, "
                f"rank 0 {first.dtype}{list(first.shape)}; slices must differ only along dim {shard.dim}"
            )
    stored = [e.shape[shard.dim] for e in entries]
    length = sum(stored) if shard.length is None else shard.length
    if length > sum(stored):
        raise ReshardError(
            f"sharded leaf {key!r} claims {length} rows but its {len(entries)} slices hold "
            f"{sum(stored)} ({stored})"
        )
    start, stop = new_range(shard, length, world.world_size, world.rank, key)
    slices, offset = [], 0
    for rank, rows in enumerate(stored):
        lo, hi = max(start, offset), min(stop, offset + rows, length)
        if lo < hi:
            slices.append(_Slice(rank, lo - offset, hi - offset, lo - start))
        offset += rows
    return _LeafPlan(key, shard, stop - start, tuple(slices))


# -- loading ------------------------------------------------------------------------------


def load_candidate(candidate: Candidate, world: WorldLayout) -> Restored:
    """This rank's state from ``candidate`` (rules 2–5); raises :class:`ReshardError` for a refusal
    and :class:`CheckpointError` when a part it needs does not verify."""
    chosen = [options[0] for options in candidate.parts]
    plans = _plan([m for m, _ in chosen], world)
    needed: dict[int, set[str]] = defaultdict(set)
    sharded = {p.key for p in plans}
    for plan in plans:
        for piece in plan.slices:
            needed[piece.rank].add(plan.key)
    # The replicated leaves are the same bytes on every old rank (checked in _plan): read them
    # from one whose files this rank reads anyway (files are verified whole), else spread the
    # new ranks over the old ones.
    source = min(needed) if needed else world.rank % candidate.world_size
    needed[source] |= {k for k in chosen[source][0].leaves if k not in sharded}
    arrays: dict[int, dict[str, Any]] = {}
    for rank in sorted(needed):
        arrays[rank] = _read_part(candidate.parts[rank], needed[rank])
    built: dict[str, Any] = dict(arrays[source])
    for plan in plans:
        built[plan.key] = _assemble(plan, chosen[0][0].leaves[plan.key], arrays)
    first, store = chosen[0]
    state = tree.unflatten(first.tree, built.__getitem__)
    info = Resharded(
        from_world_size=candidate.world_size,
        to_world_size=world.world_size,
        rank=world.rank,
        rng_seed=derived_seed(first.checkpoint_id, candidate.world_size, world),
        sharded=tuple(sorted(sharded)),
    )
    log.info(
        "re-sharded checkpoint %s (step %d) from %d ranks to rank %d of %d",
        first.checkpoint_id,
        first.step,
        candidate.world_size,
        world.rank,
        world.world_size,
    )
    return Restored(first, state, store.url, info)


def _read_part(options: Sequence[tuple[Manifest, Store]], keys: set[str]) -> dict[str, Any]:
    """The arrays ``keys`` of one old rank, from the first of its parts that verifies."""
    reasons: list[tuple[str, str]] = []
    for manifest, store in options:
        subset = {k: v for k, v in manifest.leaves.items() if k in keys}
        try:
            raw = read_leaves(store, _with_leaves(manifest, subset), ancestors(store, manifest))
        except CheckpointError as exc:
            reasons.append((manifest.checkpoint_id, getattr(exc, "reason", str(exc))))
            continue
        return {k: leaf_array(subset[k], raw[k]) for k in subset}
    raise NoValidCheckpoint(", ".join(s.url for _, s in options), reasons)


def _with_leaves(manifest: Manifest, leaves: Mapping[str, LeafEntry]) -> Manifest:
    """``manifest`` cut down to ``leaves`` and the files holding their chunks, so that reading it
    reads (and verifies, whole) only those files."""
    referenced = {ref.file for leaf in leaves.values() for ref in leaf.chunks}
    files = tuple(f for f in manifest.files if f.path in referenced)
    return replace(manifest, leaves=dict(leaves), files=files)


def _assemble(plan: _LeafPlan, entry: LeafEntry, arrays: Mapping[int, Mapping[str, Any]]) -> Any:
    dim = plan.shard.dim
    shape = list(entry.shape)
    shape[dim] = plan.rows
    if entry.kind == "torch":
        import torch

        out = torch.zeros(shape, dtype=getattr(torch, entry.dtype))
        for piece in plan.slices:
            rows = piece.stop - piece.start
            source = arrays[piece.rank][plan.key].narrow(dim, piece.start, rows)
            out.narrow(dim, piece.at, rows).copy_(source)
        return out
    result = np.zeros(shape, dtype=np.dtype(entry.dtype))
    for piece in plan.slices:
        source = np.take(arrays[piece.rank][plan.key], range(piece.start, piece.stop), axis=dim)
        index = [slice(None)] * len(shape)
        index[dim] = slice(piece.at, piece.at + piece.stop - piece.start)
        result[tuple(index)] = source
    return result


# -- RNG (rule 5) ---------------------------------------------------------------------------


def derived_seed(checkpoint_id: str, old_world_size: int, world: WorldLayout) -> int:
    """The seed new rank ``world.rank`` draws from after re-forming: distinct per rank, reproducible."""
    text = f"{RNG_DOMAIN}|{checkpoint_id}|{old_world_size}|{world.world_size}|{world.rank}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def seed_rngs(seed: int) -> None:
    """Seed Python's, NumPy's and (when loaded) torch's generators, CUDA included, from ``seed``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


def put_back_rng(restored: Restored) -> None:
    """The RNG a restore leaves behind: the saved states, or the derived seed after re-sharding."""
    if restored.resharded is not None:
        seed_rngs(restored.resharded.rng_seed)
    else:
        restore_rng(dict(restored.manifest.rng))


# -- the search over both kinds of candidate ------------------------------------------------


def newest_any_world(
    stores: Sequence[Store],
    world: WorldLayout,
    validate: Validator | None,
    steps: frozenset[int] | None,
    find: Callable[[int | None], list[Candidate]],
) -> Callable[[int | None], Restored | None]:
    """A search ``newest(max_step)`` over this world's checkpoints and other worlds' (rule 1); it
    raises :class:`NoValidCheckpoint` when checkpoints exist but none restores, and
    :class:`ReshardError` when the newest one cannot be re-sharded."""

    def same(
        min_step: int | None, max_step: int | None, reasons: list[tuple[str, str]]
    ) -> Restored | None:
        try:
            return restore_newest(
                stores,
                world,
                validate,
                False,
                steps,
                max_step,
                min_step=min_step,
                other_worlds=False,
            )
        except NoValidCheckpoint as exc:
            reasons += exc.reasons
            return None

    def newest(max_step: int | None) -> Restored | None:
        reasons: list[tuple[str, str]] = []
        bound = max_step
        for candidate in find(max_step):
            found = same(candidate.step, bound, reasons)  # this world first, at equal steps too
            if found is not None:
                return found
            try:
                restored = load_candidate(candidate, world)
            except ReshardError:
                raise
            except CheckpointError as exc:
                reasons.append((f"step {candidate.step} of {candidate.world_size} ranks", str(exc)))
            else:
                if validate is None or _accepted(validate, restored, reasons):
                    return restored
            bound = candidate.step - 1
        found = same(None, bound, reasons)
        if found is not None:
            return found
        if reasons:
            raise NoValidCheckpoint(", ".join(s.url for s in stores), reasons)
        return None

    return newest


def _accepted(validate: Validator, restored: Restored, reasons: list[tuple[str, str]]) -> bool:
    from spothop.checkpoint.errors import ValidationFailed

    name = f"step {restored.step} re-sharded"
    try:
        if validate(restored):
            return True
    except ValidationFailed as exc:
        reasons.append((name, f"validation failed: {exc}"))
        return False
    reasons.append((name, "validation hook rejected it"))
    return False


__all__ = [
    "Candidate",
    "Shard",
    "ShardRule",
    "candidates",
    "derived_seed",
    "load_candidate",
    "new_range",
    "newest_any_world",
    "put_back_rng",
    "rank_folder",
    "resolve_sharding",
    "seed_rngs",
]
