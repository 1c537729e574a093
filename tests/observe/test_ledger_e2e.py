"""The ledger of a job preempted across two clouds equals the cloud's own bill, to the micro-dollar."""

from __future__ import annotations

import json
import os
import signal

import pytest

from spothop.market.interruptions import InterruptionStore
from spothop.observe.billing import microusd
from spothop.observe.events import EventStream
from spothop.observe.ledger import Ledger, total_microusd
from spothop.resources.market_id import MarketId
from tests.jobs.e2e.conftest import Harness
from tests.waiting import scaled, wait_for

MAX_PREEMPTIONS = 4  # 2 types x 2 zones per cloud: the cooldowns push the job to the other cloud
# Simulated seconds of notice: 3 s of wall time at the harness's speed (5x). The agent now reads
# its notice's deadline on the wall clock (the local cloud maps it), so it really has those 3 s
# to stop its worker and record the interruption: 1 s was too short on a loaded machine.
LEAD_TIME_S = 15.0


def _worker_started(h: Harness, job_id: str, instance_id: str) -> bool:
    with h.store() as store:
        batch, _ = EventStream(store).read(job_id)
    return any(e.kind == "worker_started" and e.instance_id == instance_id for e in batch)


def _spec() -> dict:
    return {
        "name": "ledger-e2e",
        "resources": {"gpu": "T4", "gpus_per_node": 1},
        "market": "spot",
        "tolerance": "aggressive",
        "max_interruptions": 10,
        "providers": {"allow": ["aws-sim", "gcp-sim"]},
        "run": "sleep 6",  # wall seconds: time for the test to find each instance and preempt it
    }


def test_a_job_preempted_across_two_clouds_is_billed_to_the_micro_dollar(flat_harness: Harness):
    h = flat_harness
    job_id = h.launch(_spec())
    preempted: set[str] = set()
    for _ in range(MAX_PREEMPTIONS):
        # Checked before waiting: the last replacement may finish its run while the test looks.
        clouds = {i.provider for i in h.instances() if i.tags.get("spothop-job") == job_id}
        if len(clouds) >= 2 and len(preempted) >= 2:
            break
        running = wait_for(
            lambda: [i for i in h.running(job_id) if i.instance_id not in preempted],
            scaled(30),
            what="a running instance of the job",
        )
        # Its agent up and its worker started, so the notice reaches a worker (an interruption event).
        wait_for(
            lambda instance_id=running[0].instance_id: _worker_started(h, job_id, instance_id),
            scaled(30),
            what="the worker to start",
        )
        h.preempt(running[0], lead_time_s=LEAD_TIME_S)
        preempted.add(running[0].instance_id)
    h.wait_state(job_id, {"succeeded"}, scaled(60), what="the job to succeed")
    ours = lambda: [i for i in h.instances() if i.tags.get("spothop-job") == job_id]  # noqa: E731
    wait_for(
        lambda: all(not i.state.is_alive for i in ours()), scaled(30), what="every instance ended"
    )
    instances = ours()
    assert {i.provider for i in instances} == {"aws-sim", "gcp-sim"}
    # (A noticed instance may end preempted, or terminated once its replacement runs.)
    assert {i.instance_id for i in instances} >= preempted

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
        assert total_microusd(records) == expected, (records, instances)
        reconciliation = ledger.reconcile(job_id)
        assert reconciliation.unmatched == ()
        assert reconciliation.difference_microusd == 0 and reconciliation.differing == ()
        # The cloud's billing rows say the same (each row rounded on its own: within a micro-dollar a row).
        for instance in instances:
            rows = h.providers[instance.provider].store.billing_rows(instance.instance_id)
            assert abs(sum(r["cost_micro_usd"] for r in rows) - instance.cost_microusd) <= len(rows)

    # The same books through the CLI: report JOB --json, the event stream, MTBF, an unknown job.
    code, out = h.cli("report", job_id, "--json", "--store", h.store_url)
    assert code == 0, out
    report = json.loads(out)
    assert report["cost_microusd"] == expected and report["missing_prices"] == []
    assert report["reconciliation"]["difference_microusd"] == 0
    assert report["interruption_count"] == len(preempted)
    assert all(i["lead_time_s"] > 0 and i["saved"] for i in report["interruptions"])
    # Goodput counts only the work the agents reported: the last worker's clean exit. The
    # preempted ones (a plain `sleep`, no step, no save) reported none: paid, not useful, and
    # nothing reported done to recompute.
    assert 0 < report["goodput"] < 1 and report["recomputed_fraction"] == 0
    assert report["unreported_gpu_s"] > 0 and len(report["unreported_attempts"]) >= 1
    bills = report["reconciliation"]["by_provider"]
    assert [b["summary"] for b in bills] == [
        "reconciled against the local cloud's billing records: Δ 0 µUSD"
    ] * 2
    assert report["on_demand_cost_usd"] > 0 and report["usd_per_effective_tflops_hour"] > 0
    assert {s["key"] for s in report["by_provider"]} == {"aws-sim", "gcp-sim"}
    assert [s["key"] for s in report["by_market"]] == ["spot"]
    code, out = h.cli("events", "--job", job_id, "--json", "--store", h.store_url)
    assert code == 0, out
    stream = [json.loads(line) for line in out.splitlines()]
    kinds = {(e["source"], e["kind"]) for e in stream}
    assert ("agent", "interruption") in kinds and ("controller", "created") in kinds
    assert [e["time_unix_s"] for e in stream] == sorted(e["time_unix_s"] for e in stream)
    code, out = h.cli("events", "--mtbf", "--json", "--store", h.store_url)
    assert code == 0, out
    assert sum(r["interruptions"] for r in json.loads(out)) == len(preempted)
    code, out = h.cli("report", job_id, "--csv", "--store", h.store_url)
    assert code == 0 and len(out.splitlines()) == len(records) + 1
    code, out = h.cli("report", "--by", "provider", "--json", "--store", h.store_url)
    assert code == 0, out
    assert sum(g["cost_microusd"] for g in json.loads(out)["groups"]) == expected


def test_a_report_for_an_unknown_job_lists_the_nearest_ids(flat_harness: Harness, capsys):
    flat_harness.launch({"name": "known", "run": "true"})
    code, _ = flat_harness.cli("report", "j-nope00", "--store", flat_harness.store_url)
    assert code == 3
    assert "no job 'j-nope00'" in capsys.readouterr().err


def test_the_controller_closes_the_books_when_a_job_ends_before_any_report(flat_harness: Harness):
    h = flat_harness
    spec = {**_spec(), "name": "ledger-close", "run": "sleep 2"}
    job_id = h.launch(spec)
    h.wait_state(job_id, {"succeeded"}, scaled(60), what="the job to succeed")
    ours = lambda: [i for i in h.instances() if i.tags.get("spothop-job") == job_id]  # noqa: E731
    wait_for(
        lambda: ours() and all(not i.state.is_alive for i in ours()),
        scaled(30),
        what="every instance ended",
    )

    def closed_records() -> list | None:
        with h.store() as store:
            records = Ledger(store).records(job_id)  # read only: no update, no report
            attempts = store.attempts(job_id)
        return records if len(records) == len(attempts) and all(r.closed for r in records) else None

    records = wait_for(closed_records, scaled(30), what="the controller to close the records")
    assert all(r.clock == "provider" and not r.price_missing for r in records)
    assert sum(r.cost_microusd or 0 for r in records) == sum(
        r.provider_cost_microusd or 0 for r in records
    )
    ran = [r for r in records if r.usage_s > 0]
    assert ran, records
    with h.store() as store:
        evidence = InterruptionStore(engine=store.engine).evidence(
            max(r.usage_end_unix_s or 0 for r in ran) + 1, lambda m: "T4"
        )
    hours = {e.market: e.instance_hours for e in evidence}
    for r in ran:  # each run's hours in its market's history, the denominator of λ
        market = MarketId.of(r.provider, r.region, r.zone, r.instance_type)
        assert hours[market] >= r.usage_s / 3600 - 1e-9
    assert sum(hours.values()) == pytest.approx(sum(r.usage_s for r in ran) / 3600)


def test_a_job_whose_host_was_killed_recovers_and_its_ledger_equals_the_clouds_bill(
    flat_harness: Harness,
):
    """SIGKILL of an instance's host mid-job: the cloud fails the instance when it finds the host
    gone and bills it until then; the job recovers on another instance, and the ledger (the
    cloud's running_at … ended_at) equals the cloud's own bill to the micro-dollar."""
    h = flat_harness
    job_id = h.launch({**_spec(), "providers": {"allow": ["aws-sim"]}})
    (first, *_) = wait_for(lambda: h.running(job_id), scaled(30), what="a running instance")
    wait_for(lambda: _worker_started(h, job_id, first.instance_id), scaled(30), what="the worker")
    provider = h.providers[first.provider]
    row = provider.store.instance(first.instance_id)
    assert row is not None and row["host_pid"] and row["worker_pgid"]
    # The host alone, as a user's chaos kills it: the local cloud takes every process of the
    # instance down with it (its watchdog), as a VM dies whole, so no orphaned agent reports the
    # worker's end to the control plane and the job recovers elsewhere.
    os.kill(row["host_pid"], signal.SIGKILL)
    h.wait_state(job_id, {"succeeded"}, scaled(90), what="the job to recover and succeed")
    ours = lambda: [i for i in h.instances() if i.tags.get("spothop-job") == job_id]  # noqa: E731
    wait_for(
        lambda: all(not i.state.is_alive for i in ours()), scaled(30), what="every instance ended"
    )
    instances = ours()
    lost = next(i for i in instances if i.instance_id == first.instance_id)
    assert lost.state_reason == "instance host died" and len(instances) >= 2
    bill = sum(i.cost_microusd for i in instances)  # the cloud's own: its billing rows' sum
    for instance in instances:
        rows = h.providers[instance.provider].store.billing_rows(instance.instance_id)
        assert sum(r["cost_micro_usd"] for r in rows) == instance.cost_microusd
    with h.store() as store:
        ledger = Ledger(store, h.providers)
        records = ledger.update(job_id)
        assert all(r.closed and not r.price_missing for r in records)
        assert total_microusd(records) == bill, (records, instances)
        assert ledger.reconcile(job_id).difference_microusd == 0
