"""Data-parallel training on torch.distributed that survives a preempted node, bit for bit.

``python train.py --steps N --out FILE [--seen DIR] [--step-sleep S] [--save-every K]``

Run once per node, as spothop runs a task's ``run`` on each node of a group
(docs/multinode.md): the shape comes from :func:`spothop.worker.world` (the
launcher's ``MASTER_ADDR``, ``NODE_RANK``, ``NNODES``, ``NPROC_PER_NODE`` …);
a node with ``NPROC_PER_NODE`` > 1 spawns one process per GPU
(``torch.multiprocessing``; rank = node rank × processes per node + local
rank). Every process joins one gloo group (CPU) and trains a tiny linear
model with ``DistributedDataParallel`` on a fixed synthetic dataset.

The data order is global (``DistributedResumableSampler``): epoch *e* visits
the samples in a permutation drawn from ``seed + e``, a step takes the next
:data:`GLOBAL_BATCH` of it, each rank its share, so the checkpoint's data
position (epoch, seed, samples consumed by all ranks) means the same in any
world: a group re-formed to another size deals the rest of the epoch among
its new ranks, and restores the model and optimizer re-sharded to it.

Checkpoints (``spothop.checkpoint``, one part per rank, committed when every
rank's part is there): after each step the ranks all-reduce (MAX) three
flags — its agent asked a stop (a final notice, or the controller stopping
the group for another node's notice), a checkpoint (an advance notice), or
the checkpoint interval passed (or ``--save-every``) — so that every rank
saves the same step. On a stop every rank saves an emergency checkpoint,
waits until every rank's part is committed (a barrier; only then does each node
tell its agent it saved, since the agent then ends all of the node's
processes), waits (at most :data:`OWN_STOP_WAIT_S`) for its own agent's stop — the
controller's broadcast brings it to the nodes the cloud did not notice — and
exits 75 (preempted, resumable). A rank whose peer vanished (a collective
fails) exits 75 too: the group is relaunched from the last committed step.
A restarted group restores the newest step every rank can load (the ranks
agree with an all-reduce), so no rank resumes from another step.

With ``--seen DIR`` each process appends one JSON line per step (generation,
world size, rank, epoch, step, its sample indices, the global loss) to
``DIR/gen<G>-rank<R>.jsonl``: what the tests check "every sample once per
epoch" and the loss curve with. Node 0's rank 0 writes the final weights'
bytes to ``--out``.

Determinism (CPU): one thread, deterministic kernels, a model initialised
from a fixed seed, the data order a function of (seed, epoch); the same world
size gives bit-identical weights after any number of group restarts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler

from spothop.checkpoint import Checkpointer, Tier, preemption
from spothop.checkpoint.manifest import WorldLayout
from spothop.checkpoint.pytorch import DistributedResumableSampler, TorchState
from spothop.worker import World, sdk, world

SAMPLES, FEATURES = 96, 8
GLOBAL_BATCH = 12  # divides by 1, 2, 3, 4 and 6 ranks: every shape gets equal shares
SEED = 0
LR, MOMENTUM = 0.05, 0.9
MIN_SAVE_WAIT_S = 0.5  # waited for the emergency save even when the deadline has (nearly) passed
OWN_STOP_WAIT_S = 60.0  # the controller's broadcast reaches this rank's agent within a pass or two
COLLECTIVE_TIMEOUT_S = 60.0  # a peer gone silent this long is lost: leave, resumable
EXIT_PREEMPTED = preemption.EXIT_PREEMPTED


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    y = x @ w + 0.1 * torch.randn(SAMPLES, 1, generator=g)
    return x, y


def train(local_rank: int, shape: World, args: argparse.Namespace) -> None:
    me = shape.for_local_rank(local_rank)
    assert me.rank is not None
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group(
        "gloo",
        init_method=me.init_method,
        rank=me.rank,
        world_size=me.world_size,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    try:
        code = _loop(me, args)
    except (RuntimeError, dist.DistBackendError) as exc:  # a peer is gone: relaunch, resumable
        print(f"rank {me.rank}: the group broke ({type(exc).__name__}: {exc}); exit 75", flush=True)
        os._exit(EXIT_PREEMPTED)  # no clean-up: the process group cannot be torn down cleanly
    dist.destroy_process_group()
    if code:
        sys.exit(code)


def _loop(me: World, args: argparse.Namespace) -> int:
    assert me.rank is not None
    torch.manual_seed(SEED)
    model = torch.nn.Linear(FEATURES, 1)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    sampler = DistributedResumableSampler(
        SAMPLES, rank=me.rank, world_size=me.world_size, seed=SEED
    )
    layout = WorldLayout(me.world_size, me.rank, me.nproc_per_node)
    ckpt = Checkpointer(args.checkpoint_url, world=layout)
    state = TorchState(model, optimizer, sampler=sampler)
    step = state.restore(ckpt) or 0  # the step every rank can load; re-sharded from another world
    if me.rank == 0 and args.seen and step:
        Path(args.seen).mkdir(parents=True, exist_ok=True)
        _write_weights(Path(args.seen) / f"gen{me.generation}-restored.json", state, step)
    print(
        f"rank {me.rank}/{me.world_size} generation {me.generation}: starting at step {step}",
        flush=True,
    )
    preemption.listen()  # a stop arrives as a request the loop sees, not a SIGTERM
    x, y = dataset()
    batches = _Batches(sampler, GLOBAL_BATCH // me.world_size)
    seen = _seen_file(args.seen, me)
    while step < args.steps:
        epoch, rows = batches.next()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x[rows]), y[rows])
        loss.backward()
        optimizer.step()
        step += 1
        if seen is not None:
            total = loss.detach().clone()
            dist.all_reduce(total)
            record = {
                "generation": me.generation,
                "world_size": me.world_size,
                "rank": me.rank,
                "epoch": epoch,
                "step": step,
                "rows": rows,
                "loss": float(total) / me.world_size,  # equal shares: the global batch's mean
            }
            seen.write(json.dumps(record) + "\n")
            seen.flush()
        if step % 10 == 0:
            sdk.heartbeat(step=step)
        time.sleep(args.step_sleep)
        stop, asked, due = _agreed(
            sdk.stop_requested(),
            sdk.checkpoint_requested(),
            ckpt.should_save() or (args.save_every > 0 and step % args.save_every == 0),
        )
        if stop:
            return _emergency(me, ckpt, state, step, args.seen)
        if asked or due:
            reason = "advance-notice" if asked else "interval"
            state.save(ckpt, step, user_metadata={"reason": reason}).wait()
    if me.rank == 0 and args.out:
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        Path(args.out).write_bytes(weights.numpy().tobytes())
    dist.barrier()
    ckpt.close()
    print(f"rank {me.rank}: done at step {step}", flush=True)
    return 0


class _Batches:
    """This rank's share of each global batch, epoch after epoch, from the resumable sampler."""

    def __init__(self, sampler: DistributedResumableSampler, size: int) -> None:
        self.sampler, self.size = sampler, size
        self._it = iter(BatchSampler(sampler, size, drop_last=False))

    def next(self) -> tuple[int, list[int]]:
        """The epoch of the next batch and its indices (a new epoch once this one is dealt)."""
        try:
            rows = next(self._it)
        except StopIteration:
            self._it = iter(BatchSampler(self.sampler, self.size, drop_last=False))
            rows = next(self._it)
        return self.sampler.epoch, [int(r) for r in rows]


def _emergency(
    me: World, ckpt: Checkpointer, state: TorchState, step: int, seen: str | None
) -> int:
    """Every rank saves its part of this step; once all parts are there (a barrier), each node's
    first process tells its agent (``sdk.saved``: the agent then ends the node's processes, so
    not before the node's other ranks are saved too); then exit 75."""
    own = sdk.stop_requested()
    left = sdk.seconds_left()
    timeout = None if math.isinf(left) else max(MIN_SAVE_WAIT_S, left - preemption.SAFETY_MARGIN_S)
    metadata = {"reason": "stop", "generation": me.generation}
    manifest = state.save(ckpt, step, tier=Tier.EMERGENCY, user_metadata=metadata).wait(timeout)
    dist.barrier()  # every rank's part is committed: the checkpoint of this step is whole
    if me.local_rank == 0:
        sdk.saved(step=step, checkpoint_id=manifest.checkpoint_id, tier=manifest.tier.value)
    if me.rank == 0 and seen:
        _write_weights(Path(seen) / f"gen{me.generation}-saved.json", state, step)
    _wait_for_own_stop(own)
    ckpt.close()
    print(f"rank {me.rank}: saved step {step}; exit 75", flush=True)
    return EXIT_PREEMPTED


def _write_weights(path: Path, state: TorchState, step: int) -> None:
    """The model's parameters at ``step``, as JSON (what the re-form test compares)."""
    weights = [float(v) for p in state.model.parameters() for v in p.detach().flatten()]
    path.write_text(json.dumps({"step": step, "weights": weights}), encoding="utf-8")


def _agreed(*flags: bool) -> list[bool]:
    """Each flag true on every rank if it is on any one (an all-reduce MAX)."""
    tensor = torch.tensor([int(f) for f in flags], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [bool(v) for v in tensor.tolist()]


def _wait_for_own_stop(already: bool) -> None:
    """A rank that learnt of the stop from a peer waits for its own agent's (the controller's
    broadcast), so its agent runs the emergency protocol and reports the exit as a stop."""
    if already or not sdk.under_agent():
        return
    deadline = time.monotonic() + OWN_STOP_WAIT_S
    while not sdk.stop_requested() and time.monotonic() < deadline:
        time.sleep(0.05)


def _seen_file(folder: str | None, me: World) -> Any:
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return open(Path(folder) / f"gen{me.generation}-rank{me.rank}.jsonl", "a", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", default=None, help="node 0 writes the final weights' bytes here")
    parser.add_argument("--seen", default=None, help="a folder for each rank's per-step record")
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--save-every", type=int, default=0, help="steps between durable saves")
    parser.add_argument("--checkpoint-url", default=None, help="default: $SPOTHOP_CHECKPOINT_URL")
    args = parser.parse_args(argv)
    shape = world()
    if shape.nproc_per_node == 1:
        train(0, shape, args)
        return 0
    try:
        torch.multiprocessing.spawn(train, args=(shape, args), nprocs=shape.nproc_per_node)
    except torch.multiprocessing.ProcessExitedException as exc:  # a rank left with 75 (or failed)
        return int(exc.exit_code) if exc.exit_code is not None else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
