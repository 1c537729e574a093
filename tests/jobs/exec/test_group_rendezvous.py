"""A group's rendezvous through whole controller passes on a virtual clock (fake provider): observe,
decide, act, and the control plane's answer to each node's agent.

Node 1's agent never registers: past the boot deadline it is lost and replaced within generation 0
(same rank, same port) while node 0 keeps waiting; once the replacement registers, both nodes get
the same rendezvous, node 0's address first. A node lost after the rendezvous breaks the
generation as before (tests/jobs/test_multinode.py has the table of rules).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from spothop.controlplane import Registration, StoreControlPlane
from spothop.jobs.controller import Launch, RequestStop, decide
from spothop.jobs.controller.executor import Executor
from spothop.jobs.controller.observe import Observer
from spothop.jobs.lifecycle import EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.testing import FakeProvider, make_market, make_offerings
from spothop.wire.group import group_port
from tests.waiting import wait_for

BOOT_DEADLINE_S = 600.0


def test_a_node_lost_before_the_rendezvous_is_replaced_in_its_generation_and_both_then_meet(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    clock = ManualClock(1_000_000.0)
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=clock)
    provider.capabilities = replace(provider.capabilities, boot_deadline_s=BOOT_DEADLINE_S)
    executor = Executor(store, {"fake": provider}, store_url=url, home=tmp_path)
    observer = Observer(store, {"fake": provider}, market_ttl_s=0.0, clock=clock.now)

    def one_pass() -> list[object]:
        actions = decide(observer.snapshot())
        assert all(r.ok for r in executor.execute(actions))
        wait_for(lambda: not executor.launching(), 10, what="the launches to end")
        return list(actions)

    def register(instance_id: str, address: str) -> StoreControlPlane:
        plane = StoreControlPlane(url, instance_id)
        plane.register(
            Registration(
                instance_id=instance_id,
                job_id=job_id,
                provider="fake",
                private_address=address,
                time_unix_s=clock.now(),
            )
        )
        return plane

    try:
        job_id = store.create_job(load_job({"name": "g", "run": "true", "num_nodes": 2}))
        first = one_pass()
        assert sorted(a.node for a in first if isinstance(a, Launch)) == [0, 1]
        node0, node1 = sorted(store.attempts(job_id), key=lambda a: a.node)
        assert node0.instance_id and node1.instance_id
        clock.advance(BOOT_DEADLINE_S + 1)
        plane0 = register(node0.instance_id, "10.0.0.1")
        assert plane0.rendezvous() is None  # node 1 has not registered

        second = one_pass()
        assert not [a for a in second if isinstance(a, RequestStop)]  # node 0 keeps waiting
        (relaunch,) = [a for a in second if isinstance(a, Launch)]
        assert (relaunch.node, relaunch.generation) == (1, 0)
        lost = store.attempt(node1.attempt_id)
        assert lost.end_reason is EndReason.AGENT_LOST
        assert provider.describe(node1.instance_id).state.value == "terminated"
        assert store.attempt(node0.attempt_id).live
        (replacement,) = [a for a in store.attempts(job_id) if a.node == 1 and a.live]
        assert replacement.generation == 0 and replacement.instance_id
        assert plane0.rendezvous() is None  # the replacement has not registered yet

        plane1 = register(replacement.instance_id, "10.0.0.2")
        meet0, meet1 = plane0.rendezvous(), plane1.rendezvous()
        assert meet0 is not None and meet1 is not None
        assert meet0.node_addrs == meet1.node_addrs == ("10.0.0.1", "10.0.0.2")
        assert meet0.master_addr == "10.0.0.1"
        assert meet0.master_port == meet1.master_port == group_port(job_id, 0)
        assert (meet0.node_rank, meet1.node_rank, meet0.generation) == (0, 1, 0)
    finally:
        observer.commit()
        executor.close()
        store.close()
