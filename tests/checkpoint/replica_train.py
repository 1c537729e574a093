"""The e2e tiny training loop (``tests/jobs/e2e/numpy_train.py``) with a durable save every
``EVERY`` steps, so its replicas hold a base before any notice.

``python replica_train.py TOTAL OUT [--step-sleep S]``: on a final notice it saves an emergency
delta against the last durable save and exits 75; on the last step it writes the weights to OUT.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs" / "e2e"))
import numpy_train

from spothop.checkpoint import Checkpointer, preemption

EVERY = 25


def main() -> None:
    args = sys.argv[1:]
    total, out = int(args[0]), Path(args[1])
    sleep = float(args[args.index("--step-sleep") + 1]) if "--step-sleep" in args else 0.0
    ckpt = Checkpointer()  # URL, replicas, provider and region: from the launcher's environment
    state, step = numpy_train.fresh(), 0
    restored = ckpt.restore()
    if restored is not None:
        state, step = dict(restored.state), restored.step
    print(f"starting at step {step}", flush=True)
    while step < total:
        numpy_train.step_once(state)
        step += 1
        time.sleep(sleep)
        preemption.listen()
        if preemption.due(ckpt, periodic=lambda: False) is preemption.Reason.STOP:
            save = functools.partial(ckpt.save, state, step, tier="emergency")
            raise preemption.emergency_save(ckpt, step, save)
        if step % EVERY == 0:
            ckpt.save(state, step).wait()
    ckpt.close()
    out.write_bytes(np.asarray(state["w"]).tobytes())


if __name__ == "__main__":
    main()
