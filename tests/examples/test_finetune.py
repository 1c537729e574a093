"""The LoRA fine-tune: preempted three times under the agent, its final adapter bit-identical.

Each run is the agent's worker on a local-cloud instance. After the run has
trained a few steps, the instance gets its cloud's final notice: the worker
saves an emergency delta of the adapter (the base model is rebuilt from its
seed, so only LoRA weights, optimizer, schedule, sampler and RNG are saved),
exits 75, and the next instance resumes from it. The fourth run finishes;
its adapter's bytes equal an uninterrupted run's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("transformers")

from examples.finetune import finetune

from spothop.agent import EXIT_PREEMPTED, read_events
from spothop.checkpoint import list_checkpoints
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.examples.conftest import EXAMPLES
from tests.waiting import wait_for

SCRIPT = str(EXAMPLES / "finetune" / "finetune.py")
STEPS = 150  # at STEP_SLEEP_S each, a run lasts well past the notice
STEP_SLEEP_S = 0.05
LEAD_S = 6.0
PREEMPTIONS = 3


def preempted_run(tmp_path: Path, run: int, url: str) -> int:
    """One instance: train under the agent until a final notice; returns the step it saved."""
    state_dir = tmp_path / f"agent-{run}"
    command = [
        sys.executable, "-m", "spothop.agent", "run",
        "--poll-interval", "0.2", "--safety-margin", "1",
        "--state-dir", str(state_dir), "--assumed-lead", str(LEAD_S - 1),
        "--cloud", "gcp-sim", "--checkpoint-url", url,
        "--",
        sys.executable, SCRIPT, "--steps", str(STEPS), "--step-sleep", str(STEP_SLEEP_S),
        "--out", str(tmp_path / "never.safetensors"),
    ]  # fmt: skip
    provider = LocalProvider("gcp-sim", world=load_world())
    instance = provider.launch(
        LaunchRequest(
            instance_type="g2-standard-4",
            region="us-central1",
            zone="us-central1-a",
            bootstrap_command=command,
        )
    )
    try:
        # The worker trains and has asked the agent for stop requests instead of SIGTERM.
        wait_for(
            lambda: (state_dir / "control" / "stop-callback").exists(), 90, what="training started"
        )
        provider.preempt(instance.instance_id, LEAD_S)
        provider.wait(instance.instance_id, [InstanceState.PREEMPTED], 60)
    finally:
        provider.terminate(instance.instance_id)
    row = provider.store.instance(instance.instance_id)
    assert row is not None and row["exit_code"] == EXIT_PREEMPTED
    [record] = read_events(state_dir, "interruption")
    assert record["saved"] == "saved"
    return int(record["saved_detail"]["step"])


def test_three_preemptions_leave_the_adapter_bit_identical_to_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    url = str(tmp_path / "ckpt")
    saved = [preempted_run(tmp_path, run, url) for run in range(PREEMPTIONS)]
    assert saved == sorted(set(saved)) and saved[0] > 0 and saved[-1] < STEPS  # each run went on
    emergency = sorted(
        i.step for i in list_checkpoints(url) if i.status == "committed" and i.tier == "emergency"
    )
    assert saved[-1] in emergency
    assert not (tmp_path / "never.safetensors").exists()  # no preempted run finished

    resumed, resumed_from = finetune.train(url, STEPS)
    reference, _ = finetune.train(None, STEPS)
    assert resumed_from == saved[-1]
    assert resumed == reference


def test_a_checkpoint_holds_the_adapter_not_the_base_model(tmp_path: Path) -> None:
    url = str(tmp_path / "ckpt")
    finetune.train(url, 10, save_every=5)
    [*_, newest] = [i for i in list_checkpoints(url) if i.status == "committed"]
    model = finetune.build_model()
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    adapter = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    # The adapter, its two AdamW moments and a little more; the frozen base is not in it.
    assert newest.size_bytes < 4 * adapter < total
