"""Garbage collection: keep the newest K delta chains, delete the rest.

A chain is a full checkpoint and every delta built on it. Deleting a chain
removes each member's manifest first (the un-commit), then its files, and
deltas before their parents, so a reader never finds a delta whose parent
vanished under it. Folders without a manifest (saves that never committed)
are removed only when they are older than every chain kept: a younger one
may be a save still in flight in another process.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

from spothop.checkpoint.errors import CheckpointConfigError
from spothop.checkpoint.manifest import Manifest
from spothop.checkpoint.reader import committed, manifest_path
from spothop.checkpoint.store import Store

log = logging.getLogger("spothop.checkpoint")


@dataclass(frozen=True)
class GcPlan:
    kept: list[str]
    deleted: list[str]  # committed checkpoints removed, deltas before parents
    partial_deleted: list[str]


def checkpoint_id(step: int, tier: str, nonce: str) -> str:
    return f"step-{step:012d}-{tier}-{nonce}"


def step_of(name: str) -> int | None:
    """The step a checkpoint folder name carries, or None for a folder that is not one."""
    parts = name.split("-")
    return int(parts[1]) if len(parts) >= 2 and parts[0] == "step" and parts[1].isdigit() else None


def chain_roots(manifests: list[Manifest]) -> dict[str, str]:
    """Each checkpoint's chain root: its oldest ancestor present (or the missing parent's id)."""
    by_id = {m.checkpoint_id: m for m in manifests}
    roots: dict[str, str] = {}
    for m in manifests:
        current, hops = m, 0
        while current.parent is not None and current.parent in by_id and hops < len(by_id):
            current, hops = by_id[current.parent], hops + 1
        roots[m.checkpoint_id] = current.parent or current.checkpoint_id
    return roots


def collect(store: Store, keep_chains: int, *, dry_run: bool = False, protect: Collection[str] = ()) -> GcPlan:
    """Delete all but the newest ``keep_chains`` chains under ``store``; returns what went."""
    if keep_chains < 1:
        raise CheckpointConfigError(f"--keep must be at least 1 (keeping no checkpoint is never safe); got {keep_chains}")
    manifests, _ = committed(store)
    roots = chain_roots(manifests)
    newest: dict[str, tuple[int, float]] = {}
    for m in manifests:
        root = roots[m.checkpoint_id]
        newest[root] = max(newest.get(root, (m.step, m.wall_time_unix_s)), (m.step, m.wall_time_unix_s))
    kept_roots = set(sorted(newest, key=lambda r: newest[r], reverse=True)[:keep_chains])
    doomed = sorted((m for m in manifests if roots[m.checkpoint_id] not in kept_roots),
                    key=lambda m: (m.step, m.wall_time_unix_s), reverse=True)
    kept = [m for m in manifests if roots[m.checkpoint_id] in kept_roots]
    oldest_kept = min((m.step for m in kept), default=None)
    names = {m.checkpoint_id for m in manifests}
    partial = [n for n in store.list_dirs() if n not in names and n not in protect
               and (s := step_of(n)) is not None and oldest_kept is not None and s < oldest_kept]
    if not dry_run:
        for m in doomed:
            store.remove(manifest_path(m.checkpoint_id))
            store.remove(m.checkpoint_id)
            log.info("gc: deleted checkpoint %s (step %d) in %s", m.checkpoint_id, m.step, store.url)
        for name in partial:
            store.remove(name)
            log.info("gc: deleted uncommitted folder %s in %s", name, store.url)
    return GcPlan([m.checkpoint_id for m in kept], [m.checkpoint_id for m in doomed], partial)
