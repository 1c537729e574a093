"""The dashboard's data: JSON-ready dicts, one function per endpoint, reusable by the server.

Every function reads one :class:`~spothop.jobs.store.JobStore` (and, where
it says, the shard queue and the providers' catalogs) and returns plain
JSON-ready values; the HTTP app (:mod:`spothop.dashboard.app`) only serves
them, so the REST server can mount the same functions.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Collection, Container, Mapping
from typing import Any

from spothop.errors import SpothopError
from spothop.jobs.lifecycle import AttemptState, NodeState
from spothop.jobs.store import JobStore
from spothop.observe.figures import spend_usd, with_figures
from spothop.observe.timeline import bars, cost_series

LIVE = (AttemptState.LAUNCHING, AttemptState.PENDING, AttemptState.RUNNING, AttemptState.NOTICED)


def jobs(
    store: JobStore, queue_url: str | None = None, only: Container[str] | None = None
) -> list[dict[str, Any]]:
    """Every job (those in ``only`` if given) with its progress (batch: shards done of all; else
    nodes done of all)."""
    from spothop.jobs.controller.observe import queue_stats

    attempts_by_job: dict[str, list[Any]] = defaultdict(list)
    for a in store.attempts():
        attempts_by_job[a.job_id].append(a)
    out = []
    for j in reversed(store.list_jobs()):
        if only is not None and j.job_id not in only:
            continue
        attempts = attempts_by_job.get(j.job_id, [])
        # Interruptions and node states as every surface shows them (observe/figures.py).
        j = with_figures(j, attempts)
        done = sum(1 for n in j.nodes if n.state is NodeState.DONE)
        total = max(1, len(j.nodes))
        unit = "nodes"
        if j.kind == "batch" and queue_url:
            try:
                stats = queue_stats(queue_url, j.job_id)
            except Exception:  # a queue that is down leaves the nodes' progress
                stats = None
            if stats is not None:
                total = max(1, stats.pending + stats.leased + stats.done + stats.dead)
                done, unit = stats.done, "shards"
        live = [a for a in attempts if a.state in LIVE]
        out.append(
            {
                "job_id": j.job_id,
                "name": j.name,
                "kind": j.kind,
                "state": j.state.value,
                "interruptions": j.interruptions,
                "created_unix_s": j.created_unix_s,
                "progress": {"done": done, "total": total, "unit": unit, "fraction": done / total},
                "instances": [
                    {
                        "provider": a.provider,
                        "zone": _place(a),
                        "instance_type": a.instance_type,
                        "market": a.market_kind,
                        "state": a.state.value,
                    }
                    for a in live
                ],
                "attempts": len(attempts),
                "preemptions": j.interruptions,
                "cost_usd": spend_usd(attempts),  # status' spend_usd (observe/figures.py)
            }
        )
    return out


def events(
    store: JobStore, after_seq: int = 0, limit: int = 200, only: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """The controller's job events after ``after_seq`` (the newest ``limit`` when 0), oldest first;
    only those of the jobs in ``only`` if given (chosen by the store's query: a store with a long
    history is not read whole)."""
    rows = store.events(
        after_seq=max(after_seq, 0), limit=limit, job_ids=only, newest=after_seq <= 0
    )
    return [
        {
            "seq": e.seq,
            "job_id": e.job_id,
            "time_unix_s": e.time_unix_s,
            "kind": e.kind,
            "data": dict(e.data),
        }
        for e in rows
    ]


def on_demand_prices(providers: Mapping[str, Any]) -> dict[tuple[str, str, str], float]:
    """On-demand USD per hour by (provider, zone or region, instance type), from the catalogs."""
    out: dict[tuple[str, str, str], float] = {}
    for name, provider in providers.items():
        try:
            offerings = provider.list_offerings()
        except SpothopError:
            continue
        for o in offerings:
            if o.on_demand_price_usd_per_hour is None:
                continue
            out[(name, o.zone or o.region, o.instance_type)] = o.on_demand_price_usd_per_hour
            out.setdefault((name, o.region, o.instance_type), o.on_demand_price_usd_per_hour)
    return out


def cost(
    store: JobStore,
    prices: Mapping[tuple[str, str, str], float],
    job_id: str | None = None,
    only: Container[str] | None = None,
) -> dict[str, Any]:
    """Cumulative cost against on-demand for the same instance time, over time (of the jobs in
    ``only`` if given)."""
    return cost_series(_of(store.attempts(job_id), only), prices)


def markets(store: JobStore, only: Container[str] | None = None) -> list[dict[str, Any]]:
    """The reliability table: per provider, zone and type, spothop's own attempts there (those of
    the jobs in ``only`` if given)."""
    now = time.time()
    table: dict[tuple[str, str, str], dict[str, Any]] = {}
    for a in _of(store.attempts(), only):
        if a.market_kind != "spot":
            continue
        row = table.setdefault(
            (a.provider, _place(a), a.instance_type),
            {
                "provider": a.provider,
                "zone": _place(a),
                "instance_type": a.instance_type,
                "attempts": 0,
                "preemptions": 0,
                "running_h": 0.0,
                "price_usd_per_hour": a.price_usd_per_hour,
            },
        )
        row["attempts"] += 1
        row["preemptions"] += int(a.interrupted)
        if a.running_unix_s is not None:
            row["running_h"] += max(0.0, (a.ended_unix_s or now) - a.running_unix_s) / 3600.0
    out = []
    for row in table.values():
        row["mtbf_h"] = row["running_h"] / row["preemptions"] if row["preemptions"] else None
        row["survival"] = 1.0 - row["preemptions"] / row["attempts"] if row["attempts"] else None
        out.append(row)
    return sorted(out, key=lambda r: (-(r["survival"] or 0), r["provider"], r["zone"]))


def _place(attempt: Any) -> str:
    """Where an attempt ran: its zone, or its region on a cloud whose offerings have no zone
    (a regional cloud's ``provider/`` said nothing)."""
    return str(attempt.zone or attempt.region)


def _of(attempts: list[Any], only: Container[str] | None) -> list[Any]:
    return attempts if only is None else [a for a in attempts if a.job_id in only]


def timeline(store: JobStore, job_id: str) -> dict[str, Any]:
    """One job's instances and preemptions (:func:`spothop.observe.timeline.job_timeline`)."""
    store.get_job(job_id)
    return {
        "job_id": job_id,
        "now_unix_s": time.time(),
        "bars": [b.to_dict() for b in bars(store.attempts(job_id))],
    }
