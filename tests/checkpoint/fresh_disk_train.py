"""One attempt of the e2e test's numpy training loop, on whatever disk its environment names.

``python fresh_disk_train.py TOTAL OUT [--stop-at N] [--durable-at A,B] [--local-at C,D]
[--crash-at N]`` restores the newest checkpoint (``Checkpointer()``: the durable URL from
``$SPOTHOP_CHECKPOINT_URL``, the local snapshots under ``$SPOTHOP_HOME``), trains with
:func:`tests.jobs.e2e.numpy_train.step_once`, saves durably or locally after the listed steps,
and after step ``--stop-at`` takes the final-notice path of ``numpy_train.train``
(:func:`~spothop.checkpoint.preemption.due` says STOP, an emergency save through
:func:`~spothop.checkpoint.preemption.emergency_save`, exit 75). ``--crash-at`` leaves at once
after that step (exit 3, nothing saved: a process the instance's loss killed). Otherwise it
writes the final weights' bytes to OUT. Its first line of output is ``starting at step N``.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

from spothop.checkpoint import Checkpointer, Tier, preemption
from tests.jobs.e2e.numpy_train import fresh, step_once


def steps_of(args: list[str], flag: str) -> set[int]:
    if flag not in args:
        return set()
    return {int(s) for s in args[args.index(flag) + 1].split(",") if s}


def one_of(args: list[str], flag: str) -> int | None:
    return int(args[args.index(flag) + 1]) if flag in args else None


def attempt(total: int, args: list[str]) -> tuple[Any, int]:
    """Train from the newest checkpoint to ``total`` unless a stop or crash step comes first."""
    stop_at, crash_at = one_of(args, "--stop-at"), one_of(args, "--crash-at")
    durable_at, local_at = steps_of(args, "--durable-at"), steps_of(args, "--local-at")
    ckpt = Checkpointer()
    restored = ckpt.restore()
    state, step = (dict(restored.state), restored.step) if restored else (fresh(), 0)
    print(f"starting at step {step}", flush=True)
    while step < total:
        step_once(state)
        step += 1
        if step in durable_at:
            ckpt.save(state, step).wait()
        if step in local_at:
            ckpt.save(state, step, tier=Tier.LOCAL).wait()
        if step == crash_at:
            os._exit(3)
        noticed = step == stop_at  # the agent's final notice, at a chosen step
        reason = preemption.due(
            ckpt, stop_requested=functools.partial(bool, noticed), periodic=lambda: False
        )
        if reason is preemption.Reason.STOP:
            save = functools.partial(ckpt.save, state, step, tier="emergency")
            raise preemption.emergency_save(ckpt, step, save)
    ckpt.close()
    return state["w"], step


if __name__ == "__main__":
    weights, _ = attempt(int(sys.argv[1]), sys.argv[3:])
    Path(sys.argv[2]).write_bytes(weights.tobytes())
