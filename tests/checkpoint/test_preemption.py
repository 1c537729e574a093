"""When a step saves under the agent, and what a final notice does; the agent's side is its real control folder."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from spothop.agent.control import ControlDir
from spothop.checkpoint import Checkpointer, FixedInterval, Tier, list_checkpoints, preemption
from spothop.checkpoint.preemption import Reason


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ControlDir:
    folder = ControlDir(tmp_path / "agent")
    monkeypatch.setenv("SPOTHOP_AGENT_DIR", str(folder.path))
    return folder


def test_outside_an_agent_only_the_interval_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPOTHOP_AGENT_DIR", raising=False)
    clock = [0.0]
    ckpt = Checkpointer(str(tmp_path), interval=FixedInterval(60), clock=lambda: clock[0])
    assert preemption.due(ckpt) is None
    clock[0] = 61
    assert preemption.due(ckpt) is Reason.INTERVAL


def test_a_stop_outranks_an_advance_notice_which_outranks_the_interval(
    tmp_path: Path, control: ControlDir
) -> None:
    clock = [0.0]
    ckpt = Checkpointer(str(tmp_path), interval=FixedInterval(60), clock=lambda: clock[0])
    control.request_checkpoint("rebalance")
    assert preemption.due(ckpt) is Reason.ADVANCE_NOTICE
    assert preemption.due(ckpt) is None  # one save per notice
    clock[0] = 61
    control.request_checkpoint("rebalance again")
    control.request_stop(time.time() + 30, "interruption", {})
    assert preemption.due(ckpt) is Reason.STOP


def test_a_saved_emergency_checkpoint_is_reported_to_the_agent(
    tmp_path: Path, control: ControlDir
) -> None:
    ckpt = Checkpointer(str(tmp_path / "ckpt"))
    ckpt.save({"w": np.zeros(100)}, 1).wait()
    control.request_stop(time.time() + 30, "interruption", {})
    handles = []
    stop = preemption.emergency_save(
        ckpt,
        2,
        lambda: (
            handles.append(ckpt.save({"w": np.ones(100)}, 2, tier=Tier.EMERGENCY)) or handles[0]
        ),
    )
    assert stop.code == 75 and stop.step == 2 and stop.checkpoint_id == handles[0].checkpoint_id
    said = control.saved()
    assert said is not None and said["step"] == 2 and said["tier"] == "emergency"
    assert [i.tier for i in list_checkpoints(str(tmp_path / "ckpt"))] == ["durable", "emergency"]


@pytest.mark.parametrize("where", ["under-a-file", "is-a-file"])
def test_a_failed_emergency_save_is_not_reported_as_saved(
    tmp_path: Path, control: ControlDir, where: str
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    ckpt = Checkpointer(str(blocker / "ckpt") if where == "under-a-file" else str(blocker))
    control.request_stop(time.time() + 30, "interruption", {})
    stop = preemption.emergency_save(
        ckpt, 3, lambda: ckpt.save({"w": np.ones(10)}, 3, tier=Tier.EMERGENCY)
    )
    assert (
        stop.code == 75 and stop.checkpoint_id is None
    )  # still resumable, from an older checkpoint
    assert (
        control.saved() is None
    )  # the agent waits out its budget instead of trusting a save that failed


def test_a_file_given_as_the_checkpoint_folder_is_a_clear_error(tmp_path: Path) -> None:
    from spothop.checkpoint import CheckpointConfigError

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(CheckpointConfigError, match="is a file, not a folder"):
        list_checkpoints(str(blocker))


def test_listening_asks_the_agent_for_requests_instead_of_sigterm(
    control: ControlDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preemption, "_listening", False)
    assert not control.callback_mode()
    preemption.listen()
    assert control.callback_mode()


def test_the_agents_checkpoint_url_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTHOP_CHECKPOINT_URL", str(tmp_path / "from-agent"))
    ckpt = Checkpointer()
    ckpt.save({"w": np.arange(3)}, 1).wait()
    assert [i.step for i in list_checkpoints(str(tmp_path / "from-agent"))] == [1]
    monkeypatch.delenv("SPOTHOP_CHECKPOINT_URL")
    assert "from-agent" not in Checkpointer().durable.url
