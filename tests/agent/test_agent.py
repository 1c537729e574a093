"""The agent in-process: supervision, restarts, advance notices, the emergency protocol's hooks, self-check."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from spothop.agent import (
    EXIT_DONE,
    EXIT_PREEMPTED,
    EXIT_WORKER_FAILED,
    Agent,
    AgentConfig,
    EmbeddedControlPlane,
    Identity,
    Notice,
    Watcher,
    read_events,
    read_status,
)
from spothop.agent.model import advance_notice, final_notice
from spothop.agent.notices import sigterm_notice
from spothop.db import shared_engine
from spothop.state.agent_tables import agent_heartbeats
from spothop.worker.channel import read_json
from tests.agent.fakes import ListReleaser
from tests.conftest import PROJECT_ROOT
from tests.waiting import scaled, wait_for

WORKER = str(Path(__file__).with_name("worker.py"))


class ScriptedWatcher(Watcher):
    """Returns ``notices`` once ``trigger`` exists (a file the worker writes when it is ready)."""

    protocol: ClassVar[str] = "test"

    def __init__(self, trigger: Path, notices: list[Notice]) -> None:
        super().__init__("http://unused", poll_interval_s=0.05)
        self.trigger, self.notices = trigger, notices

    def poll(self) -> list[Notice]:
        return self.notices if self.trigger.exists() else []

    def self_check(self) -> Identity:
        return Identity("i-test", "g5.xlarge", "us-east-1", "us-east-1a")


def _config(tmp_path: Path, command: list[str], **overrides: Any) -> AgentConfig:
    values: dict[str, Any] = {
        "command": command,
        "protocol": "sigterm",
        "state_dir": tmp_path / "agent",
        "instance_id": "i-test",
        "worker_id": "w-1",
        "restart_backoff_s": 0.01,
        "poll_interval_s": 0.05,
        "heartbeat_interval_s": 0.05,
        "extra_env": {"PYTHONPATH": str(PROJECT_ROOT)},
    }
    values.update(overrides)
    return AgentConfig(**values)


def test_a_stop_request_is_read_without_waiting_for_the_next_heartbeat(tmp_path: Path) -> None:
    """The controller stopping a group's other nodes: read every requests interval, not per beat."""
    import threading

    from spothop.state.agent_requests import add_request

    url = f"sqlite:///{tmp_path / 'store.db'}"
    started = tmp_path / "started"
    agent = Agent(
        _config(
            tmp_path,
            ["sh", "-c", f"touch {started}; sleep 60"],
            safety_margin_s=0,
            heartbeat_interval_s=3_600,
            requests_interval_s=0.05,
        ),
        plane=EmbeddedControlPlane(url, "i-test"),
    )
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(agent.run()), daemon=True)
    thread.start()
    wait_for(started.exists, 30, what="the worker started")
    wait_for(lambda: agent.link.registered, 30, what="the agent registered")
    add_request(shared_engine(url), "i-test", "stop", "group re-forms", deadline_unix_s=time.time())
    thread.join(timeout=scaled(30))
    assert codes == [EXIT_PREEMPTED]  # long before a second heartbeat was due
    [record] = read_events(agent.config.state_dir, "interruption")
    assert record["cause"] == "stop-requested"


def test_a_crashing_worker_is_restarted_with_its_leases_released_until_it_succeeds(
    tmp_path: Path,
) -> None:
    counter = tmp_path / "runs"
    script = f'n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; echo run $n; [ "$n" -ge 2 ]'
    releaser = ListReleaser()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    agent = Agent(
        _config(tmp_path, ["sh", "-c", script]),
        releaser=releaser,
        plane=EmbeddedControlPlane(url, "i-test"),
    )
    assert agent.run() == EXIT_DONE
    assert [e["code"] for e in read_events(agent.config.state_dir, "worker_exited")] == [1, 1, 0]
    assert releaser.calls == ["w-1", "w-1"]
    assert [e["via"] for e in read_events(agent.config.state_dir, "leases_released")] == [
        "hook",
        "hook",
    ]
    assert "run 0" in (agent.config.state_dir / "worker.log").read_text()
    with shared_engine(url).connect() as conn:
        [beat] = conn.execute(agent_heartbeats.select()).mappings().all()
    assert (
        beat["instance_id"] == "i-test" and beat["worker_id"] == "w-1" and not beat["notice_blind"]
    )
    status = read_status(agent.config.state_dir)
    assert status is not None and status.state == "done" and not status.notice_blind


def test_past_the_restart_limit_the_agent_reports_failure(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    agent = Agent(_config(tmp_path, ["sh", "-c", "exit 3"], restart_limit=1))
    assert agent.run() == EXIT_WORKER_FAILED
    assert (
        signal.getsignal(signal.SIGTERM) == before
    )  # the agent's handler lasts only while it runs
    assert [e["code"] for e in read_events(agent.config.state_dir, "worker_exited")] == [3, 3]


def test_a_worker_that_exits_75_ends_the_agent_resumable_without_a_restart(
    tmp_path: Path,
) -> None:
    agent = Agent(_config(tmp_path, ["sh", "-c", "exit 75"], restart_limit=3))
    assert agent.run() == EXIT_PREEMPTED
    assert [e["code"] for e in read_events(agent.config.state_dir, "worker_exited")] == [75]


def sigterm_at_the_exit(agent: Agent) -> None:
    """Make the agent's own SIGTERM land just as it sees its worker gone (between its look at
    the notices and its poll of the worker): the notice is pending with the exit."""
    poll, landed = agent.supervisor.poll, []

    def poll_with_the_signal_landing_at_the_exit() -> int | None:
        code = poll()
        if code is not None and not landed:
            landed.append(sigterm_notice(time.time(), 3.0))
            agent.notices.append(landed[0])
        return code

    agent.supervisor.poll = poll_with_the_signal_landing_at_the_exit  # type: ignore[method-assign]


def test_a_shutdown_sigterm_that_comes_with_the_workers_exit_is_handled_as_the_notice(
    tmp_path: Path,
) -> None:
    """A shutdown SIGTERMs every process of the instance: a worker that saves and exits 75 on its
    own SIGTERM may be seen gone just as the agent's own SIGTERM lands. The notice is handled
    (saved, released, interruption recorded), not taken for an ordinary resumable exit."""
    releaser = ListReleaser()
    agent = Agent(
        _config(tmp_path, [sys.executable, WORKER, str(tmp_path), "save"], safety_margin_s=1),
        releaser=releaser,
    )
    sigterm_at_the_exit(agent)

    def stop_the_worker() -> None:
        wait_for(lambda: (tmp_path / "started").exists(), 30, what="the worker started")
        pid = agent.supervisor.pid
        assert pid is not None
        os.killpg(pid, signal.SIGTERM)  # the worker's own SIGTERM, before the agent's

    stopper = threading.Thread(target=stop_the_worker, daemon=True)
    stopper.start()
    assert agent.run() == EXIT_PREEMPTED
    stopper.join()
    assert (tmp_path / "emergency.ckpt").exists()
    [record] = read_events(agent.config.state_dir, "interruption")
    assert record["protocol"] == "sigterm" and record["saved"] == "saved"
    assert releaser.calls == ["w-1"]
    assert read_events(agent.config.state_dir, "worker_exited") == []


def test_a_worker_done_as_a_shutdown_sigterm_lands_is_done(tmp_path: Path) -> None:
    """Exit 0 is the work finished: a notice that comes with it does not make it a preemption."""
    agent = Agent(_config(tmp_path, ["sh", "-c", "exit 0"]))
    sigterm_at_the_exit(agent)
    assert agent.run() == EXIT_DONE
    assert [e["code"] for e in read_events(agent.config.state_dir, "worker_exited")] == [0]
    assert read_events(agent.config.state_dir, "interruption") == []


def test_an_advance_notice_asks_the_worker_for_a_checkpoint(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    control = tmp_path / "agent" / "control"
    script = f"touch {ready}; while [ ! -f {control}/checkpoint.json ]; do sleep 0.02; done; touch {tmp_path}/ckpt"
    notice = advance_notice("test", "rebalance-recommendation", seen_at=time.time())
    agent = Agent(_config(tmp_path, ["sh", "-c", script]), watcher=ScriptedWatcher(ready, [notice]))
    assert agent.run() == EXIT_DONE
    assert (tmp_path / "ckpt").exists()
    [event] = read_events(agent.config.state_dir, "advance_notice")
    assert event["cause"] == "rebalance-recommendation" and event["checkpoint_seq"] == 1


def test_final_notice_with_a_callback_worker_runs_every_hook(tmp_path: Path) -> None:
    notice = final_notice(
        "test",
        "instance-action",
        seen_at=time.time(),
        deadline=time.time() + 30,
        documented_lead_s=120,
    )
    releaser, uploads = ListReleaser(), []
    agent = Agent(
        _config(tmp_path, [sys.executable, WORKER, str(tmp_path), "callback"], safety_margin_s=1),
        watcher=ScriptedWatcher(tmp_path / "started", [notice]),
        releaser=releaser,
        upload=lambda: uploads.append(1),
    )
    assert agent.run() == EXIT_PREEMPTED
    assert (tmp_path / "emergency.ckpt").exists()
    assert releaser.calls == ["w-1"] and uploads == [1]
    [record] = read_events(agent.config.state_dir, "interruption")
    assert (
        record["saved"] == "saved" and record["uploaded"] is True and record["leases_released"] == 2
    )
    assert record["zone"] == "us-east-1a" and record["cause"] == "instance-action"


def test_a_failing_hook_does_not_stop_the_release_or_the_record(tmp_path: Path) -> None:
    def broken_upload() -> None:
        raise OSError("bucket unreachable")

    # The worker ignores SIGTERM and never saves, and the notice comes only once it runs (the
    # file "started"): a worker that SIGTERM kills would make the outcome "exited", by luck of timing.
    notice = final_notice(
        "test", "x", seen_at=time.time(), deadline=time.time() + 0.5, documented_lead_s=None
    )
    releaser = ListReleaser()
    agent = Agent(
        _config(tmp_path, [sys.executable, WORKER, str(tmp_path), "ignore"], safety_margin_s=1),
        releaser=releaser,
        upload=broken_upload,
        watcher=ScriptedWatcher(tmp_path / "started", [notice]),
    )
    assert agent.run() == EXIT_PREEMPTED
    [record] = read_events(agent.config.state_dir, "interruption")
    assert record["uploaded"] is False and "bucket unreachable" in record["errors"]["upload"]
    assert record["saved"] == "nothing" and releaser.calls == ["w-1"]


def test_an_unreachable_endpoint_marks_the_instance_notice_blind(tmp_path: Path) -> None:
    agent = Agent(_config(tmp_path, ["true"], protocol="aws", metadata_url="http://127.0.0.1:9"))
    assert agent.run() == EXIT_DONE
    status = read_status(agent.config.state_dir)
    assert status is not None and status.notice_blind
    assert "metadata endpoint (aws)" in status.blind_reasons[0]
    [event] = read_events(agent.config.state_dir, "notice_blind")
    assert event["reasons"] == list(status.blind_reasons)


def test_the_control_plane_can_ask_for_a_checkpoint_and_then_a_stop(tmp_path: Path) -> None:
    from spothop.state.agent_requests import add_request

    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = shared_engine(url)
    checkpoint = add_request(engine, "i-test", "checkpoint", "rebalance elsewhere")
    stop = add_request(engine, "i-test", "stop", "job cancelled", deadline_unix_s=time.time())
    agent = Agent(
        _config(tmp_path, ["sleep", "30"], safety_margin_s=0),
        plane=EmbeddedControlPlane(url, "i-test"),
    )
    assert agent.run() == EXIT_PREEMPTED
    asked = read_json(agent.config.state_dir / "control" / "checkpoint.json")
    assert asked == {"seq": 1, "reason": "control-plane:rebalance elsewhere"}
    got = [
        (e["request_id"], e["request"])
        for e in read_events(agent.config.state_dir, "request_received")
    ]
    assert got == [(checkpoint, "checkpoint"), (stop, "stop")]
    [record] = read_events(agent.config.state_dir, "interruption")
    assert record["protocol"] == "control-plane" and record["cause"] == "stop-requested"
    assert EmbeddedControlPlane(url, "i-test").requests() == []  # both acknowledged
