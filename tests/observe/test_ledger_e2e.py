"""The ledger of a job preempted across two clouds equals the cloud's own bill, to the micro-dollar."""

from __future__ import annotations

from spothop.observe.billing import microusd
from spothop.observe.ledger import Ledger, total_microusd
from spothop.providers.base import InstanceState
from tests.jobs.e2e.conftest import Harness
from tests.waiting import scaled, wait_for

MAX_PREEMPTIONS = 4  # 2 types x 2 zones per cloud: the cooldowns push the job to the other cloud


def _spec() -> dict:
    return {
        "name": "ledger-e2e",
        "resources": {"gpu": "T4", "gpus_per_node": 1},
        "market": "spot",
        "tolerance": "aggressive",
        "max_interruptions": 10,
        "providers": {"allow": ["aws-sim", "gcp-sim"]},
        "run": "sleep 4",
    }


def test_a_job_preempted_across_two_clouds_is_billed_to_the_micro_dollar(flat_harness: Harness):
    h = flat_harness
    job_id = h.launch(_spec())
    preempted: set[str] = set()
    for _ in range(MAX_PREEMPTIONS):
        running = wait_for(
            lambda: [i for i in h.running(job_id) if i.instance_id not in preempted],
            scaled(30),
            what="a running instance of the job",
        )
        clouds = {i.provider for i in h.instances() if i.tags.get("spothop-job") == job_id}
        if len(clouds) >= 2 and len(preempted) >= 2:
            break
        h.preempt(running[0], lead_time_s=2.0)
        preempted.add(running[0].instance_id)
    h.wait_state(job_id, {"succeeded"}, scaled(60), what="the job to succeed")
    ours = lambda: [i for i in h.instances() if i.tags.get("spothop-job") == job_id]  # noqa: E731
    wait_for(
        lambda: all(not i.state.is_alive for i in ours()), scaled(30), what="every instance ended"
    )
    instances = ours()
    assert {i.provider for i in instances} == {"aws-sim", "gcp-sim"}
    assert any(i.state is InstanceState.PREEMPTED for i in instances)

    # The test's own sum: each instance's lifetime on the cloud's records, its price, the rule.
    expected = 0
    for instance in instances:
        provider = h.providers[instance.provider]
        row = provider.store.instance(instance.instance_id)
        assert row is not None
        if row["running_at"] is None:
            continue  # ended before it booted: nothing billed
        usage_s = row["ended_at"] - row["running_at"]
        billed_s = provider.capabilities.billing.billed_seconds(usage_s)
        expected += microusd(row["price_usd_per_hour"], billed_s)

    with h.store() as store:
        ledger = Ledger(store, h.providers)
        records = ledger.update(job_id)
        assert len(records) == len(store.attempts(job_id))
        assert all(r.closed and not r.price_missing for r in records)
        assert total_microusd(records) == expected
        reconciliation = ledger.reconcile(job_id)
        assert reconciliation.unmatched == ()
        assert reconciliation.difference_microusd == 0 and reconciliation.differing == ()
        # The cloud's billing rows say the same (each row rounded on its own: within a micro-dollar a row).
        for instance in instances:
            rows = h.providers[instance.provider].store.billing_rows(instance.instance_id)
            assert abs(sum(r["cost_micro_usd"] for r in rows) - instance.cost_microusd) <= len(rows)
