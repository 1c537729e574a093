"""Garbage collection: keep the newest K chains that restore, delete older ones, never lose the last good one.

A chain is a full checkpoint and every delta built on it. The rules, in order
(``docs/checkpoint.md``):

1. **Rank by what restores.** Committed checkpoints are checked newest first
   (by step, then wall time): the whole chain each needs is verified — every
   byte against its sha256 (``verify_bytes``), or, for the clean-up after each
   save, that every manifest loads and every file is there at its size. The
   first checkpoint of a chain that passes is that chain's *newest restorable*
   one and makes the chain count; checking stops once ``keep`` chains count.
2. **A damaged chain does not count.** Checkpoints that failed are reported
   with their reasons (``damaged``) and are never deleted while they are
   newer than the last chain kept: someone may want to inspect or repair them
   (a truncated upload, a deleted manifest). So the newest restorable
   checkpoint is always kept, and while fewer than ``keep`` chains restore
   nothing committed is deleted.
3. **Delete only what is older than everything kept.** A chain goes only when
   every one of its checkpoints is older than the newest restorable
   checkpoint of the last chain kept. Deleting removes each member's manifest
   first (the un-commit), then its files, deltas before their parents, so a
   reader never finds a delta whose parent vanished under it.
4. **Uncommitted folders** (saves that never wrote a manifest, or whose
   manifest does not load) go only when they are older than every checkpoint
   kept: a younger one may be a save still in flight in another process.

:func:`plan_collection` decides and deletes nothing; :func:`collect` carries
out the plan it returns (or, with ``dry_run``, only returns it), so a dry run
shows exactly what a real run would do.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any

from spothop.checkpoint.errors import CheckpointConfigError, CheckpointError
from spothop.checkpoint.manifest import Manifest
from spothop.checkpoint.reader import check_files, committed, manifest_path, verify
from spothop.checkpoint.store import Store

log = logging.getLogger("spothop.checkpoint")


@dataclass(frozen=True)
class GcPlan:
    """What a collection keeps and deletes; ids newest first within each list."""

    kept: list[str]  # committed checkpoints left in place (damaged ones included)
    deleted: list[str]  # committed checkpoints removed, deltas before parents
    partial_deleted: list[str]  # folders without a (loadable) manifest, removed
    damaged: list[tuple[str, str]]  # (id, reason) for each checkpoint found not to restore
    newest_restorable: str | None  # the newest checkpoint that passed its check; always kept

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (``damaged`` as ``[id, reason]`` pairs)."""
        return asdict(self)


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


def _age(m: Manifest) -> tuple[int, float]:
    return (m.step, m.wall_time_unix_s)


def _problem(store: Store, manifest: Manifest, verify_bytes: bool) -> str | None:
    """Why ``manifest`` would not restore, or None when its check passes."""
    try:
        (verify if verify_bytes else check_files)(store, manifest)
    except CheckpointError as exc:
        return getattr(exc, "reason", str(exc))
    return None


def plan_collection(
    store: Store, keep_chains: int, *, protect: Collection[str] = (), verify_bytes: bool = True
) -> GcPlan:
    """Decide what a collection keeping ``keep_chains`` restorable chains would delete; deletes nothing.

    ``protect`` names folders never to delete (a save in flight). See the module docstring for the rules.
    """
    if keep_chains < 1:
        raise CheckpointConfigError(
            f"--keep must be at least 1 (keeping no checkpoint is never safe); got {keep_chains}"
        )
    manifests, unreadable = committed(store)
    roots = chain_roots(manifests)
    newest_first = sorted(manifests, key=_age, reverse=True)
    counted: list[Manifest] = []  # each counted chain's newest restorable checkpoint, newest first
    damaged: list[tuple[str, str]] = []
    checked: set[str] = set()  # chains with a checkpoint newer than the last one counted
    for m in newest_first:
        if len(counted) == keep_chains:
            break
        root = roots[m.checkpoint_id]
        checked.add(root)
        if any(roots[c.checkpoint_id] == root for c in counted):
            continue  # older members of a counted chain are kept with it, unchecked
        why = _problem(store, m, verify_bytes)
        if why is None:
            counted.append(m)
        else:
            damaged.append((m.checkpoint_id, why))
    doomed = [
        m
        for m in newest_first
        if len(counted) == keep_chains and roots[m.checkpoint_id] not in checked
    ]
    gone = {m.checkpoint_id for m in doomed}
    kept = [m for m in newest_first if m.checkpoint_id not in gone]
    oldest_kept = min((m.step for m in kept), default=None)
    names = {m.checkpoint_id for m in manifests}
    partial = [
        n
        for n in store.list_dirs()
        if n not in names
        and n not in protect
        and (s := step_of(n)) is not None
        and oldest_kept is not None
        and s < oldest_kept
    ]
    return GcPlan(
        [m.checkpoint_id for m in kept],
        [m.checkpoint_id for m in doomed],
        partial,
        damaged + [(name, why) for name, why in unreadable],
        counted[0].checkpoint_id if counted else None,
    )


def carry_out(store: Store, plan: GcPlan) -> None:
    """Delete what ``plan`` says: each checkpoint's manifest first, then its folder; then uncommitted folders."""
    for name in plan.deleted:
        store.remove(manifest_path(name))
        store.remove(name)
        log.info("gc: deleted checkpoint %s in %s", name, store.url)
    for name in plan.partial_deleted:
        store.remove(name)
        log.info("gc: deleted uncommitted folder %s in %s", name, store.url)


def collect(
    store: Store,
    keep_chains: int,
    *,
    dry_run: bool = False,
    protect: Collection[str] = (),
    verify_bytes: bool = True,
) -> GcPlan:
    """Keep the newest ``keep_chains`` chains that restore under ``store``; returns the plan it carried out
    (with ``dry_run``, the plan it would carry out, deleting nothing)."""
    plan = plan_collection(store, keep_chains, protect=protect, verify_bytes=verify_bytes)
    if not dry_run:
        carry_out(store, plan)
    return plan
