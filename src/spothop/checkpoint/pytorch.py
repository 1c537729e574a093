"""PyTorch integration: model, optimizer, scheduler, grad scaler, RNG and an exactly resumable sampler.

Importing this module imports torch; :mod:`spothop.checkpoint` itself does not.

Contract: with deterministic settings on CPU, training that saves through
:class:`TorchState`, is killed, and resumes from the checkpoint produces
parameters bit-identical to an uninterrupted run at the same step. That needs
the whole state, which :class:`TorchState` gathers: parameters and buffers,
optimizer moments, scheduler position, grad-scaler scale, every RNG, and the
sampler's exact place in the epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sized
from concurrent.futures import Future
from typing import Any

import torch
from torch.utils.data import Sampler

from spothop.checkpoint.checkpointer import Checkpointer
from spothop.checkpoint.errors import CheckpointConfigError
from spothop.checkpoint.manifest import Shard, Tier
from spothop.checkpoint.restore import Restored
from spothop.checkpoint.saving import SaveHandle

VALIDATION_KEY = "validation_value"
DEFAULT_VALIDATION_RTOL = 1e-5  # same weights and batch on the same machine give the same value


def epoch_order(length: int, shuffle: bool, seed: int, epoch: int) -> list[int]:
    """The samples of one epoch in order: a permutation drawn from ``seed + epoch`` alone."""
    if not shuffle:
        return list(range(length))
    generator = torch.Generator().manual_seed(seed + epoch)
    return [int(i) for i in torch.randperm(length, generator=generator)]


class ResumableSampler(Sampler[int]):
    """A (shuffling) sampler that resumes mid-epoch at the exact next sample.

    The order of epoch ``e`` is a permutation drawn from ``seed + e`` alone, so
    it does not depend on the global RNG or on how the run was interrupted.
    ``index`` counts the samples handed out in the current epoch; with a
    ``DataLoader`` of ``num_workers=0`` that is exactly the samples consumed.
    (Worker processes prefetch; then record the consumed count yourself.)
    Give the ``DataLoader`` its own ``generator=torch.Generator()``: otherwise
    each ``iter(loader)`` draws a seed from the global RNG, and a resumed run
    calls ``iter`` at a different step than an uninterrupted one.
    """

    def __init__(self, data: Sized | int, *, shuffle: bool = True, seed: int = 0) -> None:
        self.length = data if isinstance(data, int) else len(data)
        self.shuffle, self.seed = shuffle, seed
        self.epoch = 0
        self.index = 0

    def __len__(self) -> int:
        return self.length - self.index

    def _order(self) -> list[int]:
        return epoch_order(self.length, self.shuffle, self.seed, self.epoch)

    def __iter__(self) -> Iterator[int]:
        order = self._order()
        while self.index < self.length:
            position = self.index
            self.index += 1
            yield order[position]
        self.epoch += 1
        self.index = 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed, "length": self.length}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if int(state["length"]) != self.length:
            raise CheckpointConfigError(
                f"the checkpoint's sampler covered {state['length']} samples; this dataset has {self.length}"
            )
        self.epoch, self.index, self.seed = (
            int(state["epoch"]),
            int(state["index"]),
            int(state["seed"]),
        )


class DistributedResumableSampler(Sampler[int]):
    """One rank's share of a shuffled epoch, resumable mid-epoch in a world of any size.

    The order of epoch ``e`` is one permutation drawn from ``seed + e`` alone,
    the same on every rank. Its samples not yet consumed are dealt round-robin:
    rank ``r`` of ``W`` takes the remaining ``r``-th, ``r + W``-th, … So once
    every rank has taken ``k`` samples, exactly the first ``W × k`` remaining
    ones are consumed, and the sampler's state is one count that every rank
    shares and that means the same in any world: ``(epoch, seed, consumed)``,
    samples of the epoch consumed by all ranks together. A job re-formed to
    ``W'`` ranks loads it and deals the rest of the epoch among its ranks: no
    sample skipped, none repeated. With a global batch divisible by both world
    sizes (each rank's batch ``B / W``), every step's global batch is the same
    set of samples in either world.

    Ranks must take samples in lockstep (the same count per step, which a
    ``DataLoader`` with ``num_workers=0`` and ``batch_size = B / W`` does);
    when the epoch's remainder does not divide by ``W`` the last step gives
    some ranks one sample fewer. Unlike ``DistributedSampler`` nothing is
    padded with repeats. ``rank`` and ``world_size`` default to
    ``torch.distributed``'s when it is initialised (else 0 and 1). Give the
    ``DataLoader`` its own ``generator=torch.Generator()``, as for
    :class:`ResumableSampler`.
    """

    def __init__(
        self,
        data: Sized | int,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        import torch.distributed as dist

        initialised = dist.is_available() and dist.is_initialized()
        self.world_size = world_size or (dist.get_world_size() if initialised else 1)
        self.rank = (dist.get_rank() if initialised else 0) if rank is None else rank
        if not 0 <= self.rank < self.world_size:
            raise CheckpointConfigError(
                f"sampler rank {self.rank} is not in a world of {self.world_size}"
            )
        self.length = data if isinstance(data, int) else len(data)
        self.shuffle, self.seed = shuffle, seed
        self.epoch = 0
        self.start = 0  # samples of the epoch consumed by every rank when this pass began
        self.index = 0  # samples this rank has taken in this pass

    def _position(self) -> int:
        """Where this rank's next sample lies in the epoch's order."""
        return self.start + self.rank + self.world_size * self.index

    @property
    def consumed(self) -> int:
        """Samples of the epoch consumed by all ranks together (the whole epoch once this rank's
        share is taken: in lockstep the others' is too)."""
        if self._position() >= self.length:
            return self.length
        return self.start + self.world_size * self.index

    def __len__(self) -> int:
        return len(range(self._position(), self.length, self.world_size))

    def _order(self) -> list[int]:
        return epoch_order(self.length, self.shuffle, self.seed, self.epoch)

    def __iter__(self) -> Iterator[int]:
        self.start, self.index = self.consumed, 0
        order = self._order()
        while (position := self._position()) < self.length:
            self.index += 1
            yield order[position]
        self.epoch += 1
        self.start = self.index = 0

    def state_dict(self) -> dict[str, int | bool]:
        """The same on every rank and in every world: epoch, seed, samples consumed globally."""
        return {
            "epoch": self.epoch,
            "seed": self.seed,
            "consumed": self.consumed,
            "length": self.length,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "consumed" not in state:
            raise CheckpointConfigError(
                "the checkpoint's data position is not a DistributedResumableSampler's "
                f"(it has {sorted(state)}); restore it into the sampler that saved it"
            )
        if int(state["length"]) != self.length or bool(state["shuffle"]) != self.shuffle:
            raise CheckpointConfigError(
                f"the checkpoint's sampler covered {state['length']} samples (shuffle="
                f"{state['shuffle']}); this one has {self.length} (shuffle={self.shuffle})"
            )
        self.epoch, self.seed = int(state["epoch"]), int(state["seed"])
        self.start, self.index = int(state["consumed"]), 0


class TorchState:
    """The pieces of a PyTorch training run that a checkpoint must hold, saved and restored together."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any = None,
        scaler: Any = None,
        sampler: ResumableSampler | DistributedResumableSampler | None = None,
        sharded: Mapping[str, Shard] | None = None,
    ) -> None:
        """``sharded`` marks the leaves each rank holds one slice of (see :meth:`Checkpointer.save`),
        by path in :meth:`state_dict` (``"optimizer/state/*/exp_avg"``), so that a re-formed job
        re-shards them; everything else is replicated."""
        self.model, self.optimizer, self.scheduler, self.scaler, self.sampler = (
            model,
            optimizer,
            scheduler,
            scaler,
            sampler,
        )
        self._copying: SaveHandle | None = (
            None  # an overlapped save whose copy the next step must wait for
        )
        self.sharded = dict(sharded or {})
        self.restored: Restored | None = None  # what the last restore loaded
        self._prepared = False  # checkpoint_step has had the host buffers allocated
        self._step_hook: Any = None

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"model": self.model.state_dict()}
        for name in ("optimizer", "scheduler", "scaler"):
            part = getattr(self, name)
            if part is not None:
                state[name] = part.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        for name in ("optimizer", "scheduler", "scaler"):
            part = getattr(self, name)
            if part is not None and name in state:
                part.load_state_dict(state[name])

    def prepare(self, checkpointer: Checkpointer) -> Future[int]:
        """Allocate the checkpointer's host buffers for this state in the background (see
        :meth:`Checkpointer.prepare`), so the first save stalls only for its copy. Call it after
        the first optimizer step: the optimizer's moments do not exist before."""
        return checkpointer.prepare(self.state_dict())

    def checkpoint_step(
        self,
        checkpointer: Checkpointer,
        step: int,
        *,
        overlap: bool = False,
        user_metadata: Mapping[str, Any] | None = None,
    ) -> SaveHandle | None:
        """Call once per training step, after the optimizer step, with the steps done so far.

        Saves durably when the checkpointer's interval has passed or the agent asks (an advance
        notice), and returns the save's handle (None when nothing was due). The first call with
        nothing due allocates the host buffers in the background (:meth:`prepare`). On a final notice it
        saves an emergency delta, waits for it within the agent's deadline, tells the agent, and
        raises :class:`~spothop.checkpoint.preemption.Preempted` (a ``SystemExit`` with code 75:
        preempted, resumable). Outside an agent only the interval applies. See
        :mod:`spothop.checkpoint.preemption`.
        """
        from spothop.checkpoint import preemption

        preemption.listen()
        reason = preemption.due(checkpointer)
        if reason is None:
            if (
                not self._prepared
            ):  # the first step is done: the optimizer state exists, shapes are final
                self.prepare(checkpointer)
                self._prepared = True
            return None
        metadata = {**(user_metadata or {}), "reason": reason.value}
        if reason is preemption.Reason.STOP:
            raise preemption.emergency_save(
                checkpointer,
                step,
                lambda: self.save(checkpointer, step, tier=Tier.EMERGENCY, user_metadata=metadata),
            )
        return self.save(checkpointer, step, user_metadata=metadata, overlap=overlap)

    def save(
        self,
        checkpointer: Checkpointer,
        step: int,
        *,
        tier: Tier | str = Tier.DURABLE,
        validation_value: float | None = None,
        user_metadata: Mapping[str, Any] | None = None,
        overlap: bool = False,
        sync: bool = False,
    ) -> SaveHandle:
        """Save everything; ``validation_value`` (e.g. the loss on a fixed batch) is recorded for the hook.

        With ``overlap`` the copy of parameters and optimizer state runs while the next forward
        and backward passes do (they only read them), and the optimizer's next ``step()`` waits
        for it (a pre-step hook), so the loop stalls only for what the copy has not finished by
        then (``handle.blocking_s + handle.waited_s``). Model buffers, which a forward pass may
        write (batch-norm statistics), are copied at once. Do not write parameters yourself
        (an EMA, ``param.data = ...``) between such a save and the next optimizer step.

        Frozen parameters (``requires_grad=False``) that have not changed since the last save
        are neither copied nor compared (their version counters are trusted), so a LoRA save
        or emergency delta costs about the adapter's size. Do not write frozen weights through
        ``.data``: that bypasses the counter.

        With ``sync`` it returns once committed and a full save writes the CPU tensors from their
        own memory, with no host copy (:meth:`Checkpointer.save`).
        """
        metadata = dict(user_metadata or {})
        if validation_value is not None:
            metadata[VALIDATION_KEY] = float(validation_value)
        position = self.sampler.state_dict() if self.sampler is not None else {}
        state = self.state_dict()
        overlap = (
            overlap and self.optimizer is not None
        )  # without an optimizer nothing says when to wait
        if overlap:
            self._hook_optimizer_step()
            buffers = {name for name, _ in self.model.named_buffers()}
            state["model"] = {
                key: value.detach().clone() if key in buffers else value
                for key, value in state["model"].items()
            }
        # Frozen weights (LoRA's base model) change only through in-place writes, which bump their version
        # counters: unchanged ones are neither copied nor compared. Trainable ones are always checked, since
        # fused optimizers write them without bumping the counter.
        frozen = [p for p in self.model.parameters() if not p.requires_grad]
        handle = checkpointer.save(
            state,
            step,
            tier=tier,
            data_position=position,
            user_metadata=metadata,
            overlap=overlap,
            frozen=frozen,
            sharded=self.sharded,
            sync=sync,
        )
        if overlap:
            self._copying = handle
        return handle

    def _hook_optimizer_step(self) -> None:
        if self._step_hook is not None or self.optimizer is None:
            return

        def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            copying, self._copying = self._copying, None
            if copying is not None:
                copying.wait_copied()

        self._step_hook = _innermost(self.optimizer).register_step_pre_hook(before_step)

    def restore(
        self,
        checkpointer: Checkpointer,
        validate: Callable[[], float] | None = None,
        rtol: float = DEFAULT_VALIDATION_RTOL,
    ) -> int | None:
        """Load the newest good checkpoint into the model etc.; returns its step, or None if there is none.

        With ``validate`` (e.g. the loss on a fixed batch), each candidate is
        loaded and its value compared with the one recorded at save time; a
        mismatch beyond ``rtol`` rejects it and the next older one is tried.

        A newer checkpoint written by another world size (a re-formed job) is re-sharded to
        this one (:mod:`spothop.checkpoint.reshard`); :attr:`restored` keeps what was loaded
        (``restored.resharded`` says from which world). The ranks agree on the step.
        """

        def accept(restored: Restored) -> bool:
            self.load_state_dict(restored.state)
            recorded = restored.manifest.user_metadata.get(VALIDATION_KEY)
            if validate is None or recorded is None:
                return True
            with torch.no_grad():
                value = float(validate())
            return abs(value - float(recorded)) <= rtol * max(abs(float(recorded)), 1e-12)

        restored = checkpointer.restore(accept, agree=_min_over_ranks(checkpointer))
        self.restored = restored
        if restored is None:
            return None
        if self.sampler is not None and restored.manifest.data_position:
            self.sampler.load_state_dict(restored.manifest.data_position)
        return restored.step


def _min_over_ranks(checkpointer: Checkpointer) -> Callable[[int], int] | None:
    """The minimum of a value over the ranks (``all_reduce`` MIN), when this is a multi-rank run with
    ``torch.distributed`` initialised; None otherwise."""
    import torch.distributed as dist

    if checkpointer.world.world_size < 2 or not dist.is_available() or not dist.is_initialized():
        return None
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )

    def minimum(value: int) -> int:
        tensor = torch.tensor([value], dtype=torch.int64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
        return int(tensor.item())

    return minimum


def _innermost(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside wrappers such as accelerate's ``AcceleratedOptimizer``, whose own
    ``step`` calls the inner one's: only the inner one runs step hooks."""
    inner = optimizer
    while isinstance(getattr(inner, "optimizer", None), torch.optim.Optimizer):
        inner = inner.optimizer
    if not isinstance(inner, torch.optim.Optimizer):
        raise CheckpointConfigError(
            f"overlap needs a torch.optim.Optimizer to hook; got {type(optimizer).__name__}"
        )
    return inner


def deterministic(seed: int) -> None:
    """Seed every RNG and ask torch for deterministic kernels: what exact resume needs."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
