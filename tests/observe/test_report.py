"""Reports from plain records (no processes): on-demand for the same useful work, goodput from the
work the agents reported, missing prices, reconciliation against a bill where a provider has one."""

from __future__ import annotations

import dataclasses

import pytest

from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.records import AttemptRecord, JobRecord
from spothop.observe.events import StreamEvent, mtbf
from spothop.observe.ledger_record import LedgerRecord
from spothop.observe.recommend import recommend
from spothop.observe.reconcile import NOT_RECONCILED, reconcile
from spothop.observe.report import build_report, split_records
from spothop.observe.work import Beat
from spothop.providers.base import BillingRule, Capabilities
from spothop.providers.local.world import load_world
from spothop.scheduler.market_view import DEFAULT_BOOT_S

WORLD = load_world(None)


def _offering(cloud: str):
    return WORLD.offerings[cloud][0]


def _job(kind: str = "task") -> JobRecord:
    return JobRecord("j-000001", "r", kind, "{}", JobState.SUCCEEDED, 0, 0, 0, 0, False, "", 1)


def _attempt(
    aid: str, o, *, end: EndReason, noticed: float | None = None, final: bool = False
) -> AttemptRecord:
    """``final``: the notice was the cloud's final one (an interruption however it ended)."""
    return AttemptRecord(
        aid, "j-000001", 0, aid + "-t", o.provider, o.region, o.zone, o.instance_type, "spot",
        0.5, "i-" + aid, AttemptState.ENDED, 0.0, 0.0, noticed, 3600.0, end, None, None, None,
        notice_final=final,
    )  # fmt: skip


def _record(aid: str, o, price: float | None, cost: int | None, provider_cost: int | None):
    return LedgerRecord(
        aid, "j-000001", 0, o.provider, o.region, o.zone, o.instance_type, "spot", "i-" + aid,
        "USD", price, "placement", "provider", 0.0, 3600.0, 3600.0, 3600.0, cost, provider_cost,
        {}, {"spothop-job": "j-000001"}, True,
    )  # fmt: skip


def _interruption(aid: str, o, saved: str) -> StreamEvent:
    return StreamEvent(
        3000.0, "agent", "interruption", "j-000001", "i-" + aid, o.provider, o.zone,
        o.instance_type, "preempted", 120.0, saved, 1.0,
    )  # fmt: skip


def _finished(aid: str) -> StreamEvent:
    """The agent's report that the worker exited 0: it did its work."""
    data = {"kind": "worker_exited", "code": 0}
    return StreamEvent(3500.0, "agent", "worker_exited", "j-000001", "i-" + aid, data=data)


def _stepping(*aids: str) -> list[Beat]:
    """Heartbeats that carried the worker's training step: the agents reported work."""
    return [Beat("i-" + aid, worker_step=100) for aid in aids]


BILLED = "the local cloud's billing records"


def test_on_demand_prices_the_useful_work_on_the_same_offerings():
    a, b = _offering("aws-sim"), _offering("gcp-sim")
    records = [_record("a1", a, 0.5, 500_000, 500_000), _record("a2", b, 0.5, 500_000, 500_000)]
    attempts = [
        _attempt("a1", a, end=EndReason.PREEMPTED, noticed=3240.0),
        _attempt("a2", b, end=EndReason.SUCCEEDED),
    ]
    offerings = {(o.provider, o.zone, o.instance_type): o for o in (a, b)}
    seen = [_interruption("a1", a, "saved"), _finished("a2")]
    report = build_report(_job(), records, attempts, seen, offerings)
    data = report.to_dict()
    assert data["cost_microusd"] == 1_000_000 and data["missing_prices"] == []
    # The interrupted hour's last 10 % came after its notice: paid, not useful; it saved, so no recompute.
    assert report.goodput == pytest.approx(0.95)
    assert data["recomputed_fraction"] == 0
    # ... plus what an on-demand run would also pay: the node's one boot (no provider's boot
    # time given: placement's default) at the first offering's on-demand price.
    boot = round(a.on_demand_price_usd_per_hour * DEFAULT_BOOT_S / 3600 * 1e6)
    assert (
        data["on_demand_cost_microusd"]
        == round(a.on_demand_price_usd_per_hour * 0.9e6 + b.on_demand_price_usd_per_hour * 1e6)
        + boot
    )
    assert data["interruption_count"] == 1 and data["interruptions"][0]["lead_time_s"] == 120
    assert [s["key"] for s in data["by_provider"]] == ["aws-sim", "gcp-sim"]
    assert data["by_provider"][0]["interruptions"] == 1
    assert data["reconciliation"]["difference_microusd"] == 0


def test_on_demand_also_pays_one_boot_per_node_and_the_billing_minimum():
    a, b = _offering("aws-sim"), _offering("gcp-sim")
    records = [_record("a1", a, 0.5, 500_000, 500_000), _record("a2", b, 0.5, 500_000, 500_000)]
    attempts = [
        _attempt("a1", a, end=EndReason.PREEMPTED, noticed=3240.0),
        _attempt("a2", b, end=EndReason.SUCCEEDED),
    ]
    offerings = {(o.provider, o.zone, o.instance_type): o for o in (a, b)}
    seen = [_interruption("a1", a, "saved"), _finished("a2")]
    hourly = Capabilities(
        typical_boot_s=90.0, billing=BillingRule(increment_s=3600, minimum_s=3600)
    )
    data = build_report(
        _job(), records, attempts, seen, offerings, capabilities={a.provider: hourly}
    ).to_dict()
    work = a.on_demand_price_usd_per_hour * 0.9e6 + b.on_demand_price_usd_per_hour * 1e6
    # The node's 6840 useful seconds and a 90 s boot (6930 s) are billed as two whole hours:
    # 360 s more at the first offering's on-demand price.
    extra = round(a.on_demand_price_usd_per_hour * 360 / 3600 * 1e6)
    assert (
        data["on_demand_cost_microusd"]
        == round(a.on_demand_price_usd_per_hour * 0.9e6)
        + round(b.on_demand_price_usd_per_hour * 1e6)
        + extra
    )
    assert data["on_demand_cost_microusd"] > round(work)
    assert data["on_demand_runs"] == [
        {"node": 0, "boot_s": 90.0, "useful_s": 6840.0, "billed_s": 7200.0, "extra_microusd": extra}
    ]
    assert "one boot" in data["on_demand_includes"] and "minimum" in data["on_demand_includes"]


def test_an_interruption_that_saved_nothing_is_recomputed_work():
    a = _offering("aws-sim")
    records = [_record("a1", a, 0.5, 500_000, 500_000)]
    attempts = [_attempt("a1", a, end=EndReason.PREEMPTED, noticed=3240.0)]
    offerings = {(a.provider, a.zone, a.instance_type): a}
    seen = [_interruption("a1", a, "exited")]
    report = build_report(_job(), records, attempts, seen, offerings, beats=_stepping("a1"))
    assert report.recomputed_fraction == pytest.approx(0.9)
    assert report.recomputed_cost_microusd == 450_000
    assert any(r.kind == "low_goodput" for r in recommend(report))


def test_a_missing_price_is_reported_missing_never_zero():
    a, b = _offering("aws-sim"), _offering("gcp-sim")
    records = [_record("a1", a, None, None, 400_000), _record("a2", b, 0.5, 500_000, 500_000)]
    attempts = [
        _attempt("a1", a, end=EndReason.TERMINATED),
        _attempt("a2", b, end=EndReason.SUCCEEDED),
    ]
    offerings = {(o.provider, o.zone, o.instance_type): o for o in (a, b)}
    data = build_report(_job(), records, attempts, [], offerings).to_dict()
    assert data["cost_usd"] is None and data["known_cost_usd"] == 0.5
    assert len(data["missing_prices"]) == 1 and a.instance_type in data["missing_prices"][0]
    assert data["saving_usd"] is None
    sources = {a.provider: BILLED, b.provider: BILLED}
    unmatched = reconcile(records, sources).to_dict()["unmatched"]
    assert [line["attempt_id"] for line in unmatched] == ["a1"]
    assert (
        build_report(_job(), records, attempts, [], offerings).split("provider")[0].price_missing
        == 1
    )


def test_a_difference_with_the_clouds_bill_is_reported():
    a = _offering("aws-sim")
    reconciliation = reconcile([_record("a1", a, 0.5, 500_000, 500_060)], {a.provider: BILLED})
    assert reconciliation.difference_microusd == 60
    assert [line.attempt_id for line in reconciliation.differing] == ["a1"]
    (row,) = reconciliation.by_provider
    assert row.summary == f"reconciled against {BILLED}: Δ 60 µUSD"


def test_an_attempt_that_never_had_an_instance_has_no_bill_to_reconcile():
    a = _offering("aws-sim")
    refused = dataclasses.replace(_record("a2", a, 0.5, 0, None), instance_id=None)
    charged = dataclasses.replace(_record("a3", a, 0.5, 1_000, None), instance_id=None)
    records = [_record("a1", a, 0.5, 500_000, 500_000), refused, charged]
    reconciliation = reconcile(records, {a.provider: BILLED})
    # The refused launch is on neither bill; a charge without an instance is a discrepancy.
    assert [line.attempt_id for line in reconciliation.lines] == ["a1", "a3"]
    assert [line.attempt_id for line in reconciliation.unmatched] == ["a3"]
    assert reconciliation.difference_microusd == 0


def test_the_cheaper_spot_market_per_useful_unit_is_recommended():
    a, b = _offering("aws-sim"), _offering("gcp-sim")
    # Same hour on each; the first cost twice as much per useful unit.
    records = [_record("a1", a, 1.0, 1_000_000, None), _record("a2", b, 0.1, 100_000, None)]
    attempts = [
        _attempt("a1", a, end=EndReason.SUCCEEDED),
        _attempt("a2", b, end=EndReason.SUCCEEDED),
    ]
    offerings = {(o.provider, o.zone, o.instance_type): o for o in (a, b)}
    report = build_report(_job(), records, attempts, [], offerings, beats=_stepping("a1", "a2"))
    advice = [r for r in recommend(report) if r.kind == "raise_share"]
    cheaper = min((a, b), key=lambda o: (1.0 if o is a else 0.1) / o.effective_tflops_per_gpu)
    assert len(advice) == 1 and f"raise {cheaper.provider}'s share" in advice[0].message


def test_mtbf_is_running_time_over_interruptions():
    a = _offering("aws-sim")
    attempts = [
        _attempt("a1", a, end=EndReason.PREEMPTED),
        _attempt("a2", a, end=EndReason.TERMINATED, noticed=3000.0, final=True),
        _attempt("a3", a, end=EndReason.SUCCEEDED),
        _attempt("a4", a, end=EndReason.SUCCEEDED, noticed=3000.0),  # an advance notice alone
    ]
    (row,) = mtbf(attempts, [_record(x, a, 0.5, 1, 1) for x in ("a1", "a2", "a3", "a4")])
    assert (row.interruptions, row.attempts, row.mtbf_s) == (2, 4, 7200.0)


def test_grouping_by_an_unknown_key_is_refused():
    with pytest.raises(ValueError, match="cannot group by"):
        split_records([_record("a1", _offering("aws-sim"), 0.5, 1, 1)], "colour")


def test_a_regional_clouds_on_demand_price_is_found_by_its_region():
    """Azure-like clouds price by region: the record's zone is empty, its offering keyed by region."""
    o = next(x for x in WORLD.offerings["azure-sim"] if x.zone is None)
    records = [_record("r1", o, 0.2, 200_000, 200_000)]
    report = build_report(
        _job(),
        records,
        [_attempt("r1", o, end=EndReason.SUCCEEDED)],
        [_finished("r1")],
        {(o.provider, o.region, o.instance_type): o},
    )
    data = report.to_dict()
    assert data["missing_on_demand_prices"] == []
    assert data["on_demand_cost_microusd"] == round(o.on_demand_price_usd_per_hour * 1e6) + round(
        o.on_demand_price_usd_per_hour * DEFAULT_BOOT_S / 3600 * 1e6
    )


def test_a_group_stop_seen_by_the_other_node_is_not_an_interruption_survived():
    """A two-node job whose node 0 the cloud took: node 1's agent saw its own stop too, but
    the headline, the list and the per-provider row all count the one the cloud took."""
    o = _offering("aws-sim")
    attempts = [
        _attempt("a1", o, end=EndReason.PREEMPTED),
        dataclasses.replace(_attempt("a2", o, end=EndReason.TERMINATED), node=1),
    ]
    records = [_record(a, o, 0.5, 500_000, 500_000) for a in ("a1", "a2")]
    seen = [_interruption("a1", o, "saved"), _interruption("a2", o, "saved")]
    offerings = {(o.provider, o.zone, o.instance_type): o}
    data = build_report(_job(), records, attempts, seen, offerings).to_dict()
    assert data["interruption_count"] == 1
    assert [i["instance_id"] for i in data["interruptions"]] == ["i-a1"]
    assert sum(s["interruptions"] for s in data["by_provider"]) == 1


def test_a_regional_clouds_zone_row_names_its_region():
    o = _offering("aws-sim")
    record = dataclasses.replace(_record("a1", o, 0.5, 500_000, 500_000), zone="")
    (split,) = split_records([record], "zone")
    assert split.key == f"{o.provider}/{o.region}"


def test_an_estimate_is_not_reconciled_against_itself():
    """A provider with no bill (its figure is its adapter's estimate from the same price) is
    said to be estimated, not reconciled, and its figure does not count as agreement; one with a
    bill is reconciled against it by name."""
    a, b = _offering("aws-sim"), _offering("gcp-sim")
    records = [_record("a1", a, 0.5, 500_000, 500_000), _record("a2", b, 0.5, 500_000, 500_007)]
    attempts = [_attempt(x, o, end=EndReason.SUCCEEDED) for x, o in (("a1", a), ("a2", b))]
    offerings = {(o.provider, o.zone, o.instance_type): o for o in (a, b)}
    sources = {a.provider: None, b.provider: BILLED}
    data = build_report(
        _job(), records, attempts, [], offerings, beats=_stepping("a1", "a2"), sources=sources
    ).to_dict()["reconciliation"]
    rows = {p["provider"]: p for p in data["by_provider"]}
    assert rows[a.provider]["summary"] == NOT_RECONCILED
    assert (
        rows[a.provider]["reconciled"] is False and rows[a.provider]["difference_microusd"] is None
    )
    assert rows[b.provider]["summary"] == f"reconciled against {BILLED}: Δ 7 µUSD"
    # Only the bill counts: the estimate's 500_000 is in neither side's sum.
    assert (data["ledger_microusd"], data["provider_microusd"]) == (500_000, 500_007)
    assert data["difference_microusd"] == 7


def test_a_report_with_no_bill_source_reconciles_nothing():
    a = _offering("aws-sim")
    records = [_record("a1", a, 0.5, 500_000, 500_000)]
    attempts = [_attempt("a1", a, end=EndReason.SUCCEEDED)]
    offerings = {(a.provider, a.zone, a.instance_type): a}
    data = build_report(_job(), records, attempts, [_finished("a1")], offerings).to_dict()
    assert [p["summary"] for p in data["reconciliation"]["by_provider"]] == [NOT_RECONCILED]
    assert data["reconciliation"]["ledger_microusd"] == 0


def test_an_attempt_whose_agent_reported_no_work_has_no_useful_time():
    """A billed hour with no step, save, shard or clean exit reported is paid, not useful: the
    report says so rather than counting the instance's running time as work."""
    a = _offering("aws-sim")
    records = [_record("a1", a, 0.5, 500_000, 500_000), _record("a2", a, 0.5, 500_000, 500_000)]
    attempts = [_attempt(x, a, end=EndReason.SUCCEEDED) for x in ("a1", "a2")]
    offerings = {(a.provider, a.zone, a.instance_type): a}
    silent = build_report(_job(), records[:1], attempts[:1], [], offerings)
    assert silent.goodput == 0.0 and silent.unreported_attempts == ("a1",)
    (advice,) = [r for r in recommend(silent) if r.kind == "no_work_reported"]
    assert "1 attempt(s) (100% of the paid GPU time)" in advice.message and "a1" in advice.message
    assert not any(r.kind == "low_goodput" for r in recommend(silent))  # not a checkpointing fault
    assert silent.on_demand_cost_microusd == 0 and silent.recomputed_gpu_s == 0
    # A worker that failed (exit 1) and an agent's own state are no evidence of work either.
    failed = StreamEvent(3500.0, "agent", "worker_exited", "j-000001", "i-a2", data={"code": 1})
    beat = Beat("i-a2", worker_id="w-2")  # the agent beat; its worker never did
    data = build_report(_job(), records, attempts, [failed], offerings, beats=[beat]).to_dict()
    assert data["goodput"] == 0.0 and data["unreported_attempts"] == ["a1", "a2"]
    assert data["unreported_gpu_s"] == data["paid_gpu_s"] == 7200.0
    assert data["goodput_basis"] == "work the agents reported"
    # Each kind of report counts: a worker's beat, a save, shards done, a clean exit.
    beats = [Beat("i-a1", worker_heartbeat_unix_s=10.0), Beat("i-a2", worker_id="w-2")]
    worked = build_report(
        _job(), records, attempts, [], offerings, beats=beats, shards_done_by_worker={"w-2": 3}
    )
    assert worked.goodput == 1.0 and worked.unreported_attempts == ()
    saved = StreamEvent(1.0, "agent", "saved", "j-000001", "i-a1", saved="saved")
    one = build_report(_job(), records, attempts, [saved, _finished("a2")], offerings)
    assert one.goodput == 1.0
