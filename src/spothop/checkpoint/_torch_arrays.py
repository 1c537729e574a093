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

from spothop.checkpoint import bulk
from spothop.checkpoint.errors import CheckpointConfigError

# Device memory used at once to upload the retained host copy for an on-device comparison: bounds the
# extra device memory (plus as many bytes of booleans) whatever the tensor's size.
DEVICE_STAGING_BYTES = 256 * 1024 * 1024


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
    return (
        tensor.data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.dtype,
        tensor.device,
        tensor._version,
    )


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


def sharing_storage(arrays: dict[str, Any], tensors: Any) -> frozenset[str]:
    """The keys of ``arrays`` whose tensors share storage with one of ``tensors`` (a parameter and the
    tensor ``state_dict()`` returns for it do)."""
    wrong = [type(t).__name__ for t in tensors if not isinstance(t, torch.Tensor)]
    if wrong:
        raise CheckpointConfigError(
            f"frozen= takes torch tensors (the frozen parameters); got {wrong[0]}"
        )
    storages = {id(t.untyped_storage()) for t in tensors}
    return frozenset(
        k
        for k, v in arrays.items()
        if isinstance(v, torch.Tensor) and id(v.untyped_storage()) in storages
    )


def fits(host: torch.Tensor | None, tensor: torch.Tensor) -> bool:
    """Whether ``host`` can be reused as the host copy of ``tensor`` (same dtype and shape)."""
    return host is not None and host.dtype == tensor.dtype and host.shape == tensor.shape


def empty_host(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous host buffer for a copy of ``tensor`` (pinned for a device tensor), every page
    touched now rather than during the copy."""
    host = torch.empty(
        tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=tensor.device.type != "cpu"
    )
    as_bytes(host).fill(0)
    return host


def host_copies(
    tensors: list[torch.Tensor],
    into: list[torch.Tensor | None],
    deferred: list[tuple[int, Any, Any]] | None = None,
) -> list[torch.Tensor]:
    """Contiguous CPU copies, written into ``into[i]`` where given (reused buffers: no allocation,
    no page faults), else freshly allocated. CPU tensors whose bytes are their values in order are
    copied in one batch on every core (:func:`bulk.copy`); device tensors go through pinned memory
    with one sync at the end. With ``deferred`` that batch is not copied here: its
    ``(index in tensors, destination bytes, live bytes)`` are appended for the caller to copy."""
    out: list[torch.Tensor] = []
    batch: list[tuple[Any, Any]] = []
    on_device = False
    for tensor, dest in zip(tensors, into, strict=True):
        source = tensor.detach()
        device = source.device.type != "cpu"
        on_device |= device
        live = None if device else plain_bytes(source)
        if live is not None:
            if dest is None:
                dest = torch.empty(source.shape, dtype=source.dtype)
            if deferred is not None:
                deferred.append((len(out), as_bytes(dest), live))
            else:
                batch.append((as_bytes(dest), live))
            out.append(dest)
            continue
        if dest is None and not device:
            out.append(source.clone(memory_format=torch.contiguous_format))
            continue
        if dest is None:
            dest = torch.empty(source.shape, dtype=source.dtype, device="cpu", pin_memory=True)
        dest.copy_(source, non_blocking=device)
        out.append(dest)
    bulk.copy(batch)
    if on_device and torch.cuda.is_available():
        torch.cuda.synchronize()
    return out


def plain_bytes(tensor: torch.Tensor) -> np.ndarray[Any, np.dtype[np.uint8]] | None:
    """The live bytes of a contiguous CPU tensor as a uint8 view, without copying; None when they
    are not simply its values in order (a device, strided, sparse, lazily conjugated or negated
    tensor): the caller then takes a full copy instead."""
    source = tensor.detach()
    if (
        source.device.type != "cpu"
        or source.layout != torch.strided
        or not source.is_contiguous()
        or source.is_conj()
        or source.is_neg()
    ):
        return None
    return as_bytes(source)


def compare_on_device(
    tensor: torch.Tensor, host: torch.Tensor, chunk_bytes: int, check: list[bool]
) -> list[bool] | None:
    """Which fixed-size chunks of ``tensor`` differ from ``host`` (its retained pinned host copy), found on
    ``tensor``'s device so that only the changed chunks need to cross the bus afterwards.

    Only chunks with ``check[i]`` are compared; the others count as changed. ``host`` is uploaded through
    a bounded device staging buffer (``DEVICE_STAGING_BYTES``), and the per-chunk answers come back in
    one synchronisation per staging batch. None when ``tensor`` cannot be viewed as its bytes in order.
    Written for CUDA tensors, but device-agnostic torch code (the tests run it on CPU tensors).
    """
    source = tensor.detach()
    if (
        source.layout != torch.strided
        or not source.is_contiguous()
        or source.is_conj()
        or source.is_neg()
        or not host.is_contiguous()
    ):
        return None
    live = as_torch_bytes(source)
    base = as_torch_bytes(host)
    total = live.numel()
    if total == 0 or base.numel() != total:
        return None
    # A whole number of chunks per batch, so no chunk straddles two batches.
    batch_bytes = max(1, DEVICE_STAGING_BYTES // chunk_bytes) * chunk_bytes
    staging = torch.empty(min(total, batch_bytes), dtype=torch.uint8, device=source.device)
    answers: list[bool] = []
    for start in range(0, total, batch_bytes):
        end = min(total, start + batch_bytes)
        stage = staging[: end - start]
        # Same stream as the comparison below, so it is ordered after the previous batch's kernels.
        stage.copy_(base[start:end], non_blocking=True)
        full = (end - start) // chunk_bytes
        parts: list[torch.Tensor] = []
        if full:
            span = full * chunk_bytes
            parts.append(
                (
                    live[start : start + span].view(full, chunk_bytes)
                    != stage[:span].view(full, chunk_bytes)
                ).any(dim=1)
            )
        if full * chunk_bytes < end - start:
            parts.append(
                (live[start + full * chunk_bytes : end] != stage[full * chunk_bytes :])
                .any()
                .reshape(1)
            )
        answers += torch.cat(parts).tolist()  # one synchronisation per batch
    return [not check[i] or bool(differs) for i, differs in enumerate(answers)]


def copy_chunks_from_device(
    tensor: torch.Tensor, host: torch.Tensor, chunk_bytes: int, chunks: list[int]
) -> None:
    """Copy only the listed chunks of ``tensor`` into ``host`` (pinned: asynchronous), then wait once."""
    live = as_torch_bytes(tensor.detach())
    dest = as_torch_bytes(host)
    for index in chunks:
        start = index * chunk_bytes
        end = min(live.numel(), start + chunk_bytes)
        dest[start:end].copy_(live[start:end], non_blocking=live.device.type != "cpu")
    if live.device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(live.device)


def as_torch_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's bytes as a flat uint8 tensor on its own device (shares its memory)."""
    flat = tensor.reshape(-1)
    return (
        flat.view(torch.uint8)
        if flat.numel()
        else torch.empty(0, dtype=torch.uint8, device=tensor.device)
    )


def as_bytes(tensor: torch.Tensor) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The tensor's bytes as a uint8 array sharing its memory (any dtype, bfloat16 included)."""
    flat = tensor.reshape(-1)
    if flat.numel() == 0:
        return np.empty(0, dtype=np.uint8)
    return flat.view(torch.uint8).numpy()


def from_bytes(
    buffer: np.ndarray[Any, np.dtype[np.uint8]], dtype: str, shape: tuple[int, ...]
) -> torch.Tensor:
    """A tensor sharing the memory of ``buffer`` (a leaf's raw bytes as read back)."""
    torch_dtype = getattr(torch, dtype)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown torch dtype {dtype!r}")
    if len(buffer) == 0:
        return torch.empty(shape, dtype=torch_dtype)
    return torch.from_numpy(buffer).view(torch_dtype).reshape(shape)


def encode_dtype(value: object) -> str | None:
    return str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else None
