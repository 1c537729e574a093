"""The blocking part of a save: copying the state to host memory.

This is the only part of a save the training loop waits for. Afterwards the
host copy belongs to the checkpointer, and training may change the live
tensors at once. For an emergency delta with version tracking on, torch
tensors whose autograd version counter has not moved since the base
checkpoint are not copied at all: they are known to be unchanged, which is
what makes an emergency save of a mostly-frozen model (LoRA) take
milliseconds rather than seconds.

Host buffers are kept between saves (:class:`HostBuffers`): each tensor is
``copy_``-ed into its old buffer (pinned for device tensors) instead of a
fresh allocation, which would pay page faults on every save (memcpy into
warm pages runs ~4x faster than a ``clone`` here). With ``skip_unchanged``
a tensor unchanged since the previous save (same storage, same version)
shares the host copy it already has, so a steady-state save stalls for the
copy of the changed state only. That is opt-in because version counters
miss some writes: ``tensor.data`` writes and fused optimizers
(``torch.optim.AdamW(fused=True)``, the Hugging Face Trainer's default)
update parameters without bumping them. This is safe because a
buffer is only rewritten here, and a snapshot is taken only once the
previous save has finished with its buffers (one save in flight at most).
The price is one host copy of the state kept resident between saves.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spothop.checkpoint import tree
from spothop.checkpoint.manifest import LeafEntry, Manifest
from spothop.checkpoint.pack import HostLeaf


@dataclass(frozen=True)
class DeltaBase:
    """The checkpoint deltas are taken against, and the tensor sources (``_torch_arrays.Source``) it was copied at."""

    manifest: Manifest
    version_keys: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class _Held:
    host: Any  # the host copy: a CPU torch tensor (pinned for device tensors) or a NumPy array
    source: Any = None  # the torch ``Source`` it was copied from; None: NumPy, always copied again


class HostBuffers:
    """Host copies kept from one save to the next, by leaf path. Used by one save at a time."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def get(self, key: str) -> _Held | None:
        return self._held.get(key)

    def put(self, key: str, host: Any, source: Any = None) -> None:
        self._held[key] = _Held(host, source)

    def keep_only(self, keys: Mapping[str, Any]) -> None:
        """Drop buffers of leaves the state no longer has."""
        self._held = {k: v for k, v in self._held.items() if k in keys}

    def clear(self) -> None:
        self._held.clear()


@dataclass(frozen=True)
class Snapshot:
    tree: Any
    leaves: list[HostLeaf]
    version_keys: dict[str, Any]
    blocking_s: float
    copied_bytes: int


def take_snapshot(state: Any, base: DeltaBase | None, track_versions: bool,
                  buffers: HostBuffers | None = None, skip_unchanged: bool = False) -> Snapshot:
    """Copy ``state``'s arrays to host memory; with ``base``, skip tensors provably unchanged.

    With ``buffers``, host copies are reused between saves (see the module doc);
    without, every array is copied into fresh memory.
    """
    started = time.perf_counter()
    held = buffers if buffers is not None else HostBuffers()
    flat = tree.flatten(state)
    held.keep_only(flat.arrays)
    torch_keys = [k for k, v in flat.arrays.items() if not isinstance(v, np.ndarray)]
    keys: dict[str, Any] = {}
    leaves: dict[str, HostLeaf] = {}
    copied = 0
    if torch_keys:
        copied += _torch_leaves(flat.arrays, torch_keys, base, track_versions, keys, held, leaves,
                                skip_unchanged and buffers is not None)
    for key, value in flat.arrays.items():
        if isinstance(value, np.ndarray):
            old = held.get(key)
            if old is not None and old.host.dtype == value.dtype and old.host.shape == value.shape:
                copy = old.host
                np.copyto(copy, value)
            else:
                copy = np.array(value, copy=True, order="C")
                held.put(key, copy)
            copied += copy.nbytes
            leaves[key] = HostLeaf(key, "numpy", copy.dtype.str, tuple(copy.shape),
                                   copy.reshape(-1).view(np.uint8), owner=copy)
    if buffers is None:
        held.clear()
    ordered = [leaves[k] for k in flat.arrays]
    return Snapshot(flat.tree, ordered, keys, time.perf_counter() - started, copied)


def _torch_leaves(arrays: Mapping[str, Any], torch_keys: list[str], base: DeltaBase | None,
                  track_versions: bool, keys: dict[str, Any], held: HostBuffers,
                  out: dict[str, HostLeaf], skip_unchanged: bool) -> int:
    """Fill ``out`` with the torch leaves; returns the bytes actually copied."""
    from spothop.checkpoint import _torch_arrays as ta

    to_copy: list[str] = []
    into: list[Any] = []
    for key in torch_keys:
        tensor = arrays[key]
        keys[key] = ta.source_of(tensor)
        reuse = _unchanged(base, key, tensor) if track_versions else None
        old = held.get(key)
        if reuse is not None:
            out[key] = HostLeaf(key, "torch", ta.dtype_name(tensor), tuple(tensor.shape), None, reuse=reuse)
        elif skip_unchanged and old is not None and old.source is not None and old.source.matches(tensor):
            # Unchanged since the previous save: its host copy is still exact.
            out[key] = HostLeaf(key, "torch", ta.dtype_name(old.host), tuple(old.host.shape),
                                ta.as_bytes(old.host), owner=old.host)
        else:
            to_copy.append(key)
            into.append(old.host if old is not None and ta.fits(old.host, tensor) else None)
    copied = 0
    for key, host in zip(to_copy, ta.host_copies([arrays[k] for k in to_copy], into), strict=True):
        held.put(key, host, keys[key])
        out[key] = HostLeaf(key, "torch", ta.dtype_name(host), tuple(host.shape), ta.as_bytes(host), owner=host)
        copied += host.numel() * host.element_size()
    return copied


def _unchanged(base: DeltaBase | None, key: str, tensor: Any) -> LeafEntry | None:
    source = base.version_keys.get(key) if base is not None else None
    if base is None or source is None or not source.matches(tensor):
        return None
    return base.manifest.leaves.get(key)
