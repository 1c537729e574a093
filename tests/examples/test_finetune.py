"""The LoRA fine-tune: preempted three times under the agent, its final adapter bit-identical.

Each run is the agent's worker on a local-cloud instance. After the run has
trained a few steps, the instance gets its cloud's final notice: the worker
saves an emergency delta of the adapter (the base model is rebuilt from its
seed, so only LoRA weights, optimizer, schedule, sampler and RNG are saved),
exits 75, and the next instance resumes from it. The fourth run finishes;
its adapter's bytes equal an uninterrupted run's. The instances share nothing
with the test but the network and a bucket (the script and the checkpoints).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("transformers")


from spothop.agent import EXIT_PREEMPTED, read_events
from spothop.checkpoint import list_checkpoints
from spothop.providers.base import InstanceState
from tests.agent.shared_nothing import STATE_ROOT, Cloud, shared_nothing
from tests.conftest import PROJECT_ROOT
from tests.examples.conftest import EXAMPLES
from tests.waiting import wait_for

SCRIPT = EXAMPLES / "finetune" / "finetune.py"
STEPS = 150  # at STEP_SLEEP_S each, a run lasts well past the notice
STEP_SLEEP_S = 0.05
LEAD_S = 6.0
PREEMPTIONS = 3
PLACE = ("g2-standard-4", "us-central1", "us-central1-a")


def preempted_run(cloud: Cloud, run: int, url: str) -> int:
    """One instance: train under the agent until a final notice; returns the step it saved."""
    code = cloud.bucket / "code"
    command = cloud.agent(
        "--poll-interval", "0.2", "--safety-margin", "1",
        "--state-dir", f"{STATE_ROOT}/run-{run}", "--job-id", "finetune",
        "--assumed-lead", str(LEAD_S - 1), "--cloud", "gcp-sim", "--checkpoint-url", url,
        worker=[
            "python", str(code / SCRIPT.name), "--steps", str(STEPS),
            "--step-sleep", str(STEP_SLEEP_S), "--out", str(cloud.bucket / "never.safetensors"),
        ],
    )  # fmt: skip
    provider = cloud.provider("gcp-sim")
    instance = cloud.launch("gcp-sim", PLACE, "finetune", command)
    state_dir = cloud.on_instance(instance, f"{STATE_ROOT}/run-{run}")
    try:
        # The worker trains and has asked the agent for stop requests instead of SIGTERM.
        started = wait_for(
            lambda: (state_dir / "control" / "stop-callback").exists(), 90, what="training started"
        )
        assert started, cloud.console(instance)
        provider.preempt(instance.instance_id, LEAD_S)
        provider.wait(instance.instance_id, [InstanceState.PREEMPTED], 60)
    finally:
        provider.terminate(instance.instance_id)
    row = provider.store.instance(instance.instance_id)
    assert row is not None and row["exit_code"] == EXIT_PREEMPTED, cloud.console(instance)
    [record] = read_events(state_dir, "interruption")
    assert record["saved"] == "saved"
    return int(record["saved_detail"]["step"])


def train_in_a_clean_env(out: Path, *options: str) -> tuple[bytes, int]:
    """The adapter's bytes and the step resumed from, of ``finetune.py`` run to STEPS in a child
    whose environment is as clean as an instance's (none of this machine's BLAS settings: the
    preempted runs' steps ran in such an environment, so the rest and the reference must)."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PROJECT_ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", str(STEPS), "--out", str(out), *options],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return out.read_bytes(), int(done.stdout.split("(resumed from ")[1].split(")")[0])


def test_three_preemptions_leave_the_adapter_bit_identical_to_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    with shared_nothing(tmp_path) as cloud:
        cloud.ship(SCRIPT)
        url = str(cloud.bucket / "ckpt")
        saved = [preempted_run(cloud, run, url) for run in range(PREEMPTIONS)]
    assert saved == sorted(set(saved)) and saved[0] > 0 and saved[-1] < STEPS  # each run went on
    emergency = sorted(
        i.step for i in list_checkpoints(url) if i.status == "committed" and i.tier == "emergency"
    )
    assert saved[-1] in emergency
    assert not (cloud.bucket / "never.safetensors").exists()  # no preempted run finished

    resumed, resumed_from = train_in_a_clean_env(tmp_path / "resumed", "--checkpoint-url", url)
    reference, _ = train_in_a_clean_env(tmp_path / "reference")
    assert resumed_from == saved[-1]
    assert resumed == reference
