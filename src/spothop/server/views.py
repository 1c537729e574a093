"""The JSON the user API answers: the same objects the CLI prints with ``--json``, built once.

Each function takes the store (and what else its command needs) and returns
plain JSON-ready values; the CLI's commands print them and the server's
routes return them (``GET /v1/jobs`` wraps the list as ``{"jobs": [...]}``).
The job's status is :func:`spothop.cli.jobs.job_status`, used as it is.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spothop.errors import ConfigError

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec
    from spothop.jobs.store import JobStore
    from spothop.providers.base import Provider


def job_list(
    store: JobStore,
    *,
    state: str | None = None,
    limit: int | None = None,
    only: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """``spothop jobs --json``: every job (those in ``only`` if given), oldest first."""
    from spothop.jobs.lifecycle import JobState

    states = None
    if state:
        try:
            states = [JobState(state)]
        except ValueError:
            known = ", ".join(s.value for s in JobState)
            raise ConfigError(f"state {state!r} is not a job state; use one of {known}") from None
    records = [r for r in store.list_jobs(states) if only is None or r.job_id in only]
    if limit is not None:
        records = records[-limit:]
    return [r.to_dict() for r in records]


def request_cancel(store: JobStore, job_id: str, by: str) -> dict[str, Any]:
    """``spothop cancel JOB --json``: the cancel recorded for the controller to carry out."""
    from spothop.jobs.errors import JobFinished

    job = store.get_job(job_id)
    if job.state.final:
        raise JobFinished(
            f"job {job_id} is already {job.state}; there is nothing to cancel "
            f"(spothop status {job_id} shows how it ended)"
        )
    store.record_event(job_id, "cancel_requested", {"by": by})
    return {"job_id": job_id, "cancel_requested": True}


def job_logs(
    store: JobStore, job_id: str, *, node: int | None = None, tail_bytes: int | None = None
) -> list[dict[str, Any]]:
    """``spothop logs JOB --json``: each attempt's log, oldest first (its last ``tail_bytes`` if given)."""
    from spothop.jobs.launcher import attempt_log_path

    store.get_job(job_id)
    return [
        {
            "attempt_id": a.attempt_id,
            "node": a.node,
            "instance_id": a.instance_id,
            "provider": a.provider,
            "log": read_tail(attempt_log_path(job_id, a.node, a.attempt_id), tail_bytes),
        }
        for a in store.attempts(job_id)
        if node is None or a.node == node
    ]


def read_tail(path: Path, tail_bytes: int | None = None) -> str:
    try:
        with open(path, "rb") as handle:
            if tail_bytes is not None:
                handle.seek(0, 2)
                handle.seek(max(0, handle.tell() - tail_bytes))
            return handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def job_report(
    store: JobStore, job_id: str, providers: Mapping[str, Provider]
) -> dict[str, Any]:
    """``spothop report JOB --json``: the report with its recommendations."""
    from spothop.observe.recommend import recommend
    from spothop.observe.report import job_report as build

    data = build(store, job_id, providers)
    return {**data.to_dict(), "recommendations": [a.to_dict() for a in recommend(data)]}


def job_events(
    store: JobStore, job_id: str, *, after_id: int = 0, limit: int = 1000
) -> dict[str, Any]:
    """One job's event stream (``spothop events --job JOB --json``, one object per event), from
    position ``after_id``; ``next_after_id`` is where the next read starts."""
    from spothop.observe.events import EventStream
    from spothop.observe.report import find_job

    find_job(store, job_id)
    batch, _cursor = EventStream(store).read(job_id)
    page = batch[after_id : after_id + limit]
    return {"events": [e.to_dict() for e in page], "next_after_id": after_id + len(page)}


def instances(store: JobStore, job_ids: Collection[str]) -> list[dict[str, Any]]:
    """The instances (attempts) of ``job_ids``, as ``status --json`` lists them, with their job."""
    out = []
    for a in store.attempts():
        if a.job_id not in job_ids:
            continue
        out.append(
            {
                "job_id": a.job_id,
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
            }
        )
    return out


def costs(
    store: JobStore,
    providers: Mapping[str, Provider],
    job_ids: Collection[str],
    since_unix_s: float = 0.0,
) -> list[dict[str, Any]]:
    """Each job's cost in the ledger (integer micro-dollars), for attempts launched since ``since_unix_s``."""
    from spothop.observe.ledger import Ledger

    recent = {
        a.attempt_id
        for a in store.attempts()
        if a.job_id in job_ids and (a.live or a.launched_unix_s >= since_unix_s)
    }
    per_job: dict[str, dict[str, Any]] = {}
    for r in Ledger(store, providers).update():
        if r.attempt_id not in recent:
            continue
        row = per_job.setdefault(
            r.job_id,
            {"job_id": r.job_id, "cost_microusd": 0, "billed_s": 0.0, "attempts": 0, "price_missing": 0},
        )
        row["attempts"] += 1
        row["billed_s"] += r.billed_s
        if r.cost_microusd is None:
            row["price_missing"] += 1
        else:
            row["cost_microusd"] += r.cost_microusd
    return sorted(per_job.values(), key=lambda r: r["job_id"])


def offers(
    *, gpu: str | None = None, max_usd_per_gpu_hour: float | None = None, limit: int | None = None,
    spot: bool = True,
) -> list[dict[str, Any]]:
    """``spothop offers --json``: the catalog's offerings matching, cheapest first."""
    from spothop.resources.catalog import OfferQuery, check_names, load_catalog

    if gpu is not None and not gpu.strip():
        raise ConfigError(
            "gpu is empty: give a GPU name, alias or family (`spothop gpus` lists them), or drop it"
        )
    query = OfferQuery(gpu=gpu, spot=spot, max_usd_per_gpu_hour=max_usd_per_gpu_hour, limit=limit)
    catalog = load_catalog()
    check_names(query, catalog)
    return [o.to_dict(spot) for o in catalog.query(query)]


def spec_from_text(text: str, filename: str = "job.yaml") -> JobSpec:
    """A job spec from YAML text sent to the server (named after ``filename`` when it has no name)."""
    import yaml

    from spothop.errors import JobSpecError
    from spothop.jobs.spec import _name_from, load_job

    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise JobSpecError(f"{Path(filename).name}: not valid YAML: {exc}") from None
    if isinstance(data, dict) and "name" not in data:
        name = _name_from(Path(filename))
        if name:
            data["name"] = name
    if not isinstance(data, dict):
        raise JobSpecError(
            f"{Path(filename).name}: a job spec is a mapping of fields, got {type(data).__name__}"
        )
    return load_job(data)


def plan(spec: JobSpec, limit: int) -> dict[str, Any]:
    """``spothop plan FILE --json`` for the job's own providers (no egress inputs)."""
    from spothop.cli.plan import plan_json, plan_providers

    data, _ranking, _chosen = plan_json(spec, plan_providers(spec), limit)
    return data
