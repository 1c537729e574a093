"""The user API (the server contract): jobs, instances, events, logs, reports, costs, offers, plans.

A user's token sees its project's jobs only (a job launched outside the server
is the ``default`` project's); an agent's token may read its own job (status,
events, logs, checkpoints, report) and may not launch, cancel or list others.
A job outside the caller's reach is a 403, whether or not it exists. Every
answer is the JSON the CLI prints with ``--json`` for the same command
(:mod:`spothop.service` builds both); a list is wrapped in an object
(``{"jobs": [...]}``).
"""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from spothop.errors import ConfigError, JobSpecError
from spothop.server.auth import may_read_job, require_any, require_user
from spothop.server.errors import error_responses
from spothop.server.models import JobBody, PlanBody
from spothop.server.settings import MAX_LIST_LIMIT
from spothop.state.tokens import Principal, TokenStore

router = APIRouter(
    prefix="/v1",
    tags=["users"],
    responses=error_responses(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
JobPath = Annotated[str, Path(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9._-]+$")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)]
MAX_TAIL_BYTES = 1024 * 1024  # a log answer is bounded like a request body
Text64 = Annotated[str | None, Query(min_length=1, max_length=64)]
Number = Annotated[float | None, Query(ge=0, le=1e6, allow_inf_nan=False)]


def _tokens(request: Request) -> TokenStore:
    tokens: TokenStore = request.app.state.tokens
    return tokens


def _visible(request: Request, principal: Principal) -> set[str]:
    """The jobs ``principal`` may see: its project's, or (an agent) its own."""
    if principal.kind == "agent":
        return {principal.job_id or ""}
    return _tokens(request).project_jobs(principal.project or "")


def spec_from_text(text: str, filename: str = "job.yaml") -> Any:
    """A job spec from the YAML (or JSON) text of a request, named after ``filename`` when it has
    no name. Its paths are the client's machine's (the CLI sends its spec resolved,
    ``spec.to_json()``): never resolved against, nor looked for on, this server's disk."""
    from spothop.jobs.spec import job_name_from, load_job, parse_job_text

    where = FilePath(filename).name or "job.yaml"
    data = parse_job_text(text, f"{where}: ")
    if not isinstance(data, dict):
        raise JobSpecError(f"{where}: a job spec is a mapping of fields, got {type(data).__name__}")
    if "name" not in data and (name := job_name_from(FilePath(where))):
        data["name"] = name
    return load_job(data, paths_here=False)


@router.post("/jobs", status_code=201)
def create_job(
    body: JobBody, request: Request, principal: Principal = Depends(require_user)
) -> JSONResponse:
    """Launch a job: validate its spec, check it can be placed, store it in the caller's project.
    Its ``workdir`` and local ``file_mounts`` are named by the archives the client uploaded
    (``code``: :mod:`spothop.server.code`); no path of the spec is read from this disk."""
    from spothop.server.code import uploaded_code
    from spothop.service.launch import check_launchable, launch_job

    spec = spec_from_text(body.spec, body.filename)
    uploaded = uploaded_code(principal, spec, body.code, request.app.state.code_archives)
    check_launchable(spec)
    answer = launch_job(request.app.state.store, spec, uploaded=uploaded)
    _tokens(request).assign_job(answer.job_id, principal.project or "", principal.user_id)
    request.app.state.wake()
    return JSONResponse(answer.to_dict(), status_code=201)


@router.get("/jobs")
def list_jobs(
    request: Request,
    state: Annotated[str | None, Query(max_length=200)] = None,
    limit: Limit = MAX_LIST_LIMIT,
    principal: Principal = Depends(require_any),
) -> dict[str, Any]:
    """The caller's jobs (``spothop jobs --json``), oldest first; ``state`` a comma-separated list."""
    from spothop.jobs.lifecycle import JobState
    from spothop.service.jobs import JobQuery, list_jobs

    states = [s.strip() for s in (state or "").split(",") if s.strip()]
    known = {s.value for s in JobState}
    if bad := [s for s in states if s not in known]:
        raise ConfigError(
            f"state {bad[0]!r} is not a job state; use one of {', '.join(sorted(known))}"
        )
    query = JobQuery(tuple(states), job_ids=_visible(request, principal), newest=limit)
    return list_jobs(request.app.state.store, query).to_dict()


@router.get("/jobs/{job_id}")
def job_status(
    job_id: JobPath, request: Request, principal: Principal = Depends(require_any)
) -> dict[str, Any]:
    """``spothop status JOB --json``."""
    from spothop.service.jobs import job_status as status

    may_read_job(request, principal, job_id)
    return status(
        request.app.state.store, job_id, queue_url=request.app.state.settings.jobs_queue_url
    ).to_dict()


@router.post("/jobs/{job_id}/cancel")
def cancel_job(
    job_id: JobPath, request: Request, principal: Principal = Depends(require_user)
) -> dict[str, Any]:
    """``spothop cancel JOB --json``: the controller terminates the job's instances."""
    from spothop.service.jobs import request_cancel

    may_read_job(request, principal, job_id)
    answer = request_cancel(request.app.state.store, job_id, by=f"user {principal.user}")
    request.app.state.wake()
    return answer.to_dict()


@router.get("/jobs/{job_id}/events")
def job_events(
    job_id: JobPath,
    request: Request,
    after_id: Annotated[str | None, Query(max_length=4096)] = None,
    limit: Limit = MAX_LIST_LIMIT,
    principal: Principal = Depends(require_any),
) -> dict[str, Any]:
    """The job's event stream (``spothop events --job JOB --json``) after the cursor ``after_id``
    (the ``next`` of the previous answer; none: from the start): at most ``limit`` events, the
    first stored; ``next`` resumes after the last of them (an empty page: none yet)."""
    from spothop.service.events import cursor_from_text, stream_events

    may_read_job(request, principal, job_id)
    store = request.app.state.store
    # At most ``limit`` events, and a cursor that resumes after them.
    return stream_events(store, job_id, cursor_from_text(after_id), limit=limit).to_dict()


@router.get("/jobs/{job_id}/logs")
def job_logs(
    job_id: JobPath,
    request: Request,
    node: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    tail_bytes: Annotated[int, Query(ge=0, le=MAX_TAIL_BYTES)] = MAX_TAIL_BYTES,
    principal: Principal = Depends(require_any),
) -> dict[str, Any]:
    """``spothop logs JOB --json``: each attempt's worker output (its last ``tail_bytes``)."""
    from spothop.service.logs import job_logs as read

    may_read_job(request, principal, job_id)
    return read(request.app.state.store, job_id, node, tail_bytes).to_dict()


@router.get("/jobs/{job_id}/checkpoints")
def job_checkpoints(
    job_id: JobPath, request: Request, principal: Principal = Depends(require_any)
) -> dict[str, Any]:
    """Where the job's checkpoints and outputs go (its spec's URLs)."""
    from spothop.service.jobs import job_storage

    may_read_job(request, principal, job_id)
    return job_storage(request.app.state.store, job_id).to_dict()


@router.get("/jobs/{job_id}/report")
def job_report(
    job_id: JobPath, request: Request, principal: Principal = Depends(require_any)
) -> dict[str, Any]:
    """``spothop report JOB --json`` (as of at most a few seconds ago: the replica shares a job's
    report among its callers for ``report_cache_s``)."""
    from spothop.service.report import job_report as report

    may_read_job(request, principal, job_id)
    store, providers = request.app.state.store, request.app.state.providers()
    # Shared by the callers of the next few seconds (settings.REPORT_CACHE_S), each checked above.
    answer: dict[str, Any] = request.app.state.reports.get(
        ("report", job_id), lambda: report(store, job_id, providers).to_dict()
    )
    return answer


@router.get("/instances")
def instances(
    request: Request,
    job_id: Annotated[str | None, Query(min_length=1, max_length=32)] = None,
    principal: Principal = Depends(require_any),
) -> dict[str, Any]:
    """The instances of the caller's jobs (or of ``job_id``), as ``status --json`` lists them."""
    from spothop.service.jobs import instances_of

    visible = _visible(request, principal)
    if job_id is not None:
        may_read_job(request, principal, job_id)
        visible &= {job_id}
    return {"instances": instances_of(request.app.state.store, visible)}


@router.get("/costs")
def costs(
    request: Request,
    since: Annotated[str, Query(min_length=1, max_length=16)] = "30d",
    by: Annotated[str, Query(min_length=1, max_length=16)] = "provider",
    principal: Principal = Depends(require_user),
) -> dict[str, Any]:
    """``spothop report --since S --by B --json`` over the caller's project's jobs (micro-dollars)."""
    from spothop.service.report import CostQuery
    from spothop.service.report import costs as sum_costs

    query = CostQuery(since, by, job_ids=_visible(request, principal))
    state = request.app.state
    return sum_costs(state.store, state.providers(), query).to_dict()


@router.get("/offers")
def offers(
    request: Request,
    gpu: Text64 = None,
    count: Annotated[int | None, Query(ge=1, le=64)] = None,
    min_gpu_memory_gib: Number = None,
    min_tflops: Number = None,
    interconnect: Annotated[str | None, Query(min_length=1, max_length=16)] = None,
    providers: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
    regions: Annotated[str | None, Query(min_length=1, max_length=2000)] = None,
    spot: Annotated[bool, Query()] = True,
    max_usd_per_gpu_hour: Number = None,
    max_price_usd_per_hour: Number = None,
    sort: Annotated[str | None, Query(min_length=1, max_length=16)] = None,
    limit: Limit = 100,
    principal: Principal = Depends(require_user),
) -> dict[str, Any]:
    """``spothop offers --json``: the catalog's offerings matching, cheapest first."""
    from spothop.service.offers import find_offers, offer_query_from_params

    del principal
    given = {
        "gpu": gpu,
        "count": count,
        "min_gpu_memory_gib": min_gpu_memory_gib,
        "min_tflops": min_tflops,
        "interconnect": interconnect,
        "providers": providers,
        "regions": regions,
        "spot": "true" if spot else "false",
        "max_usd_per_gpu_hour": max_usd_per_gpu_hour,
        "max_price_usd_per_hour": max_price_usd_per_hour,
        "sort": sort,
        "limit": limit,
    }
    params = {k: str(v) for k, v in given.items() if v is not None}
    return find_offers(offer_query_from_params(params)).to_dict()


@router.post("/plans")
def plans(body: PlanBody, principal: Principal = Depends(require_user)) -> dict[str, Any]:
    """``spothop plan FILE --json``: where the job would run, and why."""
    from spothop.service.plan import PlanRequest, plan_request

    del principal
    request = PlanRequest(
        spec_from_text(body.spec, body.filename),
        tuple(body.providers),
        limit=body.limit,
        data_gib=body.data_gib,
        data_at=body.data_at,
        horizon_h=body.horizon_h,
    )
    return plan_request(request).to_dict()


@router.get("/whoami")
def whoami(principal: Principal = Depends(require_any)) -> dict[str, Any]:
    """Who the token speaks for (never the token)."""
    return principal.to_dict()
