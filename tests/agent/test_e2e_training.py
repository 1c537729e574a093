"""End to end: a real training process under a real agent on a local-cloud instance, preempted.

The agent is the instance's bootstrap command; its worker is a PyTorch training
run that checkpoints through ``TorchState.checkpoint_step``. A final notice from
the instance's metadata endpoint becomes the agent's stop request; the worker
saves an emergency checkpoint, tells the agent, and exits 75; the agent records
the save and exits 75 before the host's kill. A new run resumes from that
checkpoint and ends bit-identical to a run that was never interrupted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from spothop.agent import EXIT_PREEMPTED, read_events
from spothop.checkpoint import list_checkpoints
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.checkpoint import train_script
from tests.conftest import PROJECT_ROOT
from tests.providers.local.conftest import wait_for

TOTAL = 400  # steps; at STEP_SLEEP_S each the run lasts well past the notice
STEP_SLEEP_S = 0.05
LEAD_S = 6.0
SCRIPT = str(Path(train_script.__file__))


def test_a_preempted_training_run_saves_exits_75_and_resumes_bit_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
    url = str(tmp_path / "ckpt")
    state_dir = tmp_path / "agent"
    command = [
        sys.executable,
        "-m",
        "spothop.agent",
        "run",
        "--poll-interval",
        "0.2",
        "--safety-margin",
        "1",
        "--state-dir",
        str(state_dir),
        "--assumed-lead",
        str(LEAD_S - 1),
        "--cloud",
        "gcp-sim",
        "--checkpoint-url",
        url,
        "--",
        sys.executable,
        SCRIPT,
        url,
        str(TOTAL),
        str(tmp_path / "never"),
        "--agent",
        "--step-sleep",
        str(STEP_SLEEP_S),
    ]
    provider = LocalProvider("gcp-sim", world=load_world())
    instance = provider.launch(
        LaunchRequest(
            instance_type="g2-standard-4",
            region="us-central1",
            zone="us-central1-a",
            bootstrap_command=command,
            env={"PYTHONPATH": f"{PROJECT_ROOT}:{PROJECT_ROOT / 'src'}"},
        )
    )
    try:
        # The worker trains and has asked the agent for stop requests instead of SIGTERM.
        wait_for(lambda: (state_dir / "control" / "stop-callback").exists(), timeout_s=60)
        provider.preempt(instance.instance_id, LEAD_S)
        provider.wait(instance.instance_id, [InstanceState.PREEMPTED], 30)
    finally:
        provider.terminate(instance.instance_id)
    row = provider.store.instance(instance.instance_id)
    assert row is not None and row["exit_code"] == EXIT_PREEMPTED  # the agent's, before the kill
    [record] = read_events(state_dir, "interruption")
    assert record["saved"] == "saved" and record["protocol"] == "gcp"
    step = record["saved_detail"]["step"]
    assert 0 < step < TOTAL and not (tmp_path / "never").exists()
    [emergency] = [
        i for i in list_checkpoints(url) if i.status == "committed" and i.tier == "emergency"
    ]
    assert (
        emergency.step == step
        and emergency.checkpoint_id == record["saved_detail"]["checkpoint_id"]
    )
    resumed, resumed_from = train_script.train(url, TOTAL)
    assert resumed_from == step
    reference, _ = train_script.train(None, TOTAL)
    assert resumed.tobytes() == reference.tobytes()
