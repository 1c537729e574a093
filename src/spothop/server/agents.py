"""The agent API (``docs/agent.md``, "HTTP endpoints"): the server side of the HTTP control plane.

Each request is carried out by :class:`~spothop.controlplane.store.StoreControlPlane`,
the same code the embedded control plane runs, bound to the instance and job
the caller's token names. The scoping rules, all 403 when broken:

- the ``{instance_id}`` of the path, and the ``instance_id`` of every body and
  event, is the token's instance; a ``job_id`` in a body or event is the
  token's job (an empty one in a registration or heartbeat is filled in with it;
  an event is stored as sent);
- ``leases/release`` releases in the token's job's queue only, and refuses a
  ``worker_id`` that the store knows as another instance's worker;
- ``requests/{id}/ack`` refuses a request addressed to another instance.

A launch's token not yet bound to its instance is bound to the instance its first request
names (:func:`spothop.server.auth.first_use`), and scoped to it from then on.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from spothop.controlplane.bodies import (
    AckBody,
    EventsBody,
    HeartbeatBody,
    RegistrationBody,
    ReleaseBody,
    event_dict,
)
from spothop.controlplane.queue_leases import queue_leases
from spothop.controlplane.store import StoreControlPlane, registration_row
from spothop.queue.errors import UnknownJobError
from spothop.server import beats
from spothop.server.auth import agent_only, require_agent, require_token
from spothop.server.errors import ApiError, error_responses, forbidden, not_found
from spothop.server.settings import Settings
from spothop.state.tokens import Principal
from spothop.wire.contract import Heartbeat, Registration
from spothop.wire.errors import EventFormatError
from spothop.wire.events import event_from_dict

router = APIRouter(
    prefix="/v1/agents",
    tags=["agents"],
    responses=error_responses(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
InstancePath = Path(min_length=1, max_length=128)
OK = {"status": "ok"}
OK_BODY = beats.OK_BODY


class Ok(BaseModel):
    status: str


def _plane(request: Request, principal: Principal) -> StoreControlPlane:
    settings: Settings = request.app.state.settings
    assert principal.instance_id is not None and principal.job_id is not None  # an agent's token
    return StoreControlPlane(
        settings.store_url,
        principal.instance_id,
        queue=queue_leases(settings.jobs_queue_url, principal.job_id),
    )


def own(principal: Principal, instance_id: str, job_id: str = "", what: str = "") -> str:
    """The job id to store (the token's); 403 when ``instance_id``/``job_id`` are another's."""
    if instance_id != principal.instance_id:
        raise forbidden(
            f"{what or 'this call'} is about instance {instance_id!r}; this token is for"
            f" instance {principal.instance_id!r} only"
        )
    if job_id and job_id != principal.job_id:
        raise forbidden(
            f"{what or 'this call'} names job {job_id!r}; this token is for job"
            f" {principal.job_id!r} only"
        )
    assert principal.job_id is not None
    return principal.job_id


@router.post("/register", response_model=Ok, dependencies=[Depends(require_token)])
async def register(body: RegistrationBody, request: Request) -> Response:
    """Written as a heartbeat is (:mod:`spothop.server.beats`): the token's row read and the
    registration written with the other beats of its batch."""

    def row(principal: Principal) -> dict[str, Any]:
        job_id = own(agent_only(principal), body.instance_id, body.job_id, "the registration")
        data = {**body.model_dump(), "job_id": job_id, "reasons": tuple(body.reasons)}
        return registration_row(Registration(**data))

    await beats.write(request, row, body.instance_id)
    return Response(OK_BODY, media_type="application/json")


@router.post("/{instance_id}/heartbeat", response_model=Ok, dependencies=[Depends(require_token)])
async def heartbeat(
    body: HeartbeatBody, request: Request, instance_id: str = InstancePath
) -> Response:
    """Written in the replica's next batch of beats (:mod:`spothop.server.beats`), answered once
    that batch committed; the answer is written as it is (nothing to validate). The common beat
    is answered before it reaches this route (:class:`~spothop.server.beats.HeartbeatFastPath`,
    with :func:`heartbeat_row`); this route answers the rest, errors included."""
    await beats.write(request, heartbeat_row(instance_id, body), instance_id)
    return Response(OK_BODY, media_type="application/json")


def heartbeat_row(instance_id: str, body: HeartbeatBody) -> beats.Build:
    """The beat's row for the token's principal (403 unless the path and the body are its own)."""

    def row(principal: Principal) -> dict[str, Any]:
        own(agent_only(principal), instance_id, what="the path")
        job_id = own(principal, body.instance_id, body.job_id, "the heartbeat")
        return Heartbeat(**{**body.model_dump(), "job_id": job_id}).to_dict()

    return row


class Received(BaseModel):
    received: int
    stored: int


@router.post(
    "/{instance_id}/events", response_model=Received, dependencies=[Depends(require_token)]
)
async def events(
    body: EventsBody, request: Request, instance_id: str = InstancePath
) -> dict[str, Any]:
    """The batch, checked whole, then stored in one transaction (a known ``event_id`` is skipped);
    the token is checked with the replica's next batch of beats (:mod:`spothop.server.beats`)."""

    def scoped(principal: Principal) -> None:
        own(agent_only(principal), instance_id, what="the path")
        for n, item in enumerate(body.events):
            own(principal, item.instance_id, item.job_id, f"event {n} ({item.event_id})")

    principal = await beats.write(request, scoped, instance_id)

    def work() -> dict[str, Any]:
        parsed = []
        for n, item in enumerate(body.events):
            try:
                parsed.append(event_from_dict(event_dict(item)))  # as sent: the event's own model
            except EventFormatError as exc:
                raise ApiError(422, "EventFormatError", f"event {n}: {exc}") from None
        stored = _plane(request, principal).record_many(parsed)
        return {"received": len(parsed), "stored": stored}

    answer: dict[str, Any] = await run_in_threadpool(work)
    return answer


@router.post("/{instance_id}/leases/release")
def release(
    body: ReleaseBody,
    request: Request,
    instance_id: str = InstancePath,
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    own(principal, instance_id, what="the path")
    plane = _plane(request, principal)
    owner = _worker_owner(plane, body.worker_id)
    if owner is not None and owner != (principal.instance_id, principal.job_id):
        raise forbidden(
            f"worker {body.worker_id!r} belongs to another instance; this token may release only"
            f" the workers of instance {principal.instance_id!r}"
        )
    try:
        released = plane.release_leases(body.worker_id)
    except UnknownJobError:  # the job has no queue (a task job): nothing was leased
        released = 0
    return {"released": released}


def _worker_owner(plane: StoreControlPlane, worker_id: str) -> tuple[str, str] | None:
    """(instance, job) that registered ``worker_id`` (another's wins over this one's), or None."""
    from sqlalchemy import select

    from spothop.state.agent_tables import agent_heartbeats as t

    with plane.engine.connect() as conn:
        rows = conn.execute(
            select(t.c.instance_id, t.c.job_id).where(t.c.worker_id == worker_id)
        ).all()
    owners = [(r.instance_id, r.job_id) for r in rows]
    others = [o for o in owners if o[0] != plane.instance_id]
    chosen = others or owners
    return chosen[0] if chosen else None


@router.get("/{instance_id}/requests")
def requests(
    request: Request,
    instance_id: str = InstancePath,
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    own(principal, instance_id, what="the path")
    return {"requests": [r.to_dict() for r in _plane(request, principal).requests()]}


@router.get("/{instance_id}/rendezvous")
def rendezvous(
    request: Request,
    instance_id: str = InstancePath,
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    """The rendezvous of the grouped attempt the token's instance runs; null until every node of
    its generation registered an address (:func:`spothop.controlplane.store.group_rendezvous`)."""
    own(principal, instance_id, what="the path")
    answer = _plane(request, principal).rendezvous()
    return {"rendezvous": None if answer is None else answer.to_dict()}


@router.get("/{instance_id}/secrets", response_class=JSONResponse)
def secrets(
    request: Request,
    instance_id: str = InstancePath,
    principal: Principal = Depends(require_agent),
) -> JSONResponse:
    """The values of the job's secrets, for the live attempt the token's instance runs
    (:func:`spothop.controlplane.store.attempt_secrets`); 403 for another instance's path.
    A plain JSON answer: the server's redaction of its own environment's secrets must not
    mask a value the worker needs (a job's ``HF_TOKEN`` also set in the server's shell)."""
    own(principal, instance_id, what="the path")
    return JSONResponse({"secrets": _plane(request, principal).secrets()})


@router.post("/{instance_id}/requests/{request_id}/ack")
def acknowledge(
    request: Request,
    body: AckBody | None = None,
    instance_id: str = InstancePath,
    request_id: int = Path(ge=1, le=2**31 - 1),
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    from sqlalchemy import select

    from spothop.state.agent_tables import agent_requests as t

    del body
    own(principal, instance_id, what="the path")
    plane = _plane(request, principal)
    with plane.engine.connect() as conn:
        row = conn.execute(select(t.c.instance_id).where(t.c.id == request_id)).first()
    if row is None:
        raise not_found(f"no request {request_id}")
    if row.instance_id != principal.instance_id:
        raise forbidden(f"request {request_id} is addressed to another instance")
    plane.acknowledge(str(request_id))
    return OK
