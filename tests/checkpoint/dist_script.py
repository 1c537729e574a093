"""One rank of a two-rank restore for the restore-agreement test: ``python dist_script.py RANK INIT_FILE URL``.

:func:`save_steps` writes a rank's steps 1 and 2 (parameters filled with step*10 + rank; saving
talks to no other rank, so the test calls it in-process); run as a script, a rank restores
through ``TorchState`` with ``torch.distributed`` (gloo) initialised and prints
``restored STEP VALUE``.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from spothop.checkpoint import Checkpointer, WorldLayout
from spothop.checkpoint.pytorch import TorchState

WORLD = 2


def _rank_state(url: str, rank: int) -> tuple[torch.nn.Linear, TorchState, Checkpointer]:
    model = torch.nn.Linear(4, 4)
    ckpt = Checkpointer(
        url, local_url=f"{url}-local-{rank}", world=WorldLayout(world_size=WORLD, rank=rank)
    )
    return model, TorchState(model), ckpt


def save_steps(url: str, rank: int) -> None:
    model, parts, ckpt = _rank_state(url, rank)
    for step in (1, 2):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(step * 10 + rank)
        parts.save(ckpt, step).wait()
    ckpt.close()


def main() -> None:
    rank, init_file, url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    model, parts, ckpt = _rank_state(url, rank)
    step = parts.restore(ckpt)
    print(f"restored {step} {model.bias[0].item():.0f}", flush=True)
    ckpt.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
