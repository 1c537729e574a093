"""A tiny deterministic training loop on the checkpoint library, light enough to restart in a second.

``python numpy_train.py TOTAL OUT [--step-sleep S]``: linear regression by SGD with
momentum on a fixed dataset, its minibatch order drawn from a seeded numpy
generator whose state is checkpointed with the weights (so a resumed run draws
what an uninterrupted one would). Under the spothop agent it checkpoints to
``$SPOTHOP_CHECKPOINT_URL``: on a final notice it saves an emergency checkpoint,
tells the agent, and exits 75 (:mod:`spothop.checkpoint.preemption`). On the
last step it writes the final weights' bytes to OUT and exits 0.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from spothop.checkpoint import Checkpointer, preemption
from spothop.worker import sdk

SAMPLES, FEATURES, BATCH = 64, 8, 8


def fresh() -> dict[str, Any]:
    data = np.random.default_rng(1)
    return {
        "w": np.zeros(FEATURES),
        "velocity": np.zeros(FEATURES),
        "rng": np.random.default_rng(7).bit_generator.state,
        "x": data.standard_normal((SAMPLES, FEATURES)),
        "y": data.standard_normal(SAMPLES),
    }


def step_once(state: dict[str, Any]) -> None:
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    rows = rng.choice(SAMPLES, BATCH, replace=False)
    x, y = state["x"][rows], state["y"][rows]
    # Sums, not BLAS products: OpenBLAS picks its kernels by the CPU and the environment
    # (OPENBLAS_CORETYPE), and an instance's environment is its own, so `@` could round
    # differently there than in the test's reference run.
    residual = (x * state["w"]).sum(axis=1) - y
    grad = 2 * (x * residual[:, None]).sum(axis=0) / BATCH
    state["velocity"] = 0.9 * state["velocity"] + grad
    state["w"] = state["w"] - 0.01 * state["velocity"]
    state["rng"] = rng.bit_generator.state


def train(total: int, ckpt: Checkpointer | None = None, step_sleep_s: float = 0.0) -> np.ndarray:
    state, step = fresh(), 0
    if ckpt is not None:
        restored = ckpt.restore()
        if restored is not None:
            state, step = dict(restored.state), restored.step
    print(
        f"starting at step {step}", flush=True
    )  # what `spothop logs` shows, attempt after attempt
    while step < total:
        step_once(state)
        step += 1
        time.sleep(step_sleep_s)
        if step % 20 == 0:
            sdk.heartbeat(step=step)  # what `spothop status` shows as the task's progress
        if ckpt is not None:
            preemption.listen()
            reason = preemption.due(ckpt, periodic=lambda: False)
            if reason is preemption.Reason.STOP:
                save = functools.partial(ckpt.save, state, step, tier="emergency")
                raise preemption.emergency_save(ckpt, step, save)
            if reason is not None:
                ckpt.save(state, step).wait()
    return np.asarray(state["w"])


if __name__ == "__main__":
    args = sys.argv[1:]
    sleep = float(args[args.index("--step-sleep") + 1]) if "--step-sleep" in args else 0.0
    checkpointer = Checkpointer()  # the URL from $SPOTHOP_CHECKPOINT_URL, set by the agent
    final = train(int(args[0]), checkpointer, sleep)
    checkpointer.close()
    Path(args[1]).write_bytes(final.tobytes())
