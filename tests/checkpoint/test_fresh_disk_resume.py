"""A job preempted again and again resumes exactly when every instance has a disk of its own.

Each attempt is a child process (:mod:`tests.checkpoint.fresh_disk_train`: the e2e test's numpy
loop and its final-notice path) whose ``HOME`` and ``SPOTHOP_HOME``, hence its local snapshot
tier, are new unless the scenario says the instances share a disk; only the durable checkpoint
URL is common. The final weights must be byte-identical to an uninterrupted run's, computed by
the same script in a child of the same environment (the same BLAS kernels: see "Exact resume"
in docs/checkpoint.md), and each attempt must start at the step the rules say.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spothop.checkpoint import Checkpointer, NoValidCheckpoint, Tier, list_checkpoints
from spothop.checkpoint.store import Store
from tests.checkpoint import fresh_disk_train
from tests.jobs.e2e import numpy_train

SCRIPT = Path(fresh_disk_train.__file__)
ROOT = SCRIPT.parents[2]
TOTAL = 40
PREEMPTED = 75

# (arguments of each attempt, the step it must start at), per scenario.
EMERGENCY_ONLY = [  # the e2e worker: no durable save ever, an emergency save at each notice
    (["--stop-at", "8"], 0),
    (["--stop-at", "18"], 8),
    (["--stop-at", "26"], 18),
    ([], 26),
]
MIXED_FRESH = [  # every tier; the local snapshot at 12 is lost with its disk
    (["--durable-at", "5", "--local-at", "7", "--stop-at", "9"], 0),
    (["--local-at", "12", "--crash-at", "14"], 9),
    (["--durable-at", "20", "--stop-at", "22"], 9),
    ([], 22),
]
MIXED_SHARED = [  # the same on one disk: the local snapshot at 12 is the newest after the crash
    (MIXED_FRESH[0][0], 0),
    (MIXED_FRESH[1][0], 9),
    (MIXED_FRESH[2][0], 12),
    ([], 22),
]


def run_attempt(
    tmp_path: Path, disk: str, ckpt: Path, args: list[str], out: Path
) -> tuple[int, str]:
    """One attempt on the disk named ``disk``; its exit code and output."""
    home = tmp_path / disk
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SPOTHOP_")},
        "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}",
        "HOME": str(home),
        "SPOTHOP_HOME": str(home / ".spothop"),
        "SPOTHOP_CHECKPOINT_URL": str(ckpt),
    }
    child = subprocess.run(
        [sys.executable, str(SCRIPT), str(TOTAL), str(out), *args],
        env=env,
        cwd=home.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return child.returncode, child.stdout + child.stderr


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """An uninterrupted run's final weights, computed in a child like the attempts."""
    tmp = tmp_path_factory.mktemp("reference")
    out = tmp / "final.bin"
    code, text = run_attempt(tmp, "disk", tmp / "ckpt", [], out)
    assert code == 0, text
    assert "starting at step 0" in text
    return out.read_bytes()


@pytest.mark.parametrize(
    ("scenario", "shared_disk"),
    [(EMERGENCY_ONLY, False), (MIXED_FRESH, False), (MIXED_SHARED, True), (EMERGENCY_ONLY, True)],
    ids=[
        "emergency-only-fresh-disks",
        "all-tiers-fresh-disks",
        "all-tiers-one-disk",
        "emergency-only-one-disk",
    ],
)
def test_preempted_attempts_resume_bit_identical(
    tmp_path: Path,
    reference: bytes,
    scenario: list[tuple[list[str], int]],
    shared_disk: bool,
) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "final.bin"
    for n, (args, start) in enumerate(scenario):
        disk = "disk" if shared_disk else f"disk-{n}"
        code, text = run_attempt(tmp_path, disk, ckpt, args, out)
        assert f"starting at step {start}\n" in text, text
        last = n == len(scenario) - 1
        assert code == (0 if last else 3 if "--crash-at" in args else PREEMPTED), text
    assert out.read_bytes() == reference
    # Only the durable store travels between disks: the emergency saves are there.
    tiers = [c.tier for c in list_checkpoints(str(ckpt))]
    assert "emergency" in tiers


def test_an_emergency_delta_whose_base_is_gone_is_refused_not_resolved_elsewhere(
    tmp_path: Path,
) -> None:
    """The second emergency delta builds on the first (restored from the durable store); with
    the first gone from there, a fresh disk restores neither: a clear refusal, never a guess."""
    ckpt = str(tmp_path / "ckpt")
    state = numpy_train.fresh()
    first = Checkpointer(ckpt, local_url=str(tmp_path / "disk-0"))
    first.save(state, 8, tier=Tier.EMERGENCY).wait()
    first.close()
    second = Checkpointer(ckpt, local_url=str(tmp_path / "disk-1"))
    restored = second.restore()
    assert restored is not None and restored.step == 8
    numpy_train.step_once(state)
    delta = second.save(state, 9, tier=Tier.EMERGENCY).wait()
    second.close()
    assert delta.parent == restored.manifest.checkpoint_id
    # The base's copy on the old disk's local tier does not count: only the durable store travels.
    Store(ckpt).remove(restored.manifest.checkpoint_id)
    third = Checkpointer(ckpt, local_url=str(tmp_path / "disk-2"))
    with pytest.raises(NoValidCheckpoint, match="parent"):
        third.restore()
    third.close()
