"""What the ``spothop ckpt`` commands see: listing and verifying a checkpoint location."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spothop.checkpoint.errors import CheckpointError
from spothop.checkpoint.gc import step_of
from spothop.checkpoint.reader import committed, verify
from spothop.checkpoint.store import Store


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


@dataclass(frozen=True)
class VerifyResult:
    checkpoint_id: str
    step: int
    tier: str
    ok: bool
    reason: str | None


def list_checkpoints(url: str, storage_options: Mapping[str, Any] | None = None) -> list[CheckpointInfo]:
    """Every folder under ``url``, oldest step first, with whether it is a checkpoint."""
    store = Store(url, storage_options)
    found, damaged = committed(store)
    infos = [CheckpointInfo(m.checkpoint_id, "committed", m.step, m.tier.value, m.parent,
                            m.wall_time_unix_s, m.size_bytes) for m in found]
    infos += [CheckpointInfo(name, "damaged", step_of(name), reason=why) for name, why in damaged]
    known = {i.checkpoint_id for i in infos}
    infos += [CheckpointInfo(name, "uncommitted", step_of(name), reason="no manifest: the save never finished")
              for name in store.list_dirs() if name not in known and step_of(name) is not None]
    return sorted(infos, key=lambda i: (i.step if i.step is not None else -1, i.wall_time_unix_s or 0.0))


def verify_checkpoints(url: str, checkpoint_id: str | None = None,
                       storage_options: Mapping[str, Any] | None = None) -> list[VerifyResult]:
    """Check every byte of each committed checkpoint (or just ``checkpoint_id``) and its chain."""
    store = Store(url, storage_options)
    found, damaged = committed(store)
    results = [VerifyResult(name, step_of(name) or 0, "?", False, why) for name, why in damaged
               if checkpoint_id in (None, name)]
    for manifest in found:
        if checkpoint_id not in (None, manifest.checkpoint_id):
            continue
        try:
            verify(store, manifest)
            results.append(VerifyResult(manifest.checkpoint_id, manifest.step, manifest.tier.value, True, None))
        except CheckpointError as exc:
            reason = getattr(exc, "reason", str(exc))
            results.append(VerifyResult(manifest.checkpoint_id, manifest.step, manifest.tier.value, False, reason))
    return sorted(results, key=lambda r: r.step)
