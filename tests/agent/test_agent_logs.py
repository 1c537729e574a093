"""The agent ships its worker's output: an attempt's agent (SPOTHOP_ATTEMPT_ID set) sends
``<state-dir>/worker.log`` to its control plane, all of it by its exit, also after a preemption;
an agent run for no attempt ships nothing."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from spothop.agent import EXIT_DONE, EXIT_PREEMPTED, Agent, EmbeddedControlPlane, NoControlPlane
from spothop.agent.model import final_notice
from spothop.db import shared_engine
from spothop.state.worker_logs import read_after
from spothop.wire.logs import ATTEMPT_ID_ENV, NODE_RANK_ENV, LogChunk, worker_log_path
from tests.agent.fakes import ListReleaser
from tests.agent.test_agent import WORKER, ScriptedWatcher, _config


class Recording(NoControlPlane):
    """No control plane, but every log chunk kept."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[LogChunk] = []

    def ship_log(self, chunk: LogChunk) -> None:
        self.chunks.append(chunk)


def test_the_workers_output_reaches_the_embedded_store_by_the_agents_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ATTEMPT_ID_ENV, "a-7")
    monkeypatch.setenv(NODE_RANK_ENV, "1")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    agent = Agent(
        _config(tmp_path, ["sh", "-c", "echo step 1; echo step 2"], job_id="job-1"),
        plane=EmbeddedControlPlane(url, "i-test"),
    )
    assert agent.run() == EXIT_DONE
    with shared_engine(url).connect() as conn:
        assert read_after(conn, "job-1", "a-7") == (0, b"step 1\nstep 2\n")
    assert worker_log_path(agent.config.state_dir).read_bytes() == b"step 1\nstep 2\n"


def test_a_preempted_agent_ships_the_rest_after_the_emergency_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ATTEMPT_ID_ENV, "a-8")
    notice = final_notice(
        "aws",
        "instance-action",
        seen_at=time.time(),
        deadline=time.time() + 30,
        documented_lead_s=120,
    )
    plane = Recording()
    worker = 'echo "training ✓"; exec "$1" "$2" "$3" callback'
    agent = Agent(
        _config(
            tmp_path,
            ["sh", "-c", worker, "sh", sys.executable, WORKER, str(tmp_path)],
            safety_margin_s=1,
        ),
        watcher=ScriptedWatcher(tmp_path / "started", [notice]),
        releaser=ListReleaser(),
        plane=plane,
    )
    assert agent.run() == EXIT_PREEMPTED
    shipped = b"".join(c.raw() for c in plane.chunks)
    offsets = [c.offset_bytes for c in plane.chunks]
    assert shipped == worker_log_path(agent.config.state_dir).read_bytes()
    assert shipped.startswith("training ✓\n".encode())
    assert offsets == sorted(set(offsets)) and {c.attempt_id for c in plane.chunks} == {"a-8"}


def test_an_agent_for_no_attempt_ships_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ATTEMPT_ID_ENV, raising=False)
    plane = Recording()
    agent = Agent(_config(tmp_path, ["sh", "-c", "echo hi"]), plane=plane)
    assert agent.run() == EXIT_DONE and agent.shipper is None and plane.chunks == []
