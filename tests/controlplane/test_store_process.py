"""The embedded control plane's store process: restarted when it dies, bounded, timed out, gone with the agent."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spothop.agent import read_events
from spothop.agent.emergency import release_leases
from spothop.controlplane import EmbeddedControlPlane, Heartbeat, QueueLeases
from spothop.controlplane.embedded import StoreRefused
from spothop.queue import Shard, open_queue
from spothop.wire.errors import ControlPlaneError
from spothop.wire.events import WorkerStarted
from tests.agent.store_process import (
    agent_command,
    kill_quietly,
    store_processes,
    stored_beat,
)
from tests.waiting import process_running, scaled, wait_for


def _beat(state: str, at: float) -> Heartbeat:
    return Heartbeat("i-1", "w", at, state, 7, 0, None, False)


def _error(call: Callable[[], object]) -> str:
    """The ControlPlaneError ``call`` raised, as text; empty if it worked."""
    try:
        call()
    except ControlPlaneError as exc:
        return str(exc)
    return ""


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def plane(store_url: str) -> Iterator[EmbeddedControlPlane]:
    with EmbeddedControlPlane(store_url, "i-1", call_timeout_s=scaled(10)) as plane:
        yield plane


def test_a_killed_store_process_is_restarted_and_the_next_heartbeat_is_stored(
    plane: EmbeddedControlPlane, store_url: str
) -> None:
    plane.heartbeat(_beat("running", 1.0))
    first = plane.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: plane.restarts == 1 and plane.pid != first, what="a new store process")
    plane.heartbeat(_beat("preempting", 2.0))
    assert stored_beat(store_url, "i-1") == ("preempting", 2.0)
    assert not process_running(first)


def test_a_store_process_that_does_not_answer_is_timed_out_and_replaced(store_url: str) -> None:
    with EmbeddedControlPlane(store_url, "i-1", call_timeout_s=scaled(10)) as plane:
        plane.heartbeat(_beat("running", 1.0))
        stuck = plane.pid
        assert stuck is not None
        os.kill(stuck, signal.SIGSTOP)  # alive, but it will never answer
        plane.call_timeout_s = 0.5
        try:
            begun = time.monotonic()
            with pytest.raises(ControlPlaneError, match=r"did not answer heartbeat within 0\.5 s"):
                plane.heartbeat(_beat("running", 2.0))
            assert time.monotonic() - begun < scaled(5)
        finally:
            kill_quietly(stuck, signal.SIGCONT)
        wait_for(lambda: plane.restarts == 1 and plane.pid != stuck, what="a new store process")
        plane.call_timeout_s = scaled(10)
        plane.heartbeat(_beat("running", 3.0))
        assert stored_beat(store_url, "i-1") == ("running", 3.0)


def test_restarts_are_bounded_then_calls_fail_as_unreachable(store_url: str) -> None:
    with EmbeddedControlPlane(store_url, "i-1", max_restarts=1) as plane:
        plane.heartbeat(_beat("running", 1.0))
        first = plane.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: plane.pid not in (None, first), what="the one restart")
        second = plane.pid
        assert second is not None
        plane.heartbeat(_beat("running", 2.0))  # it has to be up before it is killed again
        os.kill(second, signal.SIGKILL)
        wait_for(lambda: not process_running(second), what="the second store process to die")
        wait_for(
            lambda: (
                "not restarting it again yet"
                in _error(lambda: plane.heartbeat(_beat("running", 3.0)))
            ),
            what="the plane to give up",
        )  # the calls racing the death fail as "exited during heartbeat"
        assert "not restarting it again yet" in _error(lambda: plane.requests())
        assert plane.restarts == 1


def test_a_store_process_gone_for_good_leaves_the_release_to_the_queue(
    tmp_path: Path, store_url: str
) -> None:
    queue_url = f"sqlite:///{tmp_path / 'queue.db'}"
    with open_queue(queue_url, "job-1") as queue:
        queue.enqueue([Shard(f"s{i}", {"i": i}) for i in range(3)])
        queue.claim("w-9", 2, lease_s=600)
    with EmbeddedControlPlane(
        store_url, "i-1", queue=QueueLeases(queue_url, "job-1"), max_restarts=0
    ) as plane:
        plane.heartbeat(_beat("running", 1.0))
        pid = plane.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_for(
            lambda: "not restarting it again yet" in _error(lambda: plane.requests()),
            what="the plane to give up",
        )
        assert release_leases("w-9", plane, None, plane.queue) == (2, "queue", None)
    with open_queue(queue_url, "job-1") as queue:
        assert queue.stats().leased == 0


def test_a_store_that_cannot_be_opened_is_a_control_plane_error_a_refusal_is_not(
    tmp_path: Path,
) -> None:
    missing = f"sqlite:///{tmp_path / 'missing' / 'dir' / 'store.db'}"
    with (
        EmbeddedControlPlane(missing, "i-1") as plane,
        pytest.raises(ControlPlaneError, match="cannot be opened"),
    ):
        plane.heartbeat(
            _beat("running", 1.0)
        )  # an outage: the emergency protocol falls back on the queue
    with EmbeddedControlPlane(f"sqlite:///{tmp_path / 'store.db'}", "i-1") as plane:
        with pytest.raises(StoreRefused, match="ValueError"):  # the store answered: not an outage
            plane.acknowledge("not-a-request-id")
        assert plane.requests() == []  # and the process is still serving


def test_the_store_process_ignores_sigterm_and_exits_when_the_plane_closes(store_url: str) -> None:
    plane = EmbeddedControlPlane(store_url, "i-1")
    plane.heartbeat(_beat("running", 1.0))
    pid = plane.pid
    assert pid is not None
    os.kill(
        pid, signal.SIGTERM
    )  # a final notice sent to every process must not stop it mid-protocol
    plane.heartbeat(_beat("preempting", 2.0))
    assert plane.restarts == 0
    plane.close()
    assert not process_running(pid)
    with pytest.raises(ControlPlaneError, match="closed"):
        plane.heartbeat(_beat("done", 3.0))


def test_a_sigterm_while_the_store_process_starts_does_not_stop_it(store_url: str) -> None:
    """A shutdown SIGTERMs every process of the instance at once, maybe before the store process's
    interpreter has got as far as ignoring it: it is born with the signal blocked, so it waits."""
    with EmbeddedControlPlane(store_url, "i-1") as plane:
        plane.start()
        pid = plane.pid
        assert pid is not None
        os.kill(pid, signal.SIGTERM)  # at once: the child is still starting Python
        plane.heartbeat(_beat("preempting", 1.0))
        assert plane.restarts == 0 and plane.pid == pid
    assert stored_beat(store_url, "i-1") == ("preempting", 1.0)


def test_an_event_the_store_process_died_under_is_stored_by_its_successor(store_url: str) -> None:
    """The agent's local log has every event; a restart of the store process must not leave one
    out of the store (the first event of an agent whose store process was killed while it started
    was once missing from the store, though the agent finished its protocol)."""
    event = WorkerStarted(instance_id="i-1", job_id="j-1", pid=42, command=("python", "x.py"))
    with EmbeddedControlPlane(store_url, "i-1") as plane:
        plane.start()
        pid = plane.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # before it is ready: the record waits for it, and it dies
        plane.record(event)
        assert plane.restarts >= 1
    from sqlalchemy import select

    from spothop.db import make_engine
    from spothop.state.agent_tables import agent_events

    engine = make_engine(store_url)
    with engine.connect() as conn:
        stored = conn.execute(select(agent_events.c.event_id, agent_events.c.kind)).all()
    engine.dispose()
    assert [tuple(r) for r in stored] == [(event.event_id, "worker_started")]


def _run_agent(tmp_path: Path, store_url: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        agent_command(
            "run",
            "--protocol",
            "sigterm",
            "--no-probe",
            "--state-dir",
            str(tmp_path / "agent"),
            "--poll-interval",
            "0.05",
            "--instance-id",
            "i-run",
            "--control-plane",
            store_url,
            "--heartbeat-interval",
            "0.1",
            "--",
            "sleep",
            "60",
        ),
        env={**os.environ, "SPOTHOP_TEST_MODULES_DIR": str(tmp_path)},
    )


def test_an_agent_whose_store_process_is_killed_gets_a_new_one_and_keeps_beating(
    tmp_path: Path, store_url: str
) -> None:
    agent = _run_agent(tmp_path, store_url)
    try:
        wait_for(lambda: stored_beat(store_url, "i-run"), timeout_s=60, what="a first heartbeat")
        [first] = store_processes(agent.pid)
        os.kill(first, signal.SIGKILL)
        killed_at = time.time()
        wait_for(
            lambda: store_processes(agent.pid) not in ([], [first]),
            timeout_s=30,
            what="a new store process",
        )
        wait_for(
            lambda: (stored_beat(store_url, "i-run") or ("", 0.0))[1] > killed_at,
            timeout_s=30,
            what="a heartbeat stored after the kill",
        )
        assert agent.poll() is None
    finally:
        agent.terminate()
        assert agent.wait(timeout=scaled(30)) == 75
    assert read_events(tmp_path / "agent", "interruption")  # the emergency protocol ran as usual


def test_the_store_process_exits_when_the_agent_is_sigkilled(
    tmp_path: Path, store_url: str
) -> None:
    agent = _run_agent(tmp_path, store_url)
    try:
        wait_for(lambda: stored_beat(store_url, "i-run"), timeout_s=60, what="a first heartbeat")
        [child] = store_processes(agent.pid)
        agent.kill()  # no clean-up in the agent: only the pipe closing tells the store process
        agent.wait()
        wait_for(lambda: not process_running(child), timeout_s=30, what="the store process to exit")
    finally:
        agent.kill()
        for pid in store_processes(agent.pid):
            kill_quietly(pid, signal.SIGKILL)
