"""Torch tensors as checkpoint leaves. Imported only when torch already is.

Kept apart so that ``spothop.checkpoint`` imports without torch installed:
the tree module reaches here only when ``torch`` is in ``sys.modules``, which
is the only way a tensor can be in the state.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor)


def dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def version_key(tensor: torch.Tensor) -> tuple[Any, ...]:
    """A fingerprint that changes whenever the tensor is written in place.

    Autograd's version counter is bumped by every in-place op (optimizer
    steps included), so an equal key means the tensor was not modified since
    the key was taken. Writes through ``tensor.data`` bypass the counter;
    that is why this is used only for emergency deltas and can be switched off.
    """
    return (tensor.data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()),
            tensor.dtype, tensor.device, tensor._version)


def host_copies(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Contiguous CPU copies; device tensors go through pinned memory with one sync at the end."""
    out: list[torch.Tensor] = []
    on_device = False
    for tensor in tensors:
        source = tensor.detach()
        if source.device.type == "cpu":
            out.append(source.clone(memory_format=torch.contiguous_format))
            continue
        on_device = True
        pinned = torch.empty(source.shape, dtype=source.dtype, device="cpu", pin_memory=True)
        pinned.copy_(source, non_blocking=True)
        out.append(pinned)
    if on_device and torch.cuda.is_available():
        torch.cuda.synchronize()
    return out


def as_bytes(tensor: torch.Tensor) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The tensor's bytes as a uint8 array sharing its memory (any dtype, bfloat16 included)."""
    flat = tensor.reshape(-1)
    if flat.numel() == 0:
        return np.empty(0, dtype=np.uint8)
    return flat.view(torch.uint8).numpy()


def from_bytes(buffer: bytearray, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    torch_dtype = getattr(torch, dtype)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown torch dtype {dtype!r}")
    if len(buffer) == 0:
        return torch.empty(shape, dtype=torch_dtype)
    return torch.frombuffer(buffer, dtype=torch.uint8).view(torch_dtype).reshape(shape)


def encode_dtype(value: object) -> str | None:
    return str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else None
