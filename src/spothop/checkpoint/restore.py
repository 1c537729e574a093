"""Restore with fallback: the newest checkpoint that verifies and validates wins.

Candidates from every store are tried newest first (by step, then wall
time; at equal step a local snapshot beats a durable copy because it is
faster to read). A candidate is skipped, with a logged reason, when a file
fails its checksum or size, a delta's parent is gone, its manifest is from a
newer format, (with several ranks) not every rank committed its step, or
the validation hook rejects it. Skipping never deletes or changes anything.
A checkpoint written under another world size is restored re-sharded
(:mod:`spothop.checkpoint.reshard`, which builds on these functions) or, when
re-sharding is off, skipped.

Several ranks restore the same step: only steps every rank has committed are
candidates (:func:`steps_every_rank_committed`), and with a collective minimum
:func:`restore_agreed` settles the step every rank can actually load.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spothop.checkpoint import tree
from spothop.checkpoint.errors import CheckpointError, NoValidCheckpoint, ValidationFailed
from spothop.checkpoint.manifest import LeafEntry, Manifest, Tier, WorldLayout
from spothop.checkpoint.reader import LeafBytes, ancestors, committed, read_leaves
from spothop.checkpoint.rng import restore_rng
from spothop.checkpoint.store import Store

log = logging.getLogger("spothop.checkpoint")


@dataclass(frozen=True)
class Resharded:
    """How a restored state was re-sharded from another world (:mod:`spothop.checkpoint.reshard`)."""

    from_world_size: int
    to_world_size: int
    rank: int
    rng_seed: int  # what this rank's generators were seeded with (the saved states do not apply)
    sharded: tuple[str, ...]  # the leaves concatenated and re-split; the rest are replicated


@dataclass(frozen=True)
class Restored:
    """A verified checkpoint: its manifest, the rebuilt state, and the store it came from.

    After re-sharding, ``manifest`` is old rank 0's and ``resharded`` says from which world."""

    manifest: Manifest
    state: Any
    url: str
    resharded: Resharded | None = None

    @property
    def step(self) -> int:
        return self.manifest.step


Validator = Callable[[Restored], bool]
"""Returns False (or raises :class:`ValidationFailed`) to reject a restored checkpoint."""


def load(store: Store, manifest: Manifest) -> Restored:
    """Verify ``manifest``'s whole chain and rebuild its state; raises :class:`CheckpointError`."""
    chain = ancestors(store, manifest)
    buffers = read_leaves(store, manifest, chain)

    def leaf(key: str) -> Any:
        return leaf_array(manifest.leaves[key], buffers[key])

    return Restored(manifest, tree.unflatten(manifest.tree, leaf), store.url)


def leaf_array(entry: LeafEntry, buffer: LeafBytes) -> Any:
    """The array (torch tensor or NumPy array) that ``entry``'s verified bytes make (sharing them)."""
    if entry.kind == "torch":
        from spothop.checkpoint import _torch_arrays

        return _torch_arrays.from_bytes(buffer, entry.dtype, entry.shape)
    return buffer.view(np.dtype(entry.dtype)).reshape(entry.shape)


def restore_newest(
    stores: Sequence[Store],
    world: WorldLayout,
    validate: Validator | None,
    apply_rng: bool,
    steps: frozenset[int] | None = None,
    max_step: int | None = None,
    *,
    min_step: int | None = None,
    other_worlds: bool = True,
) -> Restored | None:
    """The newest candidate that loads, verifies and validates; ``steps`` (when given) limits the
    candidates to those steps (the ones every rank has committed), ``max_step`` to steps at most it,
    ``min_step`` to steps at least it. Checkpoints of another world size are skipped with a reason,
    or (``other_worlds=False``: re-sharding looks at them) left out without one."""
    candidates: list[tuple[Manifest, Store]] = []
    reasons: list[tuple[str, str]] = []
    for store in stores:
        found, damaged = committed(store)
        candidates += [
            (m, store)
            for m in found
            if (min_step is None or m.step >= min_step)
            and (other_worlds or m.world.world_size == world.world_size)
        ]
        reasons += damaged
    if not candidates and not reasons:
        return None
    candidates.sort(
        key=lambda c: (c[0].step, c[0].wall_time_unix_s, c[0].tier is Tier.LOCAL), reverse=True
    )
    for manifest, store in candidates:
        why = _try(manifest, store, world, validate, steps, max_step)
        if isinstance(why, Restored):
            if apply_rng:
                restore_rng(dict(manifest.rng))
            log.info(
                "restored checkpoint %s (step %d) from %s",
                manifest.checkpoint_id,
                manifest.step,
                store.url,
            )
            return why
        log.warning("skipping checkpoint %s in %s: %s", manifest.checkpoint_id, store.url, why)
        reasons.append((manifest.checkpoint_id, why))
    raise NoValidCheckpoint(", ".join(s.url for s in stores), reasons)


def _try(
    manifest: Manifest,
    store: Store,
    world: WorldLayout,
    validate: Validator | None,
    steps: frozenset[int] | None,
    max_step: int | None,
) -> Restored | str:
    if manifest.world.world_size != world.world_size:
        return f"written by {manifest.world.world_size} ranks, this run has {world.world_size}"
    if steps is not None and manifest.step not in steps:
        return (
            f"step {manifest.step} was not committed by every one of the {world.world_size} ranks"
        )
    if max_step is not None and manifest.step > max_step:
        return f"another rank can only go back to step {max_step}"
    try:
        restored = load(store, manifest)
    except CheckpointError as exc:
        return getattr(exc, "reason", str(exc))
    if validate is None:
        return restored
    try:
        accepted = validate(restored)
    except ValidationFailed as exc:
        return f"validation failed: {exc}"
    return restored if accepted else "validation hook rejected it"


def steps_every_rank_committed(
    durable_url: str,
    local_url: str,
    world: WorldLayout,
    storage_options: Mapping[str, Any] | None = None,
) -> frozenset[int]:
    """Steps each rank has committed where this process can see it: in the durable store
    (``DURABLE_URL/rank-NNNNN``), or in a local snapshot folder on this machine (ranks of other
    machines keep theirs out of sight). Only these steps are candidates for a multi-rank restore."""
    steps: frozenset[int] | None = None
    for rank in range(world.world_size):
        folder = f"rank-{rank:05d}"
        peers = (
            Store(f"{durable_url.rstrip('/')}/{folder}", storage_options),
            Store(f"{local_url.rstrip('/')}/{folder}"),
        )
        found = frozenset(
            m.step
            for peer in peers
            for m in committed(peer)[0]
            if m.world.world_size == world.world_size
        )
        steps = found if steps is None else steps & found
    return steps or frozenset()


_NOTHING, _NOTHING_VALID = (
    -1,
    -2,
)  # what a rank proposes when it has no checkpoint / none that loads


def restore_agreed(
    newest: Callable[[int | None], Restored | None],
    agree: Callable[[int], int],
    url: str,
) -> Restored | None:
    """Every rank proposes the newest step it can load (``newest(max_step)``, which raises
    :class:`NoValidCheckpoint` when checkpoints exist but none loads); all go to the smallest
    proposal, and again while some rank cannot load that one. Each round is two collectives on
    every rank, so all ranks run the same number of rounds; the step only goes down, so the
    rounds end."""
    ceiling: int | None = None
    while True:
        failure: NoValidCheckpoint | None = None
        try:
            restored = newest(ceiling)
        except NoValidCheckpoint as exc:
            restored, failure = None, exc
        mine = (
            restored.step
            if restored is not None
            else _NOTHING_VALID
            if failure is not None
            else _NOTHING
        )
        agreed = agree(mine)
        if agreed < 0:  # some rank has nothing it can load: every rank takes this branch alike
            if agreed == _NOTHING and -agree(-mine) == _NOTHING:
                return None  # no rank has any checkpoint: all start afresh
            raise failure or NoValidCheckpoint(
                url, [("rank", "another rank has no checkpoint it can load")]
            )
        if agree(1 if mine == agreed else 0) == 1:
            return restored
        ceiling = agreed
