"""Random number generator states: Python, NumPy, torch CPU and every CUDA device.

Captured into the manifest at save time and put back after a restore, so the
resumed run draws the same dropout masks and shuffles as an uninterrupted one.
torch is touched only if the program has imported it (otherwise it drew no
numbers from it); CUDA only if it is available and initialised.
"""

from __future__ import annotations

import base64
import random
import sys
from typing import Any

import numpy as np

from spothop.checkpoint import tree


def capture_rng() -> dict[str, Any]:
    """The current global RNG states as JSON-ready data."""
    numpy_state = np.random.get_state(legacy=False)
    key = np.asarray(numpy_state["state"]["key"], dtype="<u4")
    state: dict[str, Any] = {
        "python": tree.flatten(random.getstate()).tree,
        "numpy": {
            "bit_generator": numpy_state["bit_generator"],
            "key": _b64(key.tobytes()),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch_cpu"] = _b64(torch.get_rng_state().numpy().tobytes())
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["torch_cuda"] = [
                _b64(s.numpy().tobytes()) for s in torch.cuda.get_rng_state_all()
            ]
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng` captured; parts absent from ``state`` are left alone."""
    if "python" in state:
        random.setstate(tree.unflatten(state["python"], _no_leaves))
    if "numpy" in state:
        saved = state["numpy"]
        key = np.frombuffer(base64.b64decode(saved["key"]), dtype="<u4").astype(np.uint32)
        np.random.set_state(
            {
                "bit_generator": saved["bit_generator"],
                "state": {"key": key, "pos": saved["pos"]},
                "has_gauss": saved["has_gauss"],
                "gauss": saved["gauss"],
            }
        )
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if "torch_cpu" in state:
        torch.set_rng_state(_tensor(torch, state["torch_cpu"]))
    if "torch_cuda" in state and torch.cuda.is_available():
        count = min(torch.cuda.device_count(), len(state["torch_cuda"]))
        torch.cuda.set_rng_state_all([_tensor(torch, s) for s in state["torch_cuda"][:count]])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _tensor(torch: Any, encoded: str) -> Any:
    return torch.frombuffer(bytearray(base64.b64decode(encoded)), dtype=torch.uint8)


def _no_leaves(path: str) -> Any:
    raise ValueError(f"RNG state has an unexpected array at {path}")
