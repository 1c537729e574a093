"""A tiny data-parallel training run, one process per rank (torch.multiprocessing spawn, gloo on CPU).

``train(config)`` runs ``config.world_size`` ranks that train a ``Linear(4, 2)`` on 48 fixed
samples with a global batch of 12 (``12 / W`` per rank, so every step's global batch is the same
samples in any world) for ``config.steps`` steps, restoring first from the checkpoint URL and
saving at ``config.save_at``. Gradients are summed over the ranks (``all_reduce``) of a loss
that is the global batch's sum over 12, so the update is the same in any world up to the
order of float32 additions. Each rank writes what it did to ``OUT/rank-N.json``: its samples
per step, (rank 0) the global loss per step, the restored step and whether it was re-sharded,
the final parameters as float hex, or the error that stopped it.

Modes: ``replicated`` — DDP-style: ``torch.optim.SGD`` with momentum, everything replicated,
saved and restored through ``TorchState``. ``zero`` — ZeRO-1-style: the momentum of the
flattened parameters is sharded over the ranks (each rank updates its rows, then the rows are
all-gathered), saved with ``sharded={"zero/momentum": Shard(rule=RULE, length=10)}`` and
restored through ``Checkpointer.restore(agree=...)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.utils import parameters_to_vector, vector_to_parameters
from torch.utils.data import DataLoader, TensorDataset

from spothop.checkpoint import (
    Checkpointer,
    FixedInterval,
    ReshardError,
    Shard,
    ShardRule,
    WorldLayout,
)
from spothop.checkpoint.pytorch import DistributedResumableSampler, TorchState
from spothop.checkpoint.reshard import new_range

SAMPLES = 48
GLOBAL_BATCH = 12  # divisible by 1, 2, 3 and 4 ranks
STEPS_PER_EPOCH = SAMPLES // GLOBAL_BATCH
LR, MOMENTUM = 0.02, 0.9
MOMENTUM_KEY = "zero/momentum"


@dataclass(frozen=True)
class Config:
    url: str
    out: str
    world_size: int
    steps: int
    save_at: int | None = None
    mode: str = "replicated"  # or "zero"
    rule: str = "padded"  # the zero mode's shard rule


def train(config: Config) -> list[dict[str, Any]]:
    """Run every rank to its end; each rank's record, in rank order."""
    Path(config.out).mkdir(parents=True, exist_ok=True)
    init = Path(config.out) / "rendezvous"
    init.unlink(missing_ok=True)
    # forkserver: its server imports torch, this module and torch._dynamo (which creating any
    # torch optimizer imports: seconds on a loaded 2-core box) once per test session, and each
    # rank forks from it; a spawned rank would import them all again, and tear them down at exit
    mp.set_forkserver_preload([__name__, "torch._dynamo"])
    with _main_not_rerun():
        mp.start_processes(
            _rank, args=(config,), nprocs=config.world_size, join=True, start_method="forkserver"
        )
    return [
        json.loads((Path(config.out) / f"rank-{r}.json").read_text())
        for r in range(config.world_size)
    ]


@contextlib.contextmanager
def _main_not_rerun() -> Iterator[None]:
    """Keep each rank from re-running the parent's main module (pytest's, when under pytest):
    multiprocessing runs it in every child to find pickled functions, but the ranks need only
    this module, which the forkserver has imported."""
    main = sys.modules["__main__"]
    spec, path = getattr(main, "__spec__", None), getattr(main, "__file__", None)
    main.__spec__ = None
    if path is not None:
        del main.__file__
    try:
        yield
    finally:
        main.__spec__ = spec
        if path is not None:
            main.__file__ = path


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, 4, generator=generator)
    y = x @ torch.tensor([[1.0, -2.0], [0.5, 0.0], [-1.0, 1.5], [2.0, 0.25]]) + 0.1
    return TensorDataset(x, y, torch.arange(SAMPLES))


def _rank(rank: int, config: Config) -> None:
    began = time.time()
    # One thread makes these CPU kernels deterministic; use_deterministic_algorithms would import
    # torch._inductor (seconds per rank on a loaded box) for nothing this model runs.
    torch.set_num_threads(1)
    world = config.world_size
    if world > 1:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{Path(config.out) / 'rendezvous'}",
            rank=rank,
            world_size=world,
        )
    record: dict[str, Any] = {"config": asdict(config), "samples": {}, "losses": {}}
    record["phases_s"] = {"joined": time.time() - began}  # where a slow run spent its time
    try:
        _run(rank, config, record)
    except ReshardError as exc:
        record["error"] = str(exc)
    finally:
        Path(config.out, f"rank-{rank}.json").write_text(json.dumps(record))
        if world > 1:
            dist.barrier()
            dist.destroy_process_group()


def _run(rank: int, config: Config, record: dict[str, Any]) -> None:
    world = config.world_size
    began = time.time() - record["phases_s"]["joined"]
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Linear(4, 2)
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    sampler = DistributedResumableSampler(SAMPLES, rank=rank, world_size=world, seed=7)
    loader = DataLoader(
        _data(), batch_size=GLOBAL_BATCH // world, sampler=sampler, generator=torch.Generator()
    )
    ckpt = Checkpointer(
        config.url,
        local_url=f"{config.url}-local",
        world=WorldLayout(world_size=world, rank=rank),
        interval=FixedInterval(1e9),
    )
    shard = Shard(rule=ShardRule(config.rule), length=total)
    start, stop = new_range(shard, total, world, rank, MOMENTUM_KEY)
    momentum = torch.zeros(stop - start)
    optimizer = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    parts = TorchState(model, optimizer, sampler=sampler)
    if config.mode == "replicated":
        step = parts.restore(ckpt) or 0
        restored = parts.restored
    else:
        restored = ckpt.restore(agree=_minimum if world > 1 else None)
        step = 0
        if restored is not None:
            model.load_state_dict(restored.state["model"])
            momentum = restored.state["zero"]["momentum"].clone()
            sampler.load_state_dict(restored.manifest.data_position)
            step = restored.step
    record["phases_s"]["restored"] = time.time() - began
    record["restored_step"] = step if restored is not None else None
    record["resharded_from"] = (
        restored.resharded.from_world_size if restored and restored.resharded else None
    )
    while step < config.steps:
        for x, y, ids in loader:
            loss_sum = ((model(x) - y) ** 2).sum()
            (loss_sum / GLOBAL_BATCH).backward()
            global_loss = loss_sum.detach().clone()
            if world > 1:  # one collective a step: the gradients and the loss, summed
                grads = [p.grad for p in params]
                packed = torch.cat([parameters_to_vector(grads), global_loss.reshape(1)])  # type: ignore[arg-type]
                dist.all_reduce(packed)
                vector_to_parameters(packed[:-1], grads)  # type: ignore[arg-type]
                global_loss = packed[-1]
            record["samples"][str(step)] = [int(i) for i in ids]
            record["losses"][str(step)] = (global_loss / GLOBAL_BATCH).item().hex()
            if config.mode == "replicated":
                optimizer.step()
            else:
                momentum = _zero_step(params, momentum, start, stop, world, total)
            optimizer.zero_grad()
            step += 1
            if step == config.save_at:
                state: dict[str, Any] = (
                    parts.state_dict()
                    if config.mode == "replicated"
                    else {"model": model.state_dict(), "zero": {"momentum": momentum}}
                )
                sharded = {MOMENTUM_KEY: shard} if config.mode == "zero" else None
                ckpt.save(state, step, data_position=sampler.state_dict(), sharded=sharded).wait()
            if step == config.steps:
                break
    record["phases_s"]["trained"] = time.time() - began
    ckpt.close()
    record["final"] = [v.hex() for v in parameters_to_vector(params).tolist()]


def _zero_step(
    params: list[torch.nn.Parameter],
    momentum: torch.Tensor,
    start: int,
    stop: int,
    world: int,
    total: int,
) -> torch.Tensor:
    """SGD with momentum whose momentum this rank keeps for rows [start, stop) only."""
    rows = stop - start
    padding = torch.zeros(world * rows - total)
    grad = torch.cat([parameters_to_vector([p.grad for p in params]), padding])  # type: ignore[misc]
    with torch.no_grad():
        flat = torch.cat([parameters_to_vector(params), padding])
        momentum = momentum * MOMENTUM + grad[start:stop]
        mine = flat[start:stop] - LR * momentum
        pieces = [torch.zeros(rows) for _ in range(world)]
        if world > 1:
            dist.all_gather(pieces, mine)
        else:
            pieces = [mine]
        vector_to_parameters(torch.cat(pieces)[:total], params)
    return momentum


def _minimum(value: int) -> int:
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())


if __name__ == "__main__":  # a manual run: python -m tests.checkpoint.reshard_train URL OUT W STEPS
    url, out, size, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    os.makedirs(out, exist_ok=True)
    print(json.dumps(train(Config(url, out, size, steps))[0]["losses"]))
