"""A grouped task's node: the agent registers its private address, waits for its group's rendezvous
from the control plane, and only then starts its worker, with MASTER_ADDR and SKYPILOT_NODE_IPS set
(agent/rendezvous.py). The control plane is a fake that answers as the test scripts it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from spothop.agent import EXIT_DONE, EXIT_PREEMPTED, Agent, NoControlPlane
from spothop.agent.model import Identity
from spothop.agent.notices.base import Watcher, address_or_empty
from spothop.agent.rendezvous import RendezvousWait
from spothop.wire.contract import EXIT_WORKER_FAILED, ControlRequest, Registration
from spothop.wire.group import Rendezvous, deferred, shape_env
from tests.agent.test_agent import _config

RENDEZVOUS = Rendezvous(
    master_addr="10.0.0.7",
    master_port=23456,
    node_rank=1,
    nnodes=2,
    nproc_per_node=1,
    generation=4,
    node_addrs=("10.0.0.7", "10.0.0.12"),
)


class Node1Watcher(Watcher):
    """No notices; the metadata service says this instance's private address is 10.0.0.12."""

    protocol: ClassVar[str] = "test"

    def __init__(self) -> None:
        super().__init__("http://unused", poll_interval_s=0.05)

    def poll(self) -> list[Any]:
        return []

    def self_check(self) -> Identity:
        return Identity("i-1", "g5.xlarge", "us-east-1", "us-east-1a", private_address="10.0.0.12")


class GroupPlane(NoControlPlane):
    """Answers None until ``ready_after`` asks (and only once the agent registered an address),
    then the rendezvous; keeps what it saw, and whether the worker had already run at each ask."""

    def __init__(self, worker_ran: Path, ready_after: int | None, stop: bool = False) -> None:
        super().__init__()
        self.worker_ran, self.ready_after, self.stop = worker_ran, ready_after, stop
        self.registrations: list[Registration] = []
        self.asks: list[tuple[bool, bool]] = []  # (registered by then, the worker had run)
        self.lock = threading.Lock()

    def register(self, registration: Registration) -> None:
        with self.lock:
            self.registrations.append(registration)

    def rendezvous(self) -> Rendezvous | None:
        with self.lock:
            registered = any(r.private_address for r in self.registrations)
            self.asks.append((registered, self.worker_ran.exists()))
            ready = self.ready_after is not None and len(self.asks) > self.ready_after
            return RENDEZVOUS if ready and registered else None

    def requests(self) -> list[ControlRequest]:
        return [ControlRequest("r-1", "stop", "group stop")] if self.stop else []


def _group_agent(tmp_path: Path, plane: GroupPlane, **overrides: Any) -> Agent:
    """Node 1 of 2 as its launch gives it: the group's shape, no MASTER_ADDR."""
    env = shape_env(node=1, nnodes=2, nproc_per_node=1, generation=4, master_port=23456)
    assert deferred(env)
    record = f"env > {tmp_path / 'worker-env'}; touch {plane.worker_ran}"
    config = _config(
        tmp_path,
        ["sh", "-c", record],
        extra_env=env,
        requests_interval_s=0.05,
        **overrides,
    )
    return Agent(config, watcher=Node1Watcher(), plane=plane)


def _worker_env(tmp_path: Path) -> dict[str, str]:
    text = (tmp_path / "worker-env").read_text()
    lines = text.split("\n")
    env: dict[str, str] = {}
    key = ""
    for line in lines:  # SKYPILOT_NODE_IPS spans lines: a line without '=' continues the last
        name, sep, value = line.partition("=")
        if sep and name.isidentifier():
            key, env[name] = name, value
        elif key:
            env[key] += "\n" + line
    return {k: v.rstrip("\n") for k, v in env.items()}


@pytest.fixture(autouse=True)
def _no_inherited_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MASTER_ADDR", "SKYPILOT_NODE_IPS", "SPOTHOP_NNODES"):
        monkeypatch.delenv(name, raising=False)


def test_the_worker_starts_only_with_the_rendezvous_in_its_environment(tmp_path: Path) -> None:
    plane = GroupPlane(tmp_path / "worker-ran", ready_after=2)
    assert _group_agent(tmp_path, plane).run() == EXIT_DONE
    assert [r.private_address for r in plane.registrations][:1] == ["10.0.0.12"]
    # Asked until an answer came (the third ask at the earliest); the worker had not run at any.
    assert len(plane.asks) >= 3 and not any(ran for _, ran in plane.asks)
    assert plane.asks[-1][0]  # the address was registered before the rendezvous was given
    env = _worker_env(tmp_path)
    assert env["MASTER_ADDR"] == "10.0.0.7" and env["MASTER_PORT"] == "23456"
    assert env["SKYPILOT_NODE_IPS"] == "10.0.0.7\n10.0.0.12"
    assert (env["NODE_RANK"], env["NNODES"], env["WORLD_SIZE"]) == ("1", "2", "2")
    assert env["SPOTHOP_GROUP_GENERATION"] == "4"


def test_no_rendezvous_by_the_deadline_gives_up_without_running_the_worker(
    tmp_path: Path,
) -> None:
    plane = GroupPlane(tmp_path / "worker-ran", ready_after=None)
    assert _group_agent(tmp_path, plane, rendezvous_timeout_s=1.0).run() == EXIT_WORKER_FAILED
    assert plane.asks and not plane.worker_ran.exists()


def test_a_stop_while_waiting_ends_the_agent_resumable_and_the_worker_never_runs(
    tmp_path: Path,
) -> None:
    plane = GroupPlane(tmp_path / "worker-ran", ready_after=None, stop=True)
    assert _group_agent(tmp_path, plane).run() == EXIT_PREEMPTED
    assert not plane.worker_ran.exists()


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_wait_asks_at_doubling_intervals_up_to_its_cap_until_its_deadline() -> None:
    clock = _Clock()
    plane = GroupPlane(Path("/nonexistent"), ready_after=None)
    wait = RendezvousWait(
        plane, timeout_s=30.0, what="node 1", clock=clock, poll_s=1.0, poll_max_s=4.0
    )
    asked_at = []
    while not wait.expired:
        before = len(plane.asks)
        assert wait.step() is None
        if len(plane.asks) > before:
            asked_at.append(clock.t)
        clock.t += 0.5
    assert asked_at == [0.0, 1.0, 3.0, 7.0, 11.0, 15.0, 19.0, 23.0, 27.0]


def test_an_address_is_one_printable_word_within_the_wires_bound() -> None:
    assert address_or_empty(" 10.0.0.7\n") == "10.0.0.7"
    assert address_or_empty("fd00:ec2::254") == "fd00:ec2::254"
    for bad in ("", "10.0.0.7 10.0.0.8", "x" * 65, "10.0.0.7\x00"):
        assert address_or_empty(bad) == ""


class Blind(Node1Watcher):
    def self_check(self) -> Identity:
        return Identity("i-1", "g5.xlarge", "us-east-1", "us-east-1a")  # no private address


def test_where_the_endpoint_gives_no_address_the_node_registers_its_hosts_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("spothop.agent.rendezvous.route_address", lambda: "192.0.2.55")
    plane = GroupPlane(tmp_path / "worker-ran", ready_after=0)
    agent = _group_agent(tmp_path, plane)
    agent.watcher = Blind()
    assert agent.run() == EXIT_DONE
    assert plane.registrations[0].private_address == "192.0.2.55"
