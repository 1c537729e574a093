"""End to end: a real training process under a real agent on a local-cloud instance, preempted.

The agent is the instance's bootstrap command; its worker is a PyTorch training
run that checkpoints through ``TorchState.checkpoint_step``. A final notice from
the instance's metadata endpoint becomes the agent's stop request; the worker
saves an emergency checkpoint, tells the agent, and exits 75; the agent records
the save and exits 75 before the host's kill. A new run resumes from that
checkpoint and ends bit-identical to a run that was never interrupted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from spothop.agent import EXIT_PREEMPTED, read_events
from spothop.checkpoint import list_checkpoints
from spothop.providers.base import InstanceState
from tests.agent.shared_nothing import STATE_ROOT, shared_nothing
from tests.checkpoint import train_script
from tests.conftest import PROJECT_ROOT
from tests.providers.local.conftest import wait_for

TOTAL = 400  # steps; at STEP_SLEEP_S each the run lasts well past the notice
STEP_SLEEP_S = 0.05
LEAD_S = 6.0
SCRIPT = Path(train_script.__file__)
PLACE = ("g2-standard-4", "us-central1", "us-central1-a")


def train_in_a_clean_env(url: str, out: Path) -> tuple[bytes, int]:
    """The final parameters' bytes and the step resumed from, of ``train_script`` run to TOTAL in a
    child whose environment is as clean as an instance's (no BLAS settings of this machine's: the
    emergency checkpoint's steps ran in such an environment, so the rest and the reference must)."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PROJECT_ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), url, str(TOTAL), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out.read_bytes(), int(done.stdout.split("resumed from ")[1].split()[0])


def test_a_preempted_training_run_saves_exits_75_and_resumes_bit_identical(
    tmp_path: Path,
) -> None:
    with shared_nothing(tmp_path) as cloud:
        code = cloud.ship(SCRIPT)
        url = str(cloud.bucket / "ckpt")
        never = cloud.bucket / "never"
        command = cloud.agent(
            "--poll-interval", "0.2", "--safety-margin", "1",
            "--state-dir", f"{STATE_ROOT}/train", "--job-id", "train-1",
            "--assumed-lead", str(LEAD_S - 1), "--cloud", "gcp-sim", "--checkpoint-url", url,
            worker=[
                "python", str(code / SCRIPT.name), url, str(TOTAL), str(never),
                "--agent", "--step-sleep", str(STEP_SLEEP_S),
            ],
        )  # fmt: skip
        instance = cloud.launch("gcp-sim", PLACE, "train-1", command)
        provider = cloud.provider("gcp-sim")
        state_dir = cloud.on_instance(instance, f"{STATE_ROOT}/train")
        # The worker trains and has asked the agent for stop requests instead of SIGTERM.
        started = wait_for(lambda: (state_dir / "control" / "stop-callback").exists(), 90)
        assert started, cloud.console(instance)
        provider.preempt(instance.instance_id, LEAD_S)
        provider.wait(instance.instance_id, [InstanceState.PREEMPTED], 30)
        row = provider.store.instance(instance.instance_id)
        assert row is not None and row["exit_code"] == EXIT_PREEMPTED, cloud.console(instance)
        [record] = read_events(state_dir, "interruption")
    assert record["saved"] == "saved" and record["protocol"] == "gcp"
    step = record["saved_detail"]["step"]
    assert 0 < step < TOTAL and not never.exists()
    [emergency] = [
        i for i in list_checkpoints(url) if i.status == "committed" and i.tier == "emergency"
    ]
    assert (
        emergency.step == step
        and emergency.checkpoint_id == record["saved_detail"]["checkpoint_id"]
    )
    resumed, resumed_from = train_in_a_clean_env(url, tmp_path / "resumed")
    assert resumed_from == step
    reference, _ = train_in_a_clean_env("", tmp_path / "reference")
    assert resumed == reference
