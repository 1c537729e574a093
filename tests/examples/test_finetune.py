"""The LoRA fine-tune: preempted twice under the agent, its final adapter bit-identical.

Each run is the agent's worker on a local-cloud instance. After the run has
trained a few steps, the instance gets its cloud's final notice: the worker
saves an emergency delta of the adapter (the base model is rebuilt from its
seed, so only LoRA weights, optimizer, schedule, sampler and RNG are saved),
exits 75, and the next instance resumes from it. The third run finishes;
its adapter's bytes equal an uninterrupted run's. The instances share nothing
with the test but the network and a bucket (the script and the checkpoints).

Two preemptions, not three: the second run resumes from the first's emergency
checkpoint and is preempted in turn, so the third resumes from a checkpoint of a
resumed run, the chain a third preemption would only lengthen (each one more
agent run, its torch, transformers and peft imports and a notice's lead: the
slowest part of this test on a loaded machine). This fine-tune preempted many
more times under the real controller, its adapter bit-identical all the same, is
tests/e2e/test_chaos.py's (its stormy markets interrupt the trainer five to ten
times); three and more on two clouds, tests/jobs/e2e/test_training.py's numpy loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("transformers")


from spothop.agent import EXIT_PREEMPTED, read_events
from spothop.checkpoint import list_checkpoints
from spothop.providers.base import Instance, InstanceState
from tests.agent.shared_nothing import STATE_ROOT, Cloud, shared_nothing
from tests.conftest import PROJECT_ROOT
from tests.examples.conftest import EXAMPLES
from tests.waiting import wait_for

SCRIPT = EXAMPLES / "finetune" / "finetune.py"
STEPS = 150  # at STEP_SLEEP_S each, a run lasts well past the notice
STEP_SLEEP_S = 0.05
LEAD_S = 6.0
PREEMPTIONS = 2
PLACE = ("g2-standard-4", "us-central1", "us-central1-a")


@dataclass
class Preempted:
    """One preempted run: its instance (reclaimed at its notice's deadline) and the step it saved."""

    instance: Instance
    step: int
    checkpoint_id: str


def preempted_run(cloud: Cloud, run: int, url: str) -> Preempted:
    """One instance: train under the agent until a final notice; returns once its agent has
    recorded the interruption (the emergency checkpoint is committed before that record), so the
    next run starts while this instance waits out its notice's lead."""
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
    # The worker trains and has asked the agent for stop requests instead of SIGTERM.
    started = wait_for(
        lambda: (state_dir / "control" / "stop-callback").exists(), 90, what="training started"
    )
    assert started, cloud.console(instance)
    provider.preempt(instance.instance_id, LEAD_S)
    [record] = wait_for(
        lambda: read_events(state_dir, "interruption"), 60, what=f"run {run}'s interruption"
    )
    assert record["saved"] == "saved", cloud.console(instance)
    detail = record["saved_detail"]
    return Preempted(instance, int(detail["step"]), str(detail["checkpoint_id"]))


def clean_env_training(out: Path, *options: str) -> subprocess.Popen[str]:
    """``finetune.py`` run to STEPS (started, not awaited) in a child whose environment is as
    clean as an instance's (none of this machine's BLAS settings: the preempted runs' steps ran in
    such an environment, so the rest and the reference must)."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PROJECT_ROOT / "src")}
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), "--steps", str(STEPS), "--out", str(out), *options],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def trained(child: subprocess.Popen[str], out: Path) -> tuple[bytes, int]:
    """The adapter's bytes and the step resumed from, once ``child`` is done."""
    stdout, stderr = child.communicate(timeout=600)
    assert child.returncode == 0, stderr
    return out.read_bytes(), int(stdout.split("(resumed from ")[1].split(")")[0])


def test_two_preemptions_leave_the_adapter_bit_identical_to_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    # The uninterrupted reference trains meanwhile: it shares nothing with the preempted runs.
    reference_run = clean_env_training(tmp_path / "reference")
    try:
        with shared_nothing(tmp_path) as cloud:
            cloud.ship(SCRIPT)
            url = str(cloud.bucket / "ckpt")
            runs = [preempted_run(cloud, run, url) for run in range(PREEMPTIONS)]
            for run in runs:  # each agent exited resumable before its instance was reclaimed
                provider = cloud.provider(run.instance.provider)
                provider.wait(run.instance.instance_id, [InstanceState.PREEMPTED], 60)
                row = provider.store.instance(run.instance.instance_id)
                assert row is not None and row["exit_code"] == EXIT_PREEMPTED, cloud.console(
                    run.instance
                )
        saved = [run.step for run in runs]
        assert saved == sorted(set(saved)) and saved[0] > 0 and saved[-1] < STEPS  # each went on
        # The last run's record names the emergency checkpoint it saved, committed at its step.
        emergency = {
            i.checkpoint_id: i.step
            for i in list_checkpoints(url)
            if i.status == "committed" and i.tier == "emergency"
        }
        assert emergency.get(runs[-1].checkpoint_id) == saved[-1]
        assert not (cloud.bucket / "never.safetensors").exists()  # no preempted run finished

        resumed, resumed_from = trained(
            clean_env_training(tmp_path / "resumed", "--checkpoint-url", url), tmp_path / "resumed"
        )
        reference, _ = trained(reference_run, tmp_path / "reference")
    finally:
        if reference_run.poll() is None:
            reference_run.kill()
            reference_run.wait()
    assert resumed_from == saved[-1]
    assert resumed == reference
