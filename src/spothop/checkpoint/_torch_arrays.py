"""Torch tensors as checkpoint leaves. Imported only when torch already is.

Kept apart so that ``spothop.checkpoint`` imports without torch installed:
the tree module reaches here only when ``torch`` is in ``sys.modules``, which
is the only way a tensor can be in the state.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Source:
    """Which live tensor a host copy was taken from, and at which version.

    The version key alone could match a *new* tensor that the allocator put at
    a freed tensor's address (a scalar rebuilt every save, say). The weak
    reference to the storage rules that out: while the old storage lives its
    address cannot be reused, and once it dies the reference no longer
    matches. (``state_dict()`` returns new tensor objects each call, but they
    share their parameter's storage object, so this still matches for them.)
    """

    storage: weakref.ReferenceType[Any]
    key: tuple[Any, ...]

    def matches(self, tensor: torch.Tensor) -> bool:
        return self.storage() is tensor.untyped_storage() and self.key == version_key(tensor)


def source_of(tensor: torch.Tensor) -> Source:
    return Source(weakref.ref(tensor.untyped_storage()), version_key(tensor))


def fits(host: torch.Tensor | None, tensor: torch.Tensor) -> bool:
    """Whether ``host`` can be reused as the host copy of ``tensor`` (same dtype and shape)."""
    return host is not None and host.dtype == tensor.dtype and host.shape == tensor.shape


def host_copies(tensors: list[torch.Tensor], into: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """Contiguous CPU copies, written into ``into[i]`` where given (reused buffers: no allocation,
    no page faults), else freshly allocated; device tensors go through pinned memory with one
    sync at the end."""
    out: list[torch.Tensor] = []
    on_device = False
    for tensor, dest in zip(tensors, into, strict=True):
        source = tensor.detach()
        device = source.device.type != "cpu"
        on_device |= device
        if dest is None and not device:
            out.append(source.clone(memory_format=torch.contiguous_format))
            continue
        if dest is None:
            dest = torch.empty(source.shape, dtype=source.dtype, device="cpu", pin_memory=True)
        dest.copy_(source, non_blocking=device)
        out.append(dest)
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
