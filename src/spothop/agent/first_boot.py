"""The first boot of an instance type: measure what its GPUs really deliver, once.

Before the worker starts (so the two do not compete for the GPUs), the agent
runs ``spothop probe --record CLOUD/TYPE --if-unmeasured`` in a child process:
the probe imports PyTorch, which the agent itself must never do. The figure
is cached per (cloud, instance type) in the measured-figures store, and the
catalog ranks offerings by it from then on. Machines without an NVIDIA GPU
are not probed (a CPU figure must never stand in for a GPU's).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("spothop.agent")

PROBE_BUDGET_S = 60.0  # the probe's own cap (issue K: at most 60 s)
PROBE_TIMEOUT_S = PROBE_BUDGET_S + 60.0  # start-up of torch and CUDA on top of the budget


@dataclass(frozen=True)
class ProbeOutcome:
    ran: bool
    reason: str
    duration_s: float = 0.0


Runner = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


def _run(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)


def has_nvidia_gpu(which: Callable[[str], str | None] = shutil.which) -> bool:
    return which("nvidia-smi") is not None


def probe_first_boot(
    cloud: str,
    instance_type: str,
    *,
    runner: Runner = _run,
    gpu_present: Callable[[], bool] = has_nvidia_gpu,
) -> ProbeOutcome:
    """Probe and record ``cloud/instance_type`` unless it is measured already; never raises."""
    if not cloud or not instance_type:
        return ProbeOutcome(False, "cloud or instance type unknown")
    if not gpu_present():
        return ProbeOutcome(False, "no NVIDIA GPU on this machine")
    command = [
        sys.executable,
        "-m",
        "spothop.cli.main",
        "probe",
        "--record",
        f"{cloud}/{instance_type}",
        "--if-unmeasured",
        "--budget-s",
        str(PROBE_BUDGET_S),
        "--json",
    ]
    started = time.monotonic()
    try:
        done = runner(command, PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ProbeOutcome(False, f"probe failed to run: {exc}", time.monotonic() - started)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
        return ProbeOutcome(False, f"probe exited {done.returncode}: {tail[0]}", elapsed)
    return ProbeOutcome(True, "recorded" if done.stdout.strip() else "measured already", elapsed)
