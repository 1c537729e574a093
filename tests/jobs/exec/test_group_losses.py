"""A group's nodes lost around the rendezvous, through whole controller passes on a virtual clock
(fake provider) and the control plane's answer to each node's agent (no agent processes: each
agent's registration, beats and exit are written as its agent would).

The rule (docs/multinode.md, "The rendezvous"): a generation's rendezvous is formed only from
nodes that are alive. A node that registered and was then lost (preempted, its agent lost) before
its generation met is never handed to its peers; the generation breaks, its other nodes are
stopped, and the next generation meets with the replacement. Each case ends with every node of
the new generation given one same rendezvous of live addresses and the job succeeded. Nodes lost
before they ever registered are replaced within their generation, which stays whole: a worker
that fails in it later is a failure, not an end with its group.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from spothop.controlplane import Registration, StoreControlPlane
from spothop.jobs.controller import Launch, RequestStop, decide
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.executor import Executor
from spothop.jobs.controller.observe import Observer
from spothop.jobs.lifecycle import EndReason, JobState
from spothop.jobs.records import AttemptRecord
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.testing import FakeProvider, make_market, make_offerings
from spothop.wire.contract import Heartbeat
from spothop.wire.events import Exited, FinalNotice
from spothop.wire.group import Rendezvous, group_port
from tests.waiting import wait_for

BOOT_DEADLINE_S = 600.0
CONFIG = ControllerConfig()


class GroupWorld:
    """One grouped job on the fake provider, its controller run a pass at a time, its agents'
    side of the control plane written directly."""

    def __init__(self, tmp_path: Path, nodes: int) -> None:
        self.url = f"sqlite:///{tmp_path / 'store.db'}"
        self.store = JobStore(self.url)
        self.clock = ManualClock(1_000_000.0)
        self.provider = FakeProvider(
            markets=[make_market(o) for o in make_offerings()], clock=self.clock
        )
        self.provider.capabilities = replace(
            self.provider.capabilities, boot_deadline_s=BOOT_DEADLINE_S
        )
        self.executor = Executor(
            self.store, {"fake": self.provider}, store_url=self.url, home=tmp_path
        )
        self.observer = Observer(
            self.store, {"fake": self.provider}, market_ttl_s=0.0, clock=self.clock.now
        )
        spec = {"name": "g", "run": "true", "num_nodes": nodes, "max_retries": 10}
        self.job_id = self.store.create_job(load_job(spec))
        self.addresses = 0

    def close(self) -> None:
        self.observer.commit()
        self.executor.close()
        self.store.close()

    def one_pass(self) -> list[object]:
        actions = decide(self.observer.snapshot(), CONFIG)
        assert all(r.ok for r in self.executor.execute(actions))
        wait_for(lambda: not self.executor.launching(), 10, what="the launches to end")
        return list(actions)

    def current(self, generation: int) -> list[AttemptRecord]:
        """Each node's newest attempt of ``generation``, in node order."""
        newest: dict[int, AttemptRecord] = {}
        for a in sorted(self.store.attempts(self.job_id), key=lambda a: a.launched_unix_s):
            if a.generation == generation:
                newest[a.node] = a
        return [newest[n] for n in sorted(newest)]

    def plane(self, a: AttemptRecord) -> StoreControlPlane:
        assert a.instance_id
        return StoreControlPlane(self.url, a.instance_id)

    def register(self, a: AttemptRecord) -> str:
        """``a``'s agent registers a fresh address; the address."""
        self.addresses += 1
        address = f"10.0.0.{self.addresses}"
        assert a.instance_id
        self.plane(a).register(
            Registration(
                instance_id=a.instance_id,
                job_id=self.job_id,
                provider="fake",
                private_address=address,
                time_unix_s=self.clock.now(),
            )
        )
        return address

    def beat(self, a: AttemptRecord, state: str = "rendezvous") -> None:
        assert a.instance_id
        self.plane(a).heartbeat(
            Heartbeat(
                instance_id=a.instance_id,
                worker_id="",
                time_unix_s=self.clock.now(),
                state=state,
                worker_pid=None,
                worker_restarts=0,
                worker_heartbeat_unix_s=None,
                notice_blind=False,
                job_id=self.job_id,
                provider="fake",
            )
        )

    def exit(self, a: AttemptRecord, code: int) -> None:
        """``a``'s agent exits with ``code`` (its instance then ends, as an agent's boot script
        shuts it down)."""
        assert a.instance_id
        self.plane(a).record(
            Exited(
                instance_id=a.instance_id,
                provider="fake",
                job_id=self.job_id,
                time_unix_s=self.clock.now(),
                code=code,
            )
        )

    def rendezvous(self, a: AttemptRecord) -> Rendezvous | None:
        return self.plane(a).rendezvous()

    def stopped(self, actions: list[object]) -> set[str]:
        return {a.instance_id for a in actions if isinstance(a, RequestStop)}

    def meet_and_finish(self, generation: int, nodes: int) -> None:
        """Every node of ``generation`` registers, gets one same rendezvous of live addresses,
        runs and exits 0: the job succeeds."""
        members = self.current(generation)
        assert [a.node for a in members] == list(range(nodes))
        assert all(a.live and a.instance_id for a in members)
        addresses = [self.register(a) for a in members]
        answers = [self.rendezvous(a) for a in members]
        assert all(r is not None for r in answers), answers
        expected = tuple(addresses)
        for node, r in enumerate(answers):
            assert r is not None
            assert (r.generation, r.node_rank, r.nnodes) == (generation, node, nodes)
            assert r.node_addrs == expected and r.master_addr == expected[0]
            assert r.master_port == group_port(self.job_id, generation)
        for a in members:
            self.beat(a, "running")
        self.one_pass()
        for a in members:
            self.exit(a, 0)
        self.one_pass()
        job = self.store.get_job(self.job_id)
        assert job.state is JobState.SUCCEEDED, job
        assert {a.generation for a in self.store.attempts(self.job_id)} == set(
            range(generation + 1)
        )

    def stop_obeyed(self, actions: list[object]) -> None:
        """Every node asked to stop does: its agent exits 75, nothing having run."""
        stopped = self.stopped(actions)
        for a in self.store.attempts(self.job_id):
            if a.live and a.instance_id in stopped:
                self.exit(a, 75)


@pytest.fixture
def world2(tmp_path: Path) -> Iterator[GroupWorld]:
    world = GroupWorld(tmp_path, 2)
    try:
        yield world
    finally:
        world.close()


@pytest.fixture
def world3(tmp_path: Path) -> Iterator[GroupWorld]:
    world = GroupWorld(tmp_path, 3)
    try:
        yield world
    finally:
        world.close()


def _launch_generation_0(world: GroupWorld, nodes: int) -> list[AttemptRecord]:
    first = world.one_pass()
    assert sorted(a.node for a in first if isinstance(a, Launch)) == list(range(nodes))
    members = world.current(0)
    assert all(a.instance_id for a in members)
    return members


def _generation_1_meets(world: GroupWorld, broke: list[object], nodes: int) -> None:
    """The stopped nodes obey ``broke``'s stops; the next pass launches every node in generation
    1, which meets and runs to the end."""
    world.stop_obeyed(broke)
    relaunch = world.one_pass()
    launched = sorted((a.node, a.generation) for a in relaunch if isinstance(a, Launch))
    assert launched == [(n, 1) for n in range(nodes)]
    world.meet_and_finish(1, nodes)


def test_node_0_preempted_after_registering_before_node_1_registered(world2: GroupWorld) -> None:
    """The reported case: node 0 registered, then was preempted before node 1 booted. Node 1
    must never be handed node 0's dead address; the generation breaks and generation 1 meets."""
    node0, node1 = _launch_generation_0(world2, 2)
    world2.register(node0)
    world2.beat(node0)
    world2.provider.preempt(node0.instance_id or "", lead_time_s=0.0)
    world2.clock.advance(1)
    world2.exit(node0, 75)  # its agent saw the notice while it waited: nothing ran

    # Node 1 boots late and registers before its stop reaches it: no rendezvous with a dead node.
    world2.register(node1)
    assert world2.rendezvous(node1) is None

    broke = world2.one_pass()
    assert node1.instance_id in world2.stopped(broke)
    assert not [a for a in broke if isinstance(a, Launch)]  # node 1 is still up
    assert world2.rendezvous(node1) is None
    world2.stop_obeyed(broke)
    world2.clock.advance(1)
    relaunch = world2.one_pass()
    assert sorted((a.node, a.generation) for a in relaunch if isinstance(a, Launch)) == [
        (0, 1),
        (1, 1),
    ]
    assert world2.store.attempt(node0.attempt_id).end_reason is EndReason.PREEMPTED
    world2.meet_and_finish(1, 2)


def test_node_0s_agent_lost_after_registering_before_node_1_registered(world2: GroupWorld) -> None:
    """Node 0 registered, then its beats stopped (no exit, no notice) while node 1 still booted:
    node 0 is lost, node 1 is stopped before it ever met, and generation 1 meets."""
    node0, node1 = _launch_generation_0(world2, 2)
    world2.register(node0)
    world2.beat(node0)
    world2.clock.advance(CONFIG.heartbeat_deadline_s + 1)  # node 1 is still within its boot
    broke = world2.one_pass()
    assert world2.store.attempt(node0.attempt_id).end_reason is EndReason.AGENT_LOST
    assert node1.instance_id in world2.stopped(broke)
    assert not [a for a in broke if isinstance(a, Launch)]
    world2.register(node1)  # boots now: its stop is waiting, and no rendezvous with node 0
    assert world2.rendezvous(node1) is None
    _generation_1_meets(world2, broke, 2)


def test_a_node_lost_after_every_node_registered_but_before_the_workers_started(
    world2: GroupWorld,
) -> None:
    """Both registered; node 1 asked and met, node 0 was preempted before it asked. Node 0 is
    not answered any more, node 1 (whose worker may have started) is stopped, generation 1
    meets."""
    node0, node1 = _launch_generation_0(world2, 2)
    world2.register(node0)
    world2.register(node1)
    met = world2.rendezvous(node1)
    assert met is not None and met.node_addrs == ("10.0.0.1", "10.0.0.2")
    world2.provider.preempt(node0.instance_id or "", lead_time_s=0.0)
    world2.clock.advance(1)
    broke = world2.one_pass()
    assert world2.stopped(broke) == {node1.instance_id}
    assert world2.rendezvous(node1) is None  # a late ask of node 1's is not answered either
    _generation_1_meets(world2, broke, 2)


def test_two_nodes_lost_at_once_before_registering_are_both_replaced_in_their_generation(
    world3: GroupWorld,
) -> None:
    """Nodes 0 and 1 never registered (node 2 did): both are replaced in generation 0 in one
    pass, node 2 keeps waiting, and the three meet with the replacements."""
    node0, node1, node2 = _launch_generation_0(world3, 3)
    world3.clock.advance(BOOT_DEADLINE_S - 10)
    world3.register(node2)
    world3.beat(node2)
    world3.clock.advance(11)
    replaced = world3.one_pass()
    assert not world3.stopped(replaced)
    assert sorted((a.node, a.generation) for a in replaced if isinstance(a, Launch)) == [
        (0, 0),
        (1, 0),
    ]
    for lost in (node0, node1):
        assert world3.store.attempt(lost.attempt_id).end_reason is EndReason.AGENT_LOST
    assert world3.rendezvous(node2) is None
    world3.meet_and_finish(0, 3)


def test_two_nodes_lost_at_once_one_after_registering_break_the_generation(
    world3: GroupWorld,
) -> None:
    """Node 0 registered and was preempted while node 1's agent was found lost unregistered:
    the generation breaks (no replacement within it), node 2 is stopped, generation 1 meets."""
    node0, node1, node2 = _launch_generation_0(world3, 3)
    world3.clock.advance(BOOT_DEADLINE_S - 10)
    world3.register(node0)
    world3.register(node2)
    world3.beat(node2)
    world3.provider.preempt(node0.instance_id or "", lead_time_s=0.0)
    world3.clock.advance(11)
    broke = world3.one_pass()
    assert not [a for a in broke if isinstance(a, Launch)]
    assert world3.stopped(broke) == {node2.instance_id}
    assert world3.store.attempt(node1.attempt_id).end_reason is EndReason.AGENT_LOST
    assert world3.rendezvous(node2) is None
    _generation_1_meets(world3, broke, 3)


def test_two_registered_nodes_preempted_at_once(world3: GroupWorld) -> None:
    node0, node1, node2 = _launch_generation_0(world3, 3)
    for a in (node0, node1):
        world3.register(a)
        world3.provider.preempt(a.instance_id or "", lead_time_s=0.0)
    world3.clock.advance(1)
    broke = world3.one_pass()
    assert world3.stopped(broke) == {node2.instance_id}
    world3.register(node2)
    assert world3.rendezvous(node2) is None
    world3.stop_obeyed(broke)
    relaunch = world3.one_pass()
    assert sorted(a.node for a in relaunch if isinstance(a, Launch)) == [0, 1, 2]
    world3.meet_and_finish(1, 3)


def test_a_replacement_that_registers_before_the_controller_saw_another_nodes_loss(
    world3: GroupWorld,
) -> None:
    """Node 1 never registered and was replaced in generation 0. Node 0 (registered) is then
    preempted: its agent records its final notice, and the replacement registers before any
    pass saw the loss. The control plane withholds the rendezvous (node 0 is leaving); the next
    pass breaks the generation and generation 1 meets."""
    node0, node1, node2 = _launch_generation_0(world3, 3)
    world3.clock.advance(BOOT_DEADLINE_S - 10)
    world3.register(node0)
    world3.beat(node0)
    world3.register(node2)
    world3.beat(node2)
    world3.clock.advance(11)
    replaced = world3.one_pass()
    assert [(a.node, a.generation) for a in replaced if isinstance(a, Launch)] == [(1, 0)]
    replacement = world3.current(0)[1]
    assert replacement.attempt_id != node1.attempt_id
    world3.provider.preempt(node0.instance_id or "", lead_time_s=30.0)
    world3.plane(node0).record(
        FinalNotice(
            instance_id=node0.instance_id or "",
            provider="fake",
            job_id=world3.job_id,
            time_unix_s=world3.clock.now(),
            protocol="fake",
            cause="preempted",
            deadline_unix_s=world3.clock.now() + 30,
        )
    )
    world3.register(replacement)
    assert world3.rendezvous(replacement) is None
    assert world3.rendezvous(node2) is None
    broke = world3.one_pass()
    assert world3.stopped(broke) >= {replacement.instance_id, node2.instance_id}
    world3.stop_obeyed(broke)
    world3.exit(node0, 75)
    world3.clock.advance(31)
    relaunch = world3.one_pass()
    launched = [a for a in relaunch if isinstance(a, Launch)] or [
        a for a in world3.one_pass() if isinstance(a, Launch)
    ]
    assert sorted((a.node, a.generation) for a in launched) == [(0, 1), (1, 1), (2, 1)]
    world3.meet_and_finish(1, 3)


def test_a_node_found_lost_that_registers_before_its_end_is_written_breaks_the_generation(
    world2: GroupWorld,
) -> None:
    """Node 1's agent registers just after the pass read it as never registered, and node 0
    meets it before the controller writes its end (agent_lost) and launches a replacement in
    generation 0. Node 0 may have started with node 1's address: the next pass breaks the
    generation instead of letting the replacement meet node 0 under the same port."""
    node0, node1 = _launch_generation_0(world2, 2)
    world2.clock.advance(BOOT_DEADLINE_S - 10)
    world2.register(node0)
    world2.beat(node0)
    world2.clock.advance(11)
    actions = decide(world2.observer.snapshot(), CONFIG)  # node 1 is lost: replaced alone
    assert [(a.node, a.generation) for a in actions if isinstance(a, Launch)] == [(1, 0)]
    world2.register(node1)  # ... but it registers before the pass's writes
    met = world2.rendezvous(node0)
    assert met is not None and met.node_addrs == ("10.0.0.1", "10.0.0.2")
    assert all(r.ok for r in world2.executor.execute(actions))
    wait_for(lambda: not world2.executor.launching(), 10, what="the launches to end")
    replacement = world2.current(0)[1]
    assert replacement.attempt_id != node1.attempt_id and replacement.live

    broke = world2.one_pass()
    assert world2.stopped(broke) == {node0.instance_id, replacement.instance_id}
    world2.register(replacement)
    assert world2.rendezvous(replacement) is None  # node 0 is leaving: never a second meeting
    _generation_1_meets(world2, broke, 2)


def test_a_worker_failing_in_a_generation_that_replaced_a_node_is_a_failure(
    world2: GroupWorld,
) -> None:
    """Node 1 was lost unregistered and replaced within generation 0; once both met, node 0's
    worker fails. Its generation was not broken by the replaced node (it never met anyone): the
    failure is the worker's own, not an end with its group."""
    node0, _ = _launch_generation_0(world2, 2)
    world2.clock.advance(BOOT_DEADLINE_S - 10)
    world2.register(node0)
    world2.beat(node0)
    world2.clock.advance(11)
    world2.one_pass()
    replacement = world2.current(0)[1]
    world2.register(replacement)
    assert world2.rendezvous(node0) is not None
    for a in (node0, replacement):
        world2.beat(a, "running")
    world2.one_pass()
    world2.exit(node0, 1)
    world2.one_pass()
    assert world2.store.attempt(node0.attempt_id).end_reason is EndReason.WORKER_FAILED
