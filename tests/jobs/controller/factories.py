"""Small factories for decide's tables: a market of three zones, jobs, attempts, snapshots.

Everything is a real spothop type (JobSpec from ``load_job``, the scheduler's
MarketView, the providers' Instance), filled with plausible values, so a test
names only what it is about. Times are the snapshot's virtual clock (NOW).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from spothop.jobs.controller import Action, AttemptView, JobView, Launch, Snapshot
from spothop.jobs.controller.snapshot import TAG_JOB, TAG_NODE, TAG_TOKEN
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.spec import JobSpec, load_job
from spothop.providers.base import Instance, InstanceState
from spothop.providers.fake.factories import make_offerings
from spothop.queue.model import QueueStats
from spothop.resources.market_id import MarketId
from spothop.scheduler.market_view import MarketKind, MarketState, MarketView
from spothop.wire.events import AgentEvent

NOW = 100_000.0
PROVIDER = "fake"
REGION = "fake-1"
ZONES = ("fake-1a", "fake-1b", "fake-1c")
H100 = "gpu.h100x1"
A100 = "gpu.a100x1"
BOOT_S = 60.0
CALM_RATE_PER_H = 0.02  # below the conservative policy's limit (0.05/h)


def spec(**fields: Any) -> JobSpec:
    """A task job (or ``kind="batch"``: 4 workers over s3 inputs) with any field set."""
    data: dict[str, Any] = {"name": "train", "run": "python train.py", **fields}
    if data.get("kind") == "batch":
        data.setdefault("workers", 4)
        data.setdefault("batch", {"inputs": ["s3://in/*.jsonl"], "output": "s3://out/embed"})
    return load_job(data, base_dir=Path("."))


def market(
    rates: Mapping[tuple[str, str], float] | None = None,
    unavailable: Iterable[tuple[str, str]] = (),
    default_rate_per_h: float = CALM_RATE_PER_H,
) -> MarketView:
    """Both default types in three zones; ``rates`` and ``unavailable`` keyed by (zone, type)."""
    offerings = make_offerings(provider=PROVIDER, region=REGION, zones=ZONES)
    rates = dict(rates or {})
    off = set(unavailable)
    markets = {
        o.market_id: MarketState(
            o.market_id,
            available=(o.zone, o.instance_type) not in off,
            preemption_rate_per_h=rates.get((o.zone or "", o.instance_type), default_rate_per_h),
        )
        for o in offerings
    }
    return MarketView(
        now=NOW, offerings=tuple(offerings), markets=markets, boot_s={PROVIDER: BOOT_S}
    )


def market_id(zone: str = ZONES[0], instance_type: str = A100) -> MarketId:
    return MarketId(PROVIDER, REGION, zone, instance_type)


def attempt(
    job_id: str = "j-1",
    node: int = 0,
    n: int = 0,
    zone: str = ZONES[0],
    instance_type: str = A100,
    kind: MarketKind = MarketKind.SPOT,
    state: AttemptState = AttemptState.RUNNING,
    **fields: Any,
) -> AttemptView:
    """Attempt ``n`` of ``node``: running since an hour ago, on instance ``i-<job>-<n>``."""
    base: dict[str, Any] = {
        "attempt_id": f"{job_id}-a{n}",
        "job_id": job_id,
        "node": node,
        "launch_token": f"{job_id}.a{n}",
        "provider": PROVIDER,
        "region": REGION,
        "zone": zone,
        "instance_type": instance_type,
        "market_kind": kind,
        "price_usd_per_hour": 1.0,
        "state": state,
        "launched_at": NOW - 3600 + n,
        "instance_id": f"i-{job_id}-{n}",
        "running_at": NOW - 3500 + n
        if state in (AttemptState.RUNNING, AttemptState.NOTICED)
        else None,
    }
    if state is AttemptState.ENDED:
        base["ended_at"] = NOW - 10
    base.update(fields)
    return AttemptView(**base)


def ended(reason: EndReason, **fields: Any) -> AttemptView:
    return attempt(state=AttemptState.ENDED, end_reason=reason, **fields)


def job(
    job_id: str = "j-1",
    state: JobState = JobState.RUNNING,
    attempts: Iterable[AttemptView] = (),
    job_spec: JobSpec | None = None,
    **fields: Any,
) -> JobView:
    return JobView(
        job_id=job_id,
        spec=job_spec or spec(),
        state=state,
        attempts=tuple(attempts),
        created_at=fields.pop("created_at", NOW - 7200),
        **fields,
    )


def queue(
    job_id: str = "j-1", pending: int = 10, leased: int = 2, done: int = 0, dead: int = 0
) -> QueueStats:
    return QueueStats(job_id, pending, leased, done, dead, 0, 0, 0, 0)


def instance_of(
    a: AttemptView, state: InstanceState = InstanceState.RUNNING, **fields: Any
) -> Instance:
    base: dict[str, Any] = {
        "instance_id": a.instance_id,
        "provider": a.provider,
        "region": a.region,
        "zone": a.zone,
        "instance_type": a.instance_type,
        "spot": a.market_kind is MarketKind.SPOT,
        "state": state,
        "launched_at": a.launched_at,
        "price_usd_per_hour": a.price_usd_per_hour,
        "tags": {TAG_JOB: a.job_id, TAG_NODE: str(a.node), TAG_TOKEN: a.launch_token},
    }
    base.update(fields)
    return Instance(**base)


def snapshot(
    jobs: Iterable[JobView],
    view: MarketView | None = None,
    events: Iterable[AgentEvent] = (),
    instances: Mapping[str, Instance] | None = None,
    cooldowns: Mapping[MarketId, float] | None = None,
    now: float = NOW,
) -> Snapshot:
    """The jobs' world: by default every live attempt's instance is listed, running (or pending)."""
    jobs = tuple(jobs)
    if instances is None:
        listed = {}
        for j in jobs:
            for a in j.attempts:
                if a.alive and a.instance_id:
                    live = (
                        InstanceState.PENDING
                        if a.state in (AttemptState.LAUNCHING, AttemptState.PENDING)
                        else InstanceState.RUNNING
                    )
                    listed[a.instance_id] = instance_of(a, live)
        instances = listed
    return Snapshot(
        now=now,
        jobs=jobs,
        market=view or market(),
        cooldowns=dict(cooldowns or {}),
        instances=dict(instances),
        listed_providers=frozenset({PROVIDER}),
        events=tuple(events),
    )


def stamp(a: AttemptView, t: float = NOW - 5) -> dict[str, Any]:
    """The common fields of an event about ``a``'s instance."""
    return {
        "instance_id": a.instance_id or "",
        "provider": a.provider,
        "region": a.region,
        "zone": a.zone or "",
        "instance_type": a.instance_type,
        "job_id": a.job_id,
        "time_unix_s": t,
        "event_id": f"e-{a.attempt_id}-{t}",
    }


def of_type(actions: Iterable[Action], cls: type) -> list[Any]:
    return [a for a in actions if isinstance(a, cls)]


def launches(actions: Iterable[Action]) -> list[Launch]:
    return of_type(actions, Launch)


def markets_of(launch: Launch) -> list[MarketId]:
    return [c.market_id for c in launch.candidates]
