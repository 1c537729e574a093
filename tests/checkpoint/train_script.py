"""A small, real training run used by the resume tests, in-process and as a child process.

``python train_script.py URL TOTAL_STEPS OUT [--pause-at N[,M…]] [--agent] [--step-sleep S]`` trains a
small MLP with batch norm, dropout, AdamW, a step LR schedule and a shuffling resumable
sampler, resuming from URL if a checkpoint is there, saving every SAVE_EVERY steps, and
writes the final parameters to OUT. With ``--pause-at`` it prints each step and
blocks on stdin after each listed step, so a parent can SIGKILL it mid-run or act
between steps. With ``--agent`` it saves through ``TorchState.checkpoint_step``
instead, to ``$SPOTHOP_CHECKPOINT_URL`` (as a worker under the spothop agent: advance
notices, final notices, exit 75).
``--step-sleep`` makes each step take at least S seconds longer (a run long enough to be preempted).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from spothop.checkpoint import Checkpointer
from spothop.checkpoint.pytorch import ResumableSampler, TorchState, deterministic

SAVE_EVERY = 3
SAMPLES = 40  # 10 batches per epoch: runs cross epoch boundaries
BATCH = 4


def build() -> tuple[
    nn.Module,
    torch.optim.Optimizer,
    torch.optim.lr_scheduler.LRScheduler,
    DataLoader[tuple[torch.Tensor, ...]],
    ResumableSampler,
]:
    deterministic(0)
    torch.set_num_threads(1)
    data = torch.Generator().manual_seed(1)
    xs = torch.randn(SAMPLES, 8, generator=data)
    ys = torch.randn(SAMPLES, 1, generator=data)
    # Batch norm: buffers that every forward pass writes (the overlapped save must copy them at once).
    model = nn.Sequential(
        nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
    sampler = ResumableSampler(SAMPLES, seed=7)
    # Its own generator: a DataLoader otherwise draws a base seed from the global RNG at every
    # iter(), and a resumed run calls iter() at a different step than an uninterrupted one.
    loader = DataLoader(
        TensorDataset(xs, ys), batch_size=BATCH, sampler=sampler, generator=torch.Generator()
    )
    return model, optimizer, scheduler, loader, sampler


def train(
    url: str | None,
    total: int,
    pause_at: frozenset[int] = frozenset(),
    overlap: bool = False,
    agent: bool = False,
    step_sleep_s: float = 0.0,
) -> tuple[np.ndarray, int]:
    """Final parameters and buffers, and the step resumed from (0: a fresh start). With ``overlap`` the
    saves copy the state while the next forward and backward passes run."""
    model, optimizer, scheduler, loader, sampler = build()
    state = TorchState(model, optimizer, scheduler, sampler=sampler)
    # Under the agent the checkpoint URL comes from the environment it sets ($SPOTHOP_CHECKPOINT_URL).
    ckpt = Checkpointer(None if agent else url, keep_chains=10) if url else None
    step = (state.restore(ckpt) or 0) if ckpt else 0
    resumed_from = step
    batches = iter(loader)
    while step < total:
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        time.sleep(step_sleep_s)
        if ckpt and agent:
            state.checkpoint_step(
                ckpt, step, overlap=overlap
            )  # raises Preempted (exit 75) on a stop
        elif ckpt and step % SAVE_EVERY == 0:
            state.save(ckpt, step, overlap=overlap)
        if pause_at:
            print(f"step {step}", flush=True)
            if step in pause_at:
                sys.stdin.readline()  # the parent kills us here (possibly mid-save), or acts and lets us go on
    if ckpt:
        ckpt.close()
    values = [t.detach().reshape(-1).double() for t in model.state_dict().values()]
    return torch.cat(values).numpy().copy(), resumed_from


if __name__ == "__main__":
    args = sys.argv[1:]
    pause = (
        frozenset(int(n) for n in args[args.index("--pause-at") + 1].split(","))
        if "--pause-at" in args
        else frozenset()
    )
    sleep = float(args[args.index("--step-sleep") + 1]) if "--step-sleep" in args else 0.0
    final, resumed_from = train(
        args[0], int(args[1]), pause, agent="--agent" in args, step_sleep_s=sleep
    )
    print(f"resumed from {resumed_from}", flush=True)
    Path(args[2]).write_bytes(final.tobytes())
