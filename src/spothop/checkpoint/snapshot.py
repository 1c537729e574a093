"""The blocking part of a save: copying the state to host memory.

This is the only part of a save the training loop waits for. Afterwards the
host copy belongs to the checkpointer, and training may change the live
tensors at once. For an emergency delta with version tracking on, torch
tensors whose autograd version counter has not moved since the base
checkpoint are not copied at all: they are known to be unchanged, which is
what makes an emergency save of a mostly-frozen model (LoRA) take
milliseconds rather than seconds.
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
    """The checkpoint deltas are taken against, and the tensor versions it was copied at."""

    manifest: Manifest
    version_keys: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    tree: Any
    leaves: list[HostLeaf]
    version_keys: dict[str, tuple[Any, ...]]
    blocking_s: float
    copied_bytes: int


def take_snapshot(state: Any, base: DeltaBase | None, track_versions: bool) -> Snapshot:
    """Copy ``state``'s arrays to host memory; with ``base``, skip tensors provably unchanged."""
    started = time.perf_counter()
    flat = tree.flatten(state)
    torch_keys = [k for k, v in flat.arrays.items() if not isinstance(v, np.ndarray)]
    keys: dict[str, tuple[Any, ...]] = {}
    leaves: dict[str, HostLeaf] = {}
    if torch_keys:
        leaves.update(_torch_leaves(flat.arrays, torch_keys, base, track_versions, keys))
    for key, value in flat.arrays.items():
        if isinstance(value, np.ndarray):
            copy = np.array(value, copy=True, order="C")
            leaves[key] = HostLeaf(key, "numpy", copy.dtype.str, tuple(copy.shape),
                                   copy.reshape(-1).view(np.uint8), owner=copy)
    ordered = [leaves[k] for k in flat.arrays]
    copied = sum(len(leaf.data) for leaf in ordered if leaf.data is not None)
    return Snapshot(flat.tree, ordered, keys, time.perf_counter() - started, copied)


def _torch_leaves(arrays: Mapping[str, Any], torch_keys: list[str], base: DeltaBase | None,
                  track_versions: bool, keys: dict[str, tuple[Any, ...]]) -> dict[str, HostLeaf]:
    from spothop.checkpoint import _torch_arrays as ta

    out: dict[str, HostLeaf] = {}
    to_copy: list[str] = []
    for key in torch_keys:
        tensor = arrays[key]
        keys[key] = ta.version_key(tensor)
        reuse = _unchanged(base, key, keys[key]) if track_versions else None
        if reuse is not None:
            out[key] = HostLeaf(key, "torch", ta.dtype_name(tensor), tuple(tensor.shape), None, reuse=reuse)
        else:
            to_copy.append(key)
    for key, host in zip(to_copy, ta.host_copies([arrays[k] for k in to_copy]), strict=True):
        out[key] = HostLeaf(key, "torch", ta.dtype_name(host), tuple(host.shape), ta.as_bytes(host), owner=host)
    return out


def _unchanged(base: DeltaBase | None, key: str, version: tuple[Any, ...]) -> LeafEntry | None:
    if base is None or base.version_keys.get(key) != version:
        return None
    return base.manifest.leaves.get(key)
