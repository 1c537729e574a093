"""Restore with fallback: the newest checkpoint that verifies and validates wins.

Candidates from every store are tried newest first (by step, then wall
time; at equal step a local snapshot beats a durable copy because it is
faster to read). A candidate is skipped, with a logged reason, when a file
fails its checksum or size, a delta's parent is gone, its manifest is from a
newer format, it was written under another world size, (with several
ranks) not every rank committed its step, or the validation hook rejects
it. Skipping never deletes or changes anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spothop.checkpoint import tree
from spothop.checkpoint.errors import CheckpointError, NoValidCheckpoint, ValidationFailed
from spothop.checkpoint.manifest import LeafEntry, Manifest, Tier, WorldLayout
from spothop.checkpoint.reader import ancestors, committed, read_leaves
from spothop.checkpoint.rng import restore_rng
from spothop.checkpoint.store import Store

log = logging.getLogger("spothop.checkpoint")


@dataclass(frozen=True)
class Restored:
    """A verified checkpoint: its manifest, the rebuilt state, and the store it came from."""

    manifest: Manifest
    state: Any
    url: str

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
        return _array(manifest.leaves[key], buffers[key])

    return Restored(manifest, tree.unflatten(manifest.tree, leaf), store.url)


def _array(entry: LeafEntry, buffer: bytearray) -> Any:
    if entry.kind == "torch":
        from spothop.checkpoint import _torch_arrays

        return _torch_arrays.from_bytes(buffer, entry.dtype, entry.shape)
    return np.frombuffer(buffer, dtype=np.dtype(entry.dtype)).reshape(entry.shape)


def restore_newest(stores: Sequence[Store], world: WorldLayout, validate: Validator | None,
                   apply_rng: bool, steps: frozenset[int] | None = None,
                   max_step: int | None = None) -> Restored | None:
    """The newest candidate that loads, verifies and validates; ``steps`` (when given) limits the
    candidates to those steps (the ones every rank has committed), ``max_step`` to steps at most it."""
    candidates: list[tuple[Manifest, Store]] = []
    reasons: list[tuple[str, str]] = []
    for store in stores:
        found, damaged = committed(store)
        candidates += [(m, store) for m in found]
        reasons += damaged
    if not candidates and not reasons:
        return None
    candidates.sort(key=lambda c: (c[0].step, c[0].wall_time_unix_s, c[0].tier is Tier.LOCAL), reverse=True)
    for manifest, store in candidates:
        why = _try(manifest, store, world, validate, steps, max_step)
        if isinstance(why, Restored):
            if apply_rng:
                restore_rng(dict(manifest.rng))
            log.info("restored checkpoint %s (step %d) from %s", manifest.checkpoint_id, manifest.step, store.url)
            return why
        log.warning("skipping checkpoint %s in %s: %s", manifest.checkpoint_id, store.url, why)
        reasons.append((manifest.checkpoint_id, why))
    raise NoValidCheckpoint(", ".join(s.url for s in stores), reasons)


def _try(manifest: Manifest, store: Store, world: WorldLayout, validate: Validator | None,
         steps: frozenset[int] | None, max_step: int | None) -> Restored | str:
    if manifest.world.world_size != world.world_size:
        return f"written by {manifest.world.world_size} ranks, this run has {world.world_size}"
    if steps is not None and manifest.step not in steps:
        return f"step {manifest.step} was not committed by every one of the {world.world_size} ranks"
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
