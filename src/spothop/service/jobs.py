"""What each job command answers, built once: the CLI prints it, ``spothop server`` returns it.

Every function here takes the store (or the catalog, or a spec) and returns
the JSON-ready object that the command's ``--json`` prints — the same object
the user API of ``spothop server`` answers (``docs/server.md``), so the two
cannot drift apart:

=====================================  ==========================================  ===================
function                               CLI                                         server
=====================================  ==========================================  ===================
:func:`launch_job`                     ``launch --detach --json``                  ``POST /v1/jobs``
:func:`jobs_json`                      ``jobs --json``                             ``GET /v1/jobs`` (``{"jobs": …}``)
:func:`job_status`                     ``status JOB --json``                       ``GET /v1/jobs/{id}``
:func:`request_cancel`                 ``cancel JOB --json``                       ``POST /v1/jobs/{id}/cancel``
:func:`job_logs`                       ``logs JOB --json``                         ``GET /v1/jobs/{id}/logs`` (``{"logs": …}``)
:func:`stream_events`                  ``events --job JOB --json`` (one a line)    ``GET /v1/jobs/{id}/events`` (``{"events": …}``)
:func:`report_json`                    ``report JOB --json``                       ``GET /v1/jobs/{id}/report``
:func:`costs_json`                     ``report --since S --by B --json``          ``GET /v1/costs``
:func:`offers_json`                    ``offers --json``                           ``GET /v1/offers``
:func:`plan_request`                   ``plan FILE --json``                        ``POST /v1/plans``
=====================================  ==========================================  ===================

A list the server wraps in an object (``{"jobs": […]}``) is unwrapped by the
CLI's client before it prints, so ``--json`` is identical either way.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec
    from spothop.jobs.store import JobStore
    from spothop.observe.events import Cursor
    from spothop.providers.base import Provider
    from spothop.resources.catalog import OfferQuery

CANCEL_EVENT = "cancel_requested"


# -- launch, jobs, status ---------------------------------------------------------------


def check_launchable(spec: JobSpec) -> None:
    """What ``launch`` checks before a job is stored: its checkpoint and output URLs can be
    written (:class:`~spothop.errors.StorageUnreachable`), and some offering of the controller's
    providers meets it at all (:class:`~spothop.scheduler.errors.NoCandidates`, naming the
    requirement that excluded the most). No capacity *now* is not refused: the job waits."""
    from spothop.jobs.controller.daemon import default_providers
    from spothop.jobs.controller.place import plan_inputs
    from spothop.jobs.reachable import check_reachable
    from spothop.scheduler.errors import NoCapacityNow
    from spothop.scheduler.market_view import gather_market_view
    from spothop.scheduler.placement import rank

    check_reachable(spec)  # before anything is paid for
    providers = [p for n, p in default_providers().items() if n not in spec.providers.deny]
    profile, kinds, pools = plan_inputs(spec)
    view = gather_market_view(providers, on_error=lambda *_: None)
    with contextlib.suppress(NoCapacityNow):
        rank(view, spec.requirements(), profile, kinds, reserved=pools).raise_if_empty()


def launch_job(store: JobStore, spec: JobSpec) -> dict[str, Any]:
    """Store ``spec`` as a new job (pending): ``{"job_id", "name", "state"}``. Call
    :func:`check_launchable` first."""
    job_id = store.create_job(spec)
    job = store.get_job(job_id)
    return {"job_id": job.job_id, "name": job.name, "state": str(job.state)}


def jobs_json(
    store: JobStore, states: Sequence[str] | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Every job (oldest first), or those in ``states``: each record's own dict."""
    from spothop.jobs.lifecycle import JobState

    wanted = None if not states else [JobState(s) for s in states]
    return [r.to_dict() for r in store.list_jobs(wanted, limit=limit)]


def job_status(
    store: JobStore, job_id: str, *, events: bool = True, queue_url: str | None = None
) -> dict[str, Any]:
    """A job as ``status --json`` prints it: state, interruptions, instances, events, spend.

    A batch job's shard counts come from ``queue_url`` (the server passes its own queue), else
    from the queue of this home's running controller, else from the store."""
    job = store.get_job(job_id)
    attempts = store.attempts(job_id)
    clocks: dict[str, float] = {}
    instances = []
    spend = 0.0
    for a in attempts:
        if a.running_unix_s is not None:
            # Attempt times are on the provider's clock (jobs/controller/clock.py): so is "now".
            until = a.ended_unix_s if a.ended_unix_s is not None else _now_on(a.provider, clocks)
            spend += a.price_usd_per_hour * max(0.0, until - a.running_unix_s) / 3600
        if a.instance_id is None and a.end_reason is not None:
            continue  # a launch that failed: in the events, not an instance
        instances.append(
            {
                "instance_id": a.instance_id,
                "attempt_id": a.attempt_id,
                "node": a.node,
                "provider": a.provider,
                "region": a.region,
                "zone": a.zone,
                "instance_type": a.instance_type,
                "market": str(a.market_kind),
                "state": str(a.state),
                "end_reason": None if a.end_reason is None else str(a.end_reason),
                "price_usd_per_hour": a.price_usd_per_hour,
                "exit_code": a.exit_code,
                # A multi-node task's group generation and its node count (docs/multinode.md).
                "generation": a.generation,
                "group_nnodes": a.group_nnodes,
            }
        )
    # An interruption: the cloud took the instance, or noticed it would (a notice handed over
    # to a replacement by make-before-break counts too: the cloud was taking it).
    interruptions = sum(
        1 for a in attempts if str(a.end_reason) == "preempted" or a.noticed_unix_s is not None
    )
    out: dict[str, Any] = {
        "job_id": job.job_id,
        "name": job.name,
        "kind": job.kind,
        "state": str(job.state),
        "reason": job.reason,
        "interruptions": max(interruptions, job.interruptions),
        "on_demand_forced": job.on_demand_forced,
        "created_unix_s": job.created_unix_s,
        "updated_unix_s": job.updated_unix_s,
        "nodes": [n.to_dict() for n in job.nodes],
        "instances": instances,
        "launch_failures": [
            {
                "attempt_id": a.attempt_id,
                "provider": a.provider,
                "zone": a.zone,
                "instance_type": a.instance_type,
                "error_code": a.error_code,
                "error_message": a.error_message,
            }
            for a in attempts
            if a.end_reason is not None and str(a.end_reason) == "launch_failed"
        ],
        "spend_usd": round(spend, 6),
        "queue": _queue(job, queue_url),
    }
    out["progress"] = _job_progress(store, job.job_id, out["queue"])
    if events:
        out["events"] = [e.to_dict() for e in store.events(job_id)]
    return out


def _now_on(provider: str, cache: dict[str, float]) -> float:
    """Now on ``provider``'s clock: a local cloud's simulated one, the wall for every real cloud
    (making a real cloud's adapter would look for credentials; its clock is the wall anyway)."""
    if provider not in cache:
        from spothop.jobs.controller.clock import provider_now

        try:
            made = _local_provider(
                provider, os.environ.get("SPOTHOP_HOME"), os.environ.get("SPOTHOP_WORLD")
            )
        except Exception:  # no world here: the wall
            made = None
        cache[provider] = provider_now(made)
    return cache[provider]


@functools.lru_cache(maxsize=16)
def _local_provider(name: str, _home: str | None, _world: str | None) -> Any:
    """The local cloud's provider called ``name`` (None: not one of the world's clouds), made
    once per process for a home and a world file.

    Naming the world's clouds and making a provider load the world (its YAML, catalogs and
    replayed traces: about 0.1 s of CPU each for the demo world), and ``spothop launch``
    follows a job with a status every 0.5 s: done afresh each time, that was 95 CPU seconds
    of a 10-minute ``make run`` on 2 cores. The provider's clock reads the stored anchor on
    every call, so a kept one tells the time a new one would.
    """
    from spothop.jobs.controller.daemon import LOCAL_FAMILY
    from spothop.providers.registry import get_provider, members

    return get_provider(name) if name in members(LOCAL_FAMILY) else None


def _job_progress(store: JobStore, job_id: str, queue: dict[str, int] | None) -> dict[str, Any]:
    """``progress`` of ``status --json``: ``step``, the training step the job's workers last
    reported through their agents' heartbeats (the newest beat that carried one; null when no
    worker reported a step), and for a batch job ``shards_done`` and ``shards_total``."""
    from sqlalchemy import select

    from spothop.state.agent_tables import agent_heartbeats

    t = agent_heartbeats
    with store.engine.connect() as conn:
        row = conn.execute(
            select(t.c.worker_step)
            .where(t.c.job_id == job_id, t.c.worker_step.is_not(None))
            .order_by(t.c.time_unix_s.desc())
            .limit(1)
        ).first()
    out: dict[str, Any] = {"step": None if row is None else int(row[0])}
    if queue is not None:
        out["shards_done"] = queue["done"]
        out["shards_total"] = sum(queue.values())
    return out


def _queue(job: Any, url: str | None) -> dict[str, int] | None:
    if job.kind != "batch":
        return None
    from spothop.jobs.controller.daemon import status as controller_status
    from spothop.jobs.controller.observe import queue_stats

    if url is None:
        info = controller_status()
        url = None if info is None else _controller_queue(info)
    stats = queue_stats(url, job.job_id)
    if stats is None:
        return None
    return {
        "pending": stats.pending,
        "leased": stats.leased,
        "done": stats.done,
        "dead": stats.dead,
    }


def _controller_queue(info: Any) -> str | None:
    url = info.queue_url or info.store_url
    return None if url is None else str(url)


# -- cancel, logs, events ----------------------------------------------------------------


def request_cancel(store: JobStore, job_id: str, *, by: str = "spothop cancel") -> dict[str, Any]:
    """Ask the controller to end ``job_id`` (an event it acts on): ``{"job_id", "cancel_requested"}``.

    :class:`~spothop.jobs.errors.JobFinished` (exit 1) for a job in a final state.
    """
    from spothop.jobs.errors import JobFinished

    job = store.get_job(job_id)
    if job.state.final:
        raise JobFinished(
            f"job {job_id} is already {job.state}; there is nothing to cancel "
            f"(spothop status {job_id} shows how it ended)"
        )
    store.record_event(job_id, CANCEL_EVENT, {"by": by})
    return {"job_id": job_id, "cancel_requested": True}


def job_logs(
    store: JobStore, job_id: str, node: int | None = None, tail_bytes: int | None = None
) -> list[dict[str, Any]]:
    """Each attempt's worker output, oldest attempt first: ``attempt_id``, ``node``,
    ``instance_id``, ``provider``, ``zone``, ``instance_type``, ``market``, ``log`` (the last
    ``tail_bytes`` of it, when given).
    :class:`~spothop.jobs.errors.JobNotFound` (exit 3) for a job that does not exist."""
    from spothop.jobs.launcher import attempt_log_path

    store.get_job(job_id)
    return [
        {
            "attempt_id": a.attempt_id,
            "node": a.node,
            "instance_id": a.instance_id,
            "provider": a.provider,
            "zone": a.zone,
            "instance_type": a.instance_type,
            "market": str(a.market_kind),
            "log": read_log(attempt_log_path(job_id, a.node, a.attempt_id), tail_bytes),
        }
        for a in store.attempts(job_id)
        if node is None or a.node == node
    ]


def read_log(path: Path, tail_bytes: int | None = None) -> str:
    """A log file's text ("" when there is none yet); only its last ``tail_bytes`` when given."""
    try:
        with open(path, "rb") as handle:
            if tail_bytes is not None:
                handle.seek(0, 2)
                handle.seek(max(0, handle.tell() - tail_bytes))
            return handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def stream_events(
    store: JobStore, job_id: str | None, cursor: Cursor | None = None, limit: int | None = None
) -> tuple[list[dict[str, Any]], Cursor]:
    """The event stream (:class:`~spothop.observe.events.EventStream`) after ``cursor``, one job's
    or every job's, as dicts; and the next cursor (with ``limit``: at most that many events,
    and a cursor that resumes after them). An unknown job is
    :class:`~spothop.observe.report.UnknownJob` naming the nearest ids."""
    from spothop.observe.events import EventStream
    from spothop.observe.report import find_job

    if job_id is not None:
        find_job(store, job_id)
    batch, nxt = EventStream(store).read(job_id, cursor, limit=limit)
    return [e.to_dict() for e in batch], nxt


# -- reports -----------------------------------------------------------------------------


def report_json(store: JobStore, job_id: str, providers: Mapping[str, Provider]) -> dict[str, Any]:
    """``report JOB --json``: the job's report (its ledger brought up to date) and its
    recommendations."""
    from spothop.observe.recommend import recommend
    from spothop.observe.report import job_report

    data = job_report(store, job_id, providers)
    return {**data.to_dict(), "recommendations": [a.to_dict() for a in recommend(data)]}


def costs_json(
    store: JobStore,
    providers: Mapping[str, Provider],
    since: str = "30d",
    by: str = "provider",
    job_ids: Collection[str] | None = None,
) -> dict[str, Any]:
    """``report --since SINCE --by BY --json``: the ledger summed per group, over the attempts
    launched in the span (or still live), of the jobs in ``job_ids`` when given (the server
    passes a user's project's). :class:`~spothop.errors.ConfigError` for a bad span or
    grouping, naming the flag."""
    from spothop.errors import ConfigError
    from spothop.jobs.spec_values import parse_duration_s
    from spothop.observe.events import interrupted
    from spothop.observe.ledger import Ledger
    from spothop.observe.report import GROUPINGS, split_records

    if by not in GROUPINGS:
        raise ConfigError(f"--by {by!r}: use one of {', '.join(GROUPINGS)}")
    try:
        span_s = float(parse_duration_s(since))
    except (TypeError, ValueError):
        raise ConfigError(f"--since {since!r}: use a span like 30d, 12h or 2w") from None
    cutoff = time.time() - span_s
    attempts = store.attempts()
    recent = {
        a.attempt_id
        for a in attempts
        if (a.live or a.launched_unix_s >= cutoff) and (job_ids is None or a.job_id in job_ids)
    }
    preempted = frozenset(a.attempt_id for a in attempts if interrupted(a))
    records = [r for r in Ledger(store, providers).update() if r.attempt_id in recent]
    splits = split_records(records, by, preempted)
    return {"since": since, "by": by, "groups": [s.to_dict() for s in splits]}


# -- offers and plans --------------------------------------------------------------------


def offers_json(query: OfferQuery) -> list[dict[str, Any]]:
    """The catalog's offerings matching ``query``, cheapest first, each its own dict."""
    from spothop.resources.catalog import check_names, load_catalog

    catalog = load_catalog()
    check_names(query, catalog)
    return [o.to_dict(query.spot) for o in catalog.query(query)]


OFFER_QUERY_PARAMS = (
    "gpu",
    "count",
    "min_gpu_memory_gib",
    "min_tflops",
    "interconnect",
    "providers",
    "regions",
    "spot",
    "max_usd_per_gpu_hour",
    "sort",
    "limit",
)


def offer_query_params(query: OfferQuery) -> dict[str, Any]:
    """``query`` as the server's ``GET /v1/offers`` parameters (the fields that are set; lists
    comma-joined); :func:`offer_query_from_params` reads them back."""
    out: dict[str, Any] = {}
    for name in OFFER_QUERY_PARAMS:
        value = getattr(query, name)
        if value is None or value == ():
            continue
        if isinstance(value, tuple):
            value = ",".join(value)
        elif isinstance(value, bool):
            value = "true" if value else "false"
        out[name] = value
    return out


def offer_query_from_params(params: Mapping[str, str]) -> OfferQuery:
    """The :class:`OfferQuery` of ``GET /v1/offers``' parameters (the contract's
    ``max_price_usd_per_hour`` is a synonym of ``max_usd_per_gpu_hour``); a bad value is a
    :class:`~spothop.errors.ConfigError` naming it."""
    from spothop.errors import ConfigError
    from spothop.resources.catalog import OfferQuery

    def number(name: str, kind: type) -> Any:
        raw = params.get(name)
        if raw is None or raw == "":
            return None
        try:
            return kind(raw)
        except ValueError:
            raise ConfigError(f"{name}={raw!r}: expected a {kind.__name__}") from None

    spot = str(params.get("spot", "true")).lower()
    if spot not in ("true", "false", "1", "0"):
        raise ConfigError(f"spot={spot!r}: expected true or false")
    price = number("max_usd_per_gpu_hour", float)
    if price is None:
        price = number("max_price_usd_per_hour", float)
    return OfferQuery(
        gpu=params.get("gpu") or None,
        count=number("count", int),
        min_gpu_memory_gib=number("min_gpu_memory_gib", float),
        min_tflops=number("min_tflops", float),
        interconnect=params.get("interconnect") or None,
        providers=tuple(p for p in str(params.get("providers", "")).split(",") if p),
        regions=tuple(r for r in str(params.get("regions", "")).split(",") if r),
        spot=spot in ("true", "1"),
        max_usd_per_gpu_hour=price,
        sort=params.get("sort") or "price",
        limit=number("limit", int),
    )


def plan_json(
    spec: JobSpec,
    providers: Sequence[Provider],
    *,
    limit: int,
    data_gib: float = 0.0,
    data_at: tuple[str, str] | None = None,
    horizon_h: float | None = None,
    history: Any = None,
    checkpoint_gpu: str | None = None,
) -> dict[str, Any]:
    """``plan FILE --json``: the ranking (best ``limit`` candidates), the spread chosen for the
    job's nodes, and what was excluded. :class:`~spothop.scheduler.errors.NoCandidates` when no
    offering meets the spec. ``checkpoint_gpu``: rank as for a checkpoint made on that GPU
    (the compatibility matrix's refusals under ``refused``)."""
    from spothop.jobs.controller.observe import reserved_pools
    from spothop.jobs.controller.place import plan_inputs
    from spothop.scheduler.market_view import gather_market_view
    from spothop.scheduler.placement import rank
    from spothop.scheduler.spread import spread

    compat = spec.checkpoint.compatibility if spec.checkpoint is not None else None
    need = compat.need() if compat is not None else None  # --checkpoint-gpu applies it anyway
    req = spec.requirements().moving_from(checkpoint_gpu, need)
    profile, kinds, pools = plan_inputs(spec, reserved_pools({p.name: p for p in providers}))
    changes: dict[str, Any] = {"data_gib": data_gib, "data_location": data_at}
    if horizon_h is not None:
        changes["horizon_h"] = horizon_h
    profile = replace(profile, **changes)
    view = gather_market_view(list(providers), history)
    ranking = rank(view, req, profile, kinds, reserved=pools)
    ranking.raise_if_empty()
    chosen = spread(
        ranking.candidates,
        spec.node_count,
        spec.spread.min_zones,
        spec.spread.min_instance_types,
    )
    return {
        "job": spec.name,
        "now": view.now,
        "requirements": req.to_dict(),
        "market_kinds": [k.value for k in kinds],
        **ranking.to_dict(limit),
        "spread": [c.to_dict() for c in chosen],
        "node_count": spec.node_count,
        "min_zones": spec.spread.min_zones,
        "min_instance_types": spec.spread.min_instance_types,
    }


def plan_request(
    spec: JobSpec,
    provider_names: Sequence[str] = (),
    *,
    limit: int = 10,
    data_gib: float = 0.0,
    data_at: str | None = None,
    horizon_h: float | None = None,
    checkpoint_gpu: str | None = None,
) -> dict[str, Any]:
    """:func:`plan_json` from the command's own options (``--provider`` names, ``--data-at
    PROVIDER/REGION`` as text): what ``plan`` runs and ``POST /v1/plans`` answers."""
    from spothop.cli.plan import _data_at, _history, _providers

    return plan_json(
        spec,
        _providers(spec, list(provider_names)),
        limit=limit,
        data_gib=data_gib,
        data_at=_data_at(data_at, data_gib),
        horizon_h=horizon_h,
        history=_history,
        checkpoint_gpu=checkpoint_gpu,
    )
