"""The worker SDK: no-ops without an agent; the control folder's contract with one."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest

from spothop.agent.control import ControlDir
from spothop.worker import channel, sdk


@pytest.fixture
def agent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ControlDir:
    directory = ControlDir(tmp_path / "control")
    monkeypatch.setenv(sdk.AGENT_DIR_ENV, str(directory.path))
    monkeypatch.setattr(sdk, "_checkpoint_seen", 0)
    monkeypatch.setattr(sdk, "_callbacks", [])
    monkeypatch.setattr(sdk, "_watcher", None)
    return directory


def test_without_an_agent_everything_is_a_harmless_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sdk.AGENT_DIR_ENV, raising=False)
    assert not sdk.under_agent() and not sdk.stop_requested() and not sdk.checkpoint_requested()
    assert sdk.seconds_left() == math.inf
    sdk.heartbeat()
    sdk.saved(step=1)
    sdk.on_stop(lambda: None)


def test_stop_deadline_saved_and_heartbeat_go_through_the_control_folder(
    agent_dir: ControlDir,
) -> None:
    assert not sdk.stop_requested() and sdk.seconds_left() == math.inf
    agent_dir.request_stop(time.time() + 20, "aws:instance-action", {})
    assert sdk.stop_requested()
    assert 15 < sdk.seconds_left() <= 20
    assert agent_dir.saved() is None
    sdk.saved(step=7, path="ckpt/7")
    assert agent_dir.saved() is not None and agent_dir.saved()["step"] == 7  # type: ignore[index]
    sdk.heartbeat()
    assert agent_dir.worker_heartbeat() == pytest.approx(time.time(), abs=5)


def test_checkpoint_requested_is_true_once_per_request(agent_dir: ControlDir) -> None:
    assert not sdk.checkpoint_requested()
    agent_dir.request_checkpoint("aws:rebalance-recommendation")
    assert sdk.checkpoint_requested()
    assert not sdk.checkpoint_requested()
    agent_dir.request_checkpoint("gcp:maintenance-event")
    assert sdk.checkpoint_requested()


def test_on_stop_runs_the_callback_and_tells_the_agent_not_to_signal(agent_dir: ControlDir) -> None:
    called = threading.Event()
    sdk.on_stop(called.set)
    assert agent_dir.callback_mode()
    agent_dir.request_stop(time.time() + 5, "gcp:preempted", {})
    assert called.wait(5)


def test_the_sdk_reads_what_the_agent_writes_through_the_one_channel_module(
    agent_dir: ControlDir,
) -> None:
    agent_dir.request_checkpoint("r")
    assert channel.read_json(agent_dir.path / channel.CHECKPOINT_FILE) == {"seq": 1, "reason": "r"}
    assert sdk.AGENT_DIR_ENV is channel.AGENT_DIR_ENV and sdk.STOP_FILE is channel.STOP_FILE
