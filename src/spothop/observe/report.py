"""Reports: what a job cost, what on-demand would have cost for the same useful work, and where it went.

The contract (``docs/observe.md`` draws the figures):

1. **Cost** is the ledger's (:mod:`.ledger`): the sum of the job's priced
   records. Records without a price are listed in ``missing_prices`` and
   make every figure that needs them None — never counted as 0.
2. **Useful work**, per attempt, in GPU-seconds: its billed seconds less
   - *overhead*: seconds billed beyond the running time (a minimum, rounding)
     and, for an interrupted attempt, the notice's lead time (the save, the
     wind-down: paid, not working; its share of the attempt's run from the
     controller's times where it has them);
   - *recomputed*: for a batch job, its share of the shards that went back to
     the queue (``recomputed_fraction`` = shards released ÷ shard runs);
     for a task job, the whole run of an interrupted attempt whose worker
     did not report a save (``saved``: it restarts from an older checkpoint,
     or from the start), none for one that saved.
   - *unreported*: the whole working time of an attempt whose agent reported
     no work (:mod:`.work`: no worker step or worker beat in its heartbeats,
     no checkpoint saved, no clean worker exit, no shard done). A billed
     instance whose worker never ran did nothing useful; the report lists
     those attempts (``unreported_attempts``) and says so.
   ``goodput`` = useful ÷ paid GPU-seconds: it counts only work the agents reported.
3. **On-demand cost for the same useful work on the same GPUs**: each
   attempt's useful seconds at the on-demand price of the same offering
   (provider, zone, instance type, from the provider's catalog), plus what
   an on-demand run would also pay (:class:`OnDemandRun`): each node boots
   once (its provider's ``Capabilities.typical_boot_s``) and is billed under
   its provider's billing rule (minimum, increments) for that boot and its
   useful work (a provider that names no boot time: placement's
   ``DEFAULT_BOOT_S``); the saving is that less the cost. ``on_demand_includes``
   says so.
7. **Reconciliation** per provider (:mod:`.reconcile`): the ledger against
   the provider's bill where it has one ("reconciled against <source>: Δ N
   µUSD"), else "estimated, not reconciled" (its figure is its adapter's own
   estimate, from the ledger's own price).
4. **Cost per effective-TFLOPS-hour**: the cost over the useful
   effective-TFLOPS-hours (GPUs × each offering's effective TFLOPS per GPU).
5. Splits by provider, zone and market; ``interruptions`` with their lead
   times from the event stream (:mod:`.events`).
6. ``restores``: each restore a worker made, as the checkpoint library
   recorded it in the job's checkpoint location
   (:mod:`spothop.checkpoint.replicas`): the checkpoint, the store that served
   it (``local``, a replica's region, ``primary``), the instance's region,
   whether that was its own region, and the seconds taken.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spothop.checkpoint.replicas import RestoreRecord
from spothop.jobs.records import AttemptRecord, JobRecord
from spothop.observe.batch_figures import (
    OUTPUTS_PUBLISHED,
    SHARDS_ENQUEUED,
    outputs_of,
    shards_run_of,
)
from spothop.observe.billing import SECONDS_PER_HOUR, known_price, microusd, usd
from spothop.observe.events import StreamEvent
from spothop.observe.ledger_record import LedgerRecord
from spothop.observe.reconcile import BillSources, reconcile
from spothop.observe.work import WORK_KINDS, Beat, ReportedWork, reported_work
from spothop.providers.base import BillingRule, Capabilities
from spothop.resources.offering import Offering
from spothop.scheduler.market_view import DEFAULT_BOOT_S

log = logging.getLogger("spothop.observe")

BATCH = "batch"
SAVED = "saved"  # the worker said it saved (an emergency checkpoint): its work is kept
SEEN_KINDS = ("interruption", "final_notice")  # an interruption, as the agent or its notice saw it
# Every kind of event build_report reads: job_report reads only these from the stream, not the
# thousands of others (probes, heartbeats' events) a job's agents may have sent.
REPORT_KINDS = frozenset({*SEEN_KINDS, SHARDS_ENQUEUED, OUTPUTS_PUBLISHED, *WORK_KINDS})


@dataclass(frozen=True)
class InterruptionSeen:
    """One interruption the job survived: where, why, with what notice, what was saved and how fast."""

    time_unix_s: float
    instance_id: str | None
    provider: str | None
    zone: str | None
    instance_type: str | None
    cause: str | None
    lead_time_s: float | None
    saved: str | None
    save_s: float | None
    shards_released: int | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Split:
    """The cost of one provider, zone or market of a job (or of a group across jobs)."""

    key: str
    cost_microusd: int
    billed_s: float
    attempts: int
    interruptions: int = 0
    price_missing: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "cost_microusd": self.cost_microusd,
            "cost_usd": usd(self.cost_microusd),
            "billed_s": self.billed_s,
            "attempts": self.attempts,
            "interruptions": self.interruptions,
            "price_missing": self.price_missing,
        }


@dataclass(frozen=True)
class AttemptWork:
    """One attempt's paid, overhead, recomputed and useful GPU-seconds, and its prices."""

    record: LedgerRecord
    gpus: int
    paid_gpu_s: float
    overhead_gpu_s: float
    recomputed_gpu_s: float
    on_demand_price_usd_per_hour: float | None
    effective_tflops_per_gpu: float | None
    unreported_gpu_s: float = 0.0  # working time with no work reported by its agent (rule 2)
    reported: ReportedWork | None = None  # what its agent reported (None: nothing)

    @property
    def useful_gpu_s(self) -> float:
        lost = self.overhead_gpu_s + self.recomputed_gpu_s + self.unreported_gpu_s
        return max(0.0, self.paid_gpu_s - lost)


ON_DEMAND_INCLUDES = (
    "the useful work at the same offerings' on-demand prices, plus one boot per node "
    "(its provider's typical boot time) and its provider's billing minimum and increments"
)


@dataclass(frozen=True)
class OnDemandRun:
    """What an on-demand run of one node would pay besides its useful work (module contract, 3):
    one boot, and its billing rule's minimum and increments over the boot and the work."""

    node: int
    boot_s: float
    useful_s: float  # the node's useful instance-seconds
    billed_s: float  # its billing rule over boot_s + useful_s
    price_usd_per_hour: float | None  # on-demand, of the node's first offering that did work

    @property
    def extra_s(self) -> float:
        return max(0.0, self.billed_s - self.useful_s)

    @property
    def extra_microusd(self) -> int | None:
        if self.price_usd_per_hour is None:
            return None if self.extra_s > 0 else 0
        return microusd(self.price_usd_per_hour, self.extra_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "boot_s": self.boot_s,
            "useful_s": self.useful_s,
            "billed_s": self.billed_s,
            "extra_microusd": self.extra_microusd,
        }


def on_demand_runs(
    work: Sequence[AttemptWork], capabilities: Mapping[str, Capabilities]
) -> tuple[OnDemandRun, ...]:
    """Per node that did useful work, its on-demand run (:class:`OnDemandRun`): booted once on
    its first useful attempt's provider, billed under that provider's rule."""
    useful: dict[int, float] = defaultdict(float)
    first: dict[int, AttemptWork] = {}
    for w in work:
        if w.useful_gpu_s <= 0:
            continue
        useful[w.record.node] += w.useful_gpu_s / w.gpus
        first.setdefault(w.record.node, w)
    runs = []
    for node in sorted(first):
        w = first[node]
        caps = capabilities.get(w.record.provider)
        typical = caps.typical_boot_s if caps is not None else None
        boot_s = DEFAULT_BOOT_S if typical is None else typical  # as placement assumes
        rule = caps.billing if caps is not None else BillingRule()
        billed = rule.billed_seconds(boot_s + useful[node])
        runs.append(OnDemandRun(node, boot_s, useful[node], billed, w.on_demand_price_usd_per_hour))
    return tuple(runs)


@dataclass(frozen=True)
class JobReport:
    """Everything ``spothop report JOB`` shows (module contract)."""

    job_id: str
    name: str
    state: str
    kind: str
    records: tuple[LedgerRecord, ...]
    work: tuple[AttemptWork, ...]
    interruptions: tuple[InterruptionSeen, ...]
    shards_run: int | None
    shards_released: int
    preempted: frozenset[str] = (
        frozenset()
    )  # the attempts with a ledger record the cloud interrupted
    preempted_attempts: frozenset[str] = frozenset()  # every attempt the cloud interrupted
    outputs: Mapping[str, Any] = field(default_factory=dict)
    restores: tuple[RestoreRecord, ...] = ()  # oldest first (module contract, 6)
    bill_sources: BillSources = field(default_factory=dict)  # by provider (module contract, 7)
    on_demand_runs: tuple[OnDemandRun, ...] = ()  # what on-demand would also pay (contract, 3)

    @property
    def interruption_count(self) -> int:
        """The attempts the cloud interrupted, as every surface counts them
        (:func:`spothop.observe.figures.interruption_count`)."""
        return len(self.preempted_attempts)

    @property
    def missing_prices(self) -> tuple[str, ...]:
        return tuple(
            f"{r.provider} {r.instance_type} in {r.zone or r.region} "
            f"({r.market_kind}, attempt {r.attempt_id})"
            for r in self.records
            if r.price_missing
        )

    @property
    def cost_microusd(self) -> int | None:
        if self.missing_prices:
            return None
        return sum(r.cost_microusd or 0 for r in self.records)

    @property
    def known_cost_microusd(self) -> int:
        return sum(r.cost_microusd or 0 for r in self.records)

    @property
    def paid_gpu_s(self) -> float:
        return sum(w.paid_gpu_s for w in self.work)

    @property
    def useful_gpu_s(self) -> float:
        return sum(w.useful_gpu_s for w in self.work)

    @property
    def recomputed_gpu_s(self) -> float:
        return sum(w.recomputed_gpu_s for w in self.work)

    @property
    def unreported_gpu_s(self) -> float:
        return sum(w.unreported_gpu_s for w in self.work)

    @property
    def unreported_attempts(self) -> tuple[str, ...]:
        """The attempts that worked (billed past their overhead) with no work their agent reported."""
        return tuple(w.record.attempt_id for w in self.work if w.unreported_gpu_s > 0)

    @property
    def goodput(self) -> float | None:
        return self.useful_gpu_s / self.paid_gpu_s if self.paid_gpu_s else None

    @property
    def recomputed_fraction(self) -> float | None:
        return self.recomputed_gpu_s / self.paid_gpu_s if self.paid_gpu_s else None

    @property
    def recomputed_cost_microusd(self) -> int | None:
        total = 0
        for w in self.work:
            if w.record.price_usd_per_hour is None:
                if w.recomputed_gpu_s:
                    return None
                continue
            total += microusd(w.record.price_usd_per_hour, w.recomputed_gpu_s / w.gpus)
        return total

    @property
    def on_demand_cost_microusd(self) -> int | None:
        """The useful work at the same offerings' on-demand prices, plus each node's one boot and
        billing minimum (:data:`ON_DEMAND_INCLUDES`; None: a price is missing)."""
        total = 0
        for w in self.work:
            if w.useful_gpu_s <= 0:
                continue
            if w.on_demand_price_usd_per_hour is None:
                return None
            total += microusd(w.on_demand_price_usd_per_hour, w.useful_gpu_s / w.gpus)
        for run in self.on_demand_runs:
            extra = run.extra_microusd
            if extra is None:
                return None
            total += extra
        return total

    @property
    def missing_on_demand_prices(self) -> tuple[str, ...]:
        return tuple(
            sorted(
                {
                    f"{w.record.provider} {w.record.instance_type} in "
                    f"{w.record.zone or w.record.region}"
                    for w in self.work
                    if w.on_demand_price_usd_per_hour is None and w.useful_gpu_s > 0
                }
            )
        )

    @property
    def saving_microusd(self) -> int | None:
        cost, on_demand = self.cost_microusd, self.on_demand_cost_microusd
        return None if cost is None or on_demand is None else on_demand - cost

    @property
    def effective_tflops_hours(self) -> float | None:
        total = 0.0
        for w in self.work:
            if w.useful_gpu_s <= 0:
                continue
            if w.effective_tflops_per_gpu is None:
                return None
            total += w.useful_gpu_s / SECONDS_PER_HOUR * w.effective_tflops_per_gpu
        return total

    @property
    def usd_per_effective_tflops_hour(self) -> float | None:
        cost, hours = self.cost_microusd, self.effective_tflops_hours
        return None if cost is None or not hours else (usd(cost) or 0.0) / hours

    def split(self, by: str) -> list[Split]:
        """Cost by ``provider``, ``zone`` or ``market``."""
        return split_records(self.records, by, self.preempted)

    def to_dict(self) -> dict[str, Any]:
        reconciliation = reconcile(self.records, self.bill_sources)
        return {
            "job_id": self.job_id,
            "name": self.name,
            "state": self.state,
            "kind": self.kind,
            "cost_usd": usd(self.cost_microusd),
            "cost_microusd": self.cost_microusd,
            "known_cost_usd": usd(self.known_cost_microusd),
            "missing_prices": list(self.missing_prices),
            "on_demand_cost_usd": usd(self.on_demand_cost_microusd),
            "on_demand_cost_microusd": self.on_demand_cost_microusd,
            "on_demand_includes": ON_DEMAND_INCLUDES,
            "on_demand_runs": [r.to_dict() for r in self.on_demand_runs],
            "missing_on_demand_prices": list(self.missing_on_demand_prices),
            "saving_usd": usd(self.saving_microusd),
            "saving_fraction": (
                self.saving_microusd / self.on_demand_cost_microusd
                if self.saving_microusd is not None and self.on_demand_cost_microusd
                else None
            ),
            "interruptions": [i.to_dict() for i in self.interruptions],
            "interruption_count": self.interruption_count,
            "paid_gpu_s": self.paid_gpu_s,
            "useful_gpu_s": self.useful_gpu_s,
            "recomputed_gpu_s": self.recomputed_gpu_s,
            "recomputed_fraction": self.recomputed_fraction,
            "recomputed_cost_usd": usd(self.recomputed_cost_microusd),
            "shards_run": self.shards_run,
            "shards_released": self.shards_released,
            "goodput": self.goodput,
            "goodput_basis": "work the agents reported",
            "unreported_gpu_s": self.unreported_gpu_s,
            "unreported_attempts": list(self.unreported_attempts),
            "effective_tflops_hours": self.effective_tflops_hours,
            "usd_per_effective_tflops_hour": self.usd_per_effective_tflops_hour,
            "by_provider": [s.to_dict() for s in self.split("provider")],
            "by_zone": [s.to_dict() for s in self.split("zone")],
            "by_market": [s.to_dict() for s in self.split("market")],
            "reconciliation": {
                "ledger_microusd": reconciliation.ledger_microusd,
                "provider_microusd": reconciliation.provider_microusd,
                "difference_microusd": reconciliation.difference_microusd,
                "unmatched": [line.attempt_id for line in reconciliation.unmatched],
                "by_provider": [p.to_dict() for p in reconciliation.by_provider],
            },
            "records": [r.to_dict() for r in self.records],
            "outputs": dict(self.outputs),
            "restores": [r.to_dict() for r in self.restores],
        }


def split_records(
    records: Iterable[LedgerRecord], by: str, preempted: frozenset[str] = frozenset()
) -> list[Split]:
    """Records grouped by ``provider``, ``zone``, ``market``, ``job``, ``instance_type`` or ``tag``."""
    groups: dict[str, list[LedgerRecord]] = defaultdict(list)
    for r in records:
        for key in _keys(r, by):
            groups[key].append(r)
    return [
        Split(
            key,
            sum(r.cost_microusd or 0 for r in rs),
            sum(r.billed_s for r in rs),
            len(rs),
            sum(1 for r in rs if r.attempt_id in preempted),
            sum(1 for r in rs if r.price_missing),
        )
        for key, rs in sorted(groups.items())
    ]


GROUPINGS = ("provider", "zone", "market", "job", "instance_type", "tag")


def _keys(r: LedgerRecord, by: str) -> list[str]:
    if by == "provider":
        return [r.provider]
    if by == "zone":
        return [f"{r.provider}/{r.zone or r.region}"]  # a regional cloud's offerings: no zone
    if by == "market":
        return [r.market_kind]
    if by == "job":
        return [r.job_id]
    if by == "instance_type":
        return [f"{r.provider}/{r.instance_type}"]
    if by == "tag":
        return [f"{k}={v}" for k, v in sorted(r.tags.items()) if k != "spothop-token"]
    raise ValueError(f"cannot group by {by!r}: one of {', '.join(GROUPINGS)}")


def build_report(
    job: JobRecord,
    records: Sequence[LedgerRecord],
    attempts: Sequence[AttemptRecord],
    events: Sequence[StreamEvent],
    offerings: Mapping[tuple[str, str, str], Offering],
    restores: Sequence[RestoreRecord] = (),
    published_outputs: int | None = None,
    *,
    beats: Sequence[Beat] = (),
    shards_done_by_worker: Mapping[str, int] | None = None,
    sources: BillSources | None = None,
    capabilities: Mapping[str, Capabilities] | None = None,
) -> JobReport:
    """The report of ``job`` from its ledger records, attempts, event stream and the offerings by
    (provider, zone, instance type), its workers' restore records and (a batch job) how many
    outputs its output location holds (None: not read); ``beats``, the instances' latest
    heartbeats, and ``shards_done_by_worker`` (where read) with the stream say what work each
    agent reported (rule 2); ``sources`` each provider's bill (rule 7; none: nothing is
    reconciled); ``capabilities`` each provider's boot time and billing rule, for the on-demand
    run (rule 3; a provider not given, or without a typical boot time: placement's
    ``DEFAULT_BOOT_S``, billed by the second). Pure: no I/O."""
    reported = reported_work(events, beats, shards_done_by_worker)
    by_attempt = {a.attempt_id: a for a in attempts}
    interruptions = _interruptions(events)
    lead_by_instance = {i.instance_id: i for i in interruptions if i.instance_id}
    released = sum(i.shards_released or 0 for i in interruptions)
    shards_run = shards_run_of(events, released) if job.kind == BATCH else None
    batch_fraction = released / shards_run if shards_run else 0.0
    work = []
    preempted_ids: set[str] = set()
    for r in records:
        attempt = by_attempt.get(r.attempt_id)
        offering = offerings.get(
            (r.provider, r.zone or r.region, r.instance_type)
        )  # regional clouds
        gpus = offering.gpu_count if offering is not None else 1
        preempted = attempt is not None and attempt.interrupted
        seen = lead_by_instance.get(r.instance_id) if r.instance_id else None
        if preempted:
            preempted_ids.add(r.attempt_id)
        overhead_s = max(0.0, r.billed_s - r.usage_s)
        if preempted or seen is not None:
            overhead_s += _wind_down_s(r, attempt, seen)
        working_s = max(0.0, r.billed_s - overhead_s)
        done = reported.get(r.instance_id) if r.instance_id else None
        unreported_s = working_s if done is None else 0.0
        if done is None:
            recomputed_s = 0.0  # nothing reported done, nothing to do again: unreported instead
        elif job.kind == BATCH:
            recomputed_s = working_s * batch_fraction
        elif (preempted or seen is not None) and (seen is None or seen.saved != SAVED):
            recomputed_s = working_s
        else:
            recomputed_s = 0.0
        on_demand = (
            known_price(offering.on_demand_price_usd_per_hour) if offering is not None else None
        )
        work.append(
            AttemptWork(
                record=r,
                gpus=gpus,
                paid_gpu_s=r.billed_s * gpus,
                overhead_gpu_s=overhead_s * gpus,
                recomputed_gpu_s=recomputed_s * gpus,
                on_demand_price_usd_per_hour=on_demand,
                effective_tflops_per_gpu=(
                    offering.effective_tflops_per_gpu if offering is not None else None
                ),
                unreported_gpu_s=unreported_s * gpus,
                reported=done,
            )
        )
    taken = frozenset(a.attempt_id for a in attempts if a.interrupted)
    return JobReport(
        job_id=job.job_id,
        name=job.name,
        state=job.state.value,
        kind=job.kind,
        records=tuple(records),
        work=tuple(work),
        interruptions=_of_taken(interruptions, attempts, taken),
        shards_run=shards_run,
        shards_released=released,
        preempted=frozenset(preempted_ids),
        preempted_attempts=taken,
        outputs=outputs_of(events, published_outputs),
        restores=tuple(restores),
        bill_sources=dict(sources or {}),
        on_demand_runs=on_demand_runs(work, capabilities or {}),
    )


def _wind_down_s(
    r: LedgerRecord, attempt: AttemptRecord | None, seen: InterruptionSeen | None
) -> float:
    """Paid running seconds after the notice.

    The attempt's own times (the controller's clock) give the share of its run
    after the notice, applied to the running time on the cloud's clock (the two
    clocks may run at different speeds); without them, the notice's lead.
    """
    if attempt is not None:
        start, noticed, end = attempt.running_unix_s, attempt.noticed_unix_s, attempt.ended_unix_s
        if start is not None and noticed is not None and end is not None and end > start:
            return r.usage_s * min(1.0, max(0.0, (end - max(noticed, start)) / (end - start)))
    return min(r.usage_s, (seen.lead_time_s if seen else None) or 0.0)


def _interruptions(events: Sequence[StreamEvent]) -> tuple[InterruptionSeen, ...]:
    """One per instance: the agent's ``interruption`` event, else its final notice."""
    best: dict[str, StreamEvent] = {}
    for e in events:
        if e.kind not in SEEN_KINDS or not e.instance_id:
            continue
        if e.instance_id not in best or (
            e.kind == "interruption" and best[e.instance_id].kind != "interruption"
        ):
            best[e.instance_id] = e
    return tuple(
        InterruptionSeen(
            e.time_unix_s,
            e.instance_id,
            e.provider,
            e.zone,
            e.instance_type,
            e.cause,
            e.lead_time_s,
            e.saved,
            e.save_s,
            e.recomputed_shards,
        )
        for e in sorted(best.values(), key=lambda e: e.time_unix_s)
    )


def _of_taken(
    seen: Sequence[InterruptionSeen], attempts: Sequence[AttemptRecord], taken: frozenset[str]
) -> tuple[InterruptionSeen, ...]:
    """The interruptions an agent saw on an instance whose attempt the cloud interrupted (or on
    one no attempt names): a node stopped because its group's other node was preempted saw its
    stop too, but the cloud did not take it, and it is not an interruption the job survived."""
    attempt_of = {a.instance_id: a.attempt_id for a in attempts if a.instance_id}
    return tuple(
        i for i in seen if i.instance_id not in attempt_of or attempt_of[i.instance_id] in taken
    )
