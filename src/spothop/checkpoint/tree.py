"""A training state as JSON structure plus array leaves.

The state handed to :meth:`Checkpointer.save` is a tree of dicts, lists and
tuples whose leaves are NumPy arrays, torch tensors or plain values (numbers,
strings, bytes, None). Arrays go to chunk storage under their *path* in the
tree (``"model/fc.weight"``), which is stable from save to save, so a delta
can compare a leaf with the same leaf in its parent. Everything else is kept
as tagged JSON in the manifest. Nothing is pickled: loading a checkpoint never
runs code from the store.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from spothop.checkpoint.errors import CheckpointConfigError

LEAF_TAG = "__leaf__"
TUPLE_TAG = "__tuple__"
DICT_TAG = "__dict__"
BYTES_TAG = "__bytes__"
NPSCALAR_TAG = "__np_scalar__"
TORCH_DTYPE_TAG = "__torch_dtype__"
TAGS = frozenset({LEAF_TAG, TUPLE_TAG, DICT_TAG, BYTES_TAG, NPSCALAR_TAG, TORCH_DTYPE_TAG})


@dataclass
class Flattened:
    """A state split into its JSON structure and its array leaves by path."""

    tree: Any
    arrays: dict[str, Any]  # path -> np.ndarray or torch.Tensor (the live objects, not copies)


def _torch_helpers() -> Any:
    # Only when the user has imported torch can a tensor be in the state.
    if "torch" not in sys.modules:
        return None
    from spothop.checkpoint import _torch_arrays

    return _torch_arrays


def flatten(state: Any) -> Flattened:
    """Split ``state`` into tagged JSON and array leaves; raises for a value that cannot be stored."""
    arrays: dict[str, Any] = {}
    tree = _encode(state, "", arrays, _torch_helpers())
    return Flattened(tree, arrays)


def _encode(value: Any, path: str, arrays: dict[str, Any], th: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.ndarray) or (th is not None and th.is_tensor(value)):
        if isinstance(value, np.ndarray) and value.dtype.hasobject:
            raise CheckpointConfigError(
                f"state value at {path or '/'!r} is an object array; store numbers only"
            )
        key = path or "/"
        arrays[key] = value
        return {LEAF_TAG: key}
    if isinstance(value, np.generic):
        return {NPSCALAR_TAG: [value.dtype.str, value.item()]}
    if isinstance(value, bytes | bytearray):
        return {BYTES_TAG: base64.b64encode(bytes(value)).decode()}
    if isinstance(value, tuple | list):
        items = [_encode(v, f"{path}/{i}", arrays, th) for i, v in enumerate(value)]
        return {TUPLE_TAG: items} if isinstance(value, tuple) else items
    if isinstance(value, Mapping):
        return _encode_mapping(value, path, arrays, th)
    dtype = th.encode_dtype(value) if th is not None else None
    if dtype is not None:
        return {TORCH_DTYPE_TAG: dtype}
    raise CheckpointConfigError(
        f"state value at {path or '/'!r} has type {type(value).__name__}, which a checkpoint cannot hold; "
        "use numbers, strings, bytes, lists, dicts, NumPy arrays or torch tensors"
    )


def _encode_mapping(value: Mapping[Any, Any], path: str, arrays: dict[str, Any], th: Any) -> Any:
    segments = [str(k) for k in value]
    if len(set(segments)) != len(segments):
        raise CheckpointConfigError(
            f"state dict at {path or '/'!r} has keys that differ only in type"
        )
    encoded = [
        (_encode(k, f"{path}/#key", {}, th), _encode(v, f"{path}/{s}", arrays, th))
        for (k, v), s in zip(value.items(), segments, strict=True)
    ]
    plain = all(isinstance(k, str) and k not in TAGS for k in value)
    return {k: v for k, v in encoded} if plain else {DICT_TAG: [[k, v] for k, v in encoded]}


def unflatten(tree: Any, load_leaf: Callable[[str], Any]) -> Any:
    """Rebuild the state from tagged JSON, asking ``load_leaf(path)`` for each array."""
    if isinstance(tree, list):
        return [unflatten(v, load_leaf) for v in tree]
    if not isinstance(tree, dict):
        return tree
    if len(tree) == 1:
        ((tag, payload),) = tree.items()
        if tag in TAGS:
            return _decode_tagged(tag, payload, load_leaf)
    return {k: unflatten(v, load_leaf) for k, v in tree.items()}


def _decode_tagged(tag: str, payload: Any, load_leaf: Callable[[str], Any]) -> Any:
    if tag == LEAF_TAG:
        return load_leaf(payload)
    if tag == TUPLE_TAG:
        return tuple(unflatten(v, load_leaf) for v in payload)
    if tag == DICT_TAG:
        return {unflatten(k, load_leaf): unflatten(v, load_leaf) for k, v in payload}
    if tag == BYTES_TAG:
        return base64.b64decode(payload)
    if tag == NPSCALAR_TAG:
        return np.dtype(payload[0]).type(payload[1])
    import torch  # a torch dtype can only have been saved by a torch user

    return getattr(torch, payload)
