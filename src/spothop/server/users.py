"""The user API (the server contract): jobs, instances, events, logs, reports, costs, offers, plans.

A user's token sees its project's jobs only; an agent's token may read its own
job (status, events, logs, report) and nothing else, and may not launch or
cancel. Every answer is the JSON the CLI prints with ``--json`` for the same
command (:mod:`spothop.server.views`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from spothop.server.auth import may_read_job, require_any, require_user
from spothop.server.models import JobBody, PlanBody
from spothop.server.settings import MAX_LIST_LIMIT
from spothop.state.tokens import Principal, TokenStore

router = APIRouter(prefix="/v1", tags=["users"])
JobPath = Annotated[str, Path(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9._-]+$")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)]
MAX_TAIL_BYTES = 1024 * 1024  # a log answer is bounded like a request body


def _tokens(request: Request) -> TokenStore:
    tokens: TokenStore = request.app.state.tokens
    return tokens


def _visible(request: Request, principal: Principal) -> set[str]:
    """The jobs ``principal`` may see: its project's, or (an agent) its own."""
    ids = {j.job_id for j in request.app.state.store.list_jobs()}
    if principal.kind == "agent":
        return ids & {principal.job_id or ""}
    return _tokens(request).project_jobs(principal.project or "", ids)


@router.post("/jobs", status_code=201)
def create_job(
    body: JobBody, request: Request, principal: Principal = Depends(require_user)
) -> JSONResponse:
    from spothop.jobs.reachable import check_reachable
    from spothop.server.views import spec_from_text

    spec = spec_from_text(body.spec, body.filename)
    check_reachable(spec)
    store = request.app.state.store
    job_id = store.create_job(spec)
    _tokens(request).assign_job(job_id, principal.project or "", principal.user_id)
    request.app.state.wake()
    job = store.get_job(job_id)
    return JSONResponse(
        {"job_id": job_id, "name": job.name, "state": str(job.state)}, status_code=201
    )


@router.get("/jobs")
def list_jobs(
    request: Request,
    state: Annotated[str | None, Query(max_length=16)] = None,
    limit: Limit = MAX_LIST_LIMIT,
    principal: Principal = Depends(require_any),
) -> dict[str, Any]:
    from spothop.server.views import job_list

    visible = _visible(request, principal)
    return {"jobs": job_list(request.app.state.store, state=state, limit=limit, only=visible)}


@router.get("/jobs/{job_id}")
def job_status(
    job_id: JobPath, request: Request, principal: Principal = Depends(require_any)
) -> dict[str, Any]:
    from spothop.cli.jobs import job_status as status

    may_read_job(request, principal, job_id)
    data: dict[str, Any] = status(request.app.state.store, job_id)
    return data


@router.post("/jobs/{job_id}/cancel")
def cancel_job(
    job_id: JobPath, request: Request, principal: Principal = Depends(require_user)
) -> dict[str, Any]:
    from spothop.server.views import request_cancel

    may_read_job(request, principal, job_id)
    answer = request_cancel(request.app.state.store, job_id, by=f"user {principal.user}")
    request.app.state.wake()
    return answer


@router.get("/jobs/{job_id}/events")
def job_events(
    job_id: JobPath,
    request: Request,
    after_id: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Limit = MAX_LIST_LIMIT,
    principal: Principal = Depends(require_any),
) -> dict[str, Any]:
    from spothop.server.views import job_events as read

    may_read_job(request, principal, job_id)
    return read(request.app.state.store, job_id, after_id=after_id, limit=limit)


@router.get("/jobs/{job_id}/logs")
def job_logs(
    job_id: JobPath,
    request: Request,
    node: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    tail_bytes: Annotated[int, Query(ge=0, le=MAX_TAIL_BYTES)] = MAX_TAIL_BYTES,
    principal: Principal = Depends(require_any),
) -> dict[str, Any]:
    from spothop.server.views import job_logs as read

    may_read_job(request, principal, job_id)
    logs = read(request.app.state.store, job_id, node=node, tail_bytes=tail_bytes)
    return {
        "logs": [
            {"node": e["node"], "attempt_id": e["attempt_id"], "instance_id": e["instance_id"],
             "provider": e["provider"], "text": e["log"]}
            for e in logs
        ]
    }


@router.get("/jobs/{job_id}/checkpoints")
def job_checkpoints(
    job_id: JobPath, request: Request, principal: Principal = Depends(require_any)
) -> dict[str, Any]:
    """Where the job's checkpoints and outputs go (its spec's URLs)."""
    may_read_job(request, principal, job_id)
    spec = request.app.state.store.get_job(job_id).spec()
    checkpoint = getattr(spec, "checkpoint", None)
    batch = getattr(spec, "batch", None)
    return {
        "job_id": job_id,
        "checkpoint_url": None if checkpoint is None else checkpoint.url,
        "output_url": None if batch is None else batch.output,
    }


@router.get("/jobs/{job_id}/report")
def job_report(
    job_id: JobPath, request: Request, principal: Principal = Depends(require_any)
) -> dict[str, Any]:
    from spothop.server.views import job_report as build

    may_read_job(request, principal, job_id)
    return build(request.app.state.store, job_id, request.app.state.providers())


@router.get("/instances")
def instances(
    request: Request,
    job_id: Annotated[str | None, Query(min_length=1, max_length=32)] = None,
    principal: Principal = Depends(require_any),
) -> dict[str, Any]:
    from spothop.server.views import instances as read

    visible = _visible(request, principal)
    if job_id is not None:
        may_read_job(request, principal, job_id)
        visible &= {job_id}
    return {"instances": read(request.app.state.store, visible)}


@router.get("/costs")
def costs(
    request: Request,
    since_unix_s: Annotated[float, Query(ge=0, le=1e11, allow_inf_nan=False)] = 0.0,
    principal: Principal = Depends(require_user),
) -> dict[str, Any]:
    from spothop.server.views import costs as read

    visible = _visible(request, principal)
    store = request.app.state.store
    return {"since_unix_s": since_unix_s, "jobs": read(store, request.app.state.providers(), visible, since_unix_s)}


@router.get("/offers")
def offers(
    request: Request,
    gpu: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    max_price_usd_per_hour: Annotated[
        float | None, Query(gt=0, le=1e6, allow_inf_nan=False)
    ] = None,
    limit: Limit = 100,
    principal: Principal = Depends(require_user),
) -> dict[str, Any]:
    from spothop.server.views import offers as read

    del request, principal
    return {"offers": read(gpu=gpu, max_usd_per_gpu_hour=max_price_usd_per_hour, limit=limit)}


@router.post("/plans")
def plans(
    body: PlanBody, request: Request, principal: Principal = Depends(require_user)
) -> dict[str, Any]:
    from spothop.server.views import plan, spec_from_text

    del request, principal
    return plan(spec_from_text(body.spec, body.filename), body.limit)


@router.get("/whoami")
def whoami(principal: Principal = Depends(require_any)) -> dict[str, Any]:
    """Who the token speaks for (never the token)."""
    return principal.to_dict()
