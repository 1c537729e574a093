"""The agent API's shard queue (``/v1/agents/{instance_id}/queue/...``): a batch worker's queue through the control plane.

The server side of :class:`~spothop.queue.http_backend.HttpQueue`: each call
is carried out by the job's own queue (``settings.jobs_queue_url``: the
store's tables, or Redis), opened once per job and kept while the app runs.

Scoping (403 when broken): the path's ``{instance_id}`` is the token's
instance, and the body's (or query's) ``job`` and every lease's ``job`` is
the token's job. A queue error is answered with its class name, its message
and its fields (``job``, ``shard_id``, ``token``), which the client raises
again as it was raised here: fencing is the backend's, unchanged.
"""

from __future__ import annotations

import threading
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field, FiniteFloat

from spothop.errors import SpothopError
from spothop.queue.base import ShardQueue
from spothop.queue.model import Lease, ShardState
from spothop.server.agents import InstancePath, own
from spothop.server.auth import require_agent
from spothop.server.errors import ApiError, error_responses, from_spothop
from spothop.server.settings import Settings
from spothop.state.tokens import Principal

router = APIRouter(
    prefix="/v1/agents",
    tags=["agent queue"],
    responses=error_responses(400, 401, 403, 404, 409, 422, 429, 503),
)
NAME = Field(min_length=1, max_length=200)
MAX_LEASE_S = 7 * 24 * 3600.0
MAX_CLAIM = 1000
ERROR_FIELDS = ("job", "shard_id", "token")


class LeaseBody(BaseModel):
    job: str = NAME
    shard_id: str = NAME
    payload: Any = None
    token: int = Field(ge=0, le=2**62)
    worker: str = Field(min_length=1, max_length=256)
    expires_at: FiniteFloat
    attempt: int = Field(ge=0, le=2**31)

    def lease(self) -> Lease:
        return Lease(**self.model_dump())


class ClaimBody(BaseModel):
    job: str = NAME
    worker: str = Field(min_length=1, max_length=256)
    n: int = Field(default=1, ge=1, le=MAX_CLAIM)
    lease_s: float = Field(gt=0, le=MAX_LEASE_S)


class HeldBody(BaseModel):
    job: str = NAME
    lease: LeaseBody


class HeartbeatBody(HeldBody):
    lease_s: float | None = Field(default=None, gt=0, le=MAX_LEASE_S)


class CompleteBody(HeldBody):
    output_ref: str = Field(min_length=1, max_length=4096)


class FailBody(HeldBody):
    error: str = Field(max_length=64 * 1024)


class WorkerBody(BaseModel):
    job: str = NAME
    worker: str = Field(min_length=1, max_length=256)


class AgentQueues:
    """The jobs' queues this app opened (one per job), closed when the app stops."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._queues: dict[str, ShardQueue] = {}
        self._lock = threading.Lock()

    def get(self, job: str) -> ShardQueue:
        from spothop.queue.open import open_queue

        with self._lock:
            queue = self._queues.get(job)
            if queue is None:
                queue = self._queues[job] = open_queue(self.url, job)
            return queue

    def close(self) -> None:
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
        for queue in queues:
            queue.close()


def _queues(request: Request) -> AgentQueues:
    state = request.app.state
    with _MAKE_LOCK:
        queues: AgentQueues | None = getattr(state, "agent_queues", None)
        if queues is None:
            settings: Settings = state.settings
            queues = state.agent_queues = AgentQueues(settings.jobs_queue_url)
            state.on_shutdown.append(queues.close)
    return queues


_MAKE_LOCK = threading.Lock()


def _queue(
    request: Request, principal: Principal, instance_id: str, job: str, *leases: LeaseBody
) -> ShardQueue:
    """The token's job's queue; 403 unless the path, ``job`` and every lease are the token's."""
    own(principal, instance_id, job, "this queue call")
    for lease in leases:
        own(principal, instance_id, lease.job, "the lease")
    if job.startswith(("http:", "https:")):  # never the control plane itself
        raise ApiError(400, "BadRequest", "a job name is not a URL")
    return _queues(request).get(job)


def _answer_error(exc: SpothopError) -> ApiError:
    """The queue's error as the client rebuilds it (its class name, message and fields)."""
    error = from_spothop(exc)
    fields = {k: getattr(exc, k) for k in ERROR_FIELDS if hasattr(exc, k)}
    return ApiError(error.status, error.type, error.message, extra={"fields": fields})


def _carried(work: Any) -> Any:
    try:
        return work()
    except SpothopError as exc:
        raise _answer_error(exc) from None


@router.post("/{instance_id}/queue/claim")
def claim(
    body: ClaimBody,
    request: Request,
    instance_id: str = InstancePath,
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    """Lease up to ``n`` shards to ``worker`` for ``lease_s`` (``ShardQueue.claim``)."""
    queue = _queue(request, principal, instance_id, body.job)
    leases = _carried(lambda: queue.claim(body.worker, body.n, body.lease_s))
    return {"leases": [_lease_dict(lease) for lease in leases]}


@router.post("/{instance_id}/queue/heartbeat")
def heartbeat(
    body: HeartbeatBody,
    request: Request,
    instance_id: str = InstancePath,
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    """Extend a valid lease (``ShardQueue.heartbeat``); 409 ``LeaseLost`` otherwise."""
    queue = _queue(request, principal, instance_id, body.job, body.lease)
    lease = _carried(lambda: queue.heartbeat(body.lease.lease(), body.lease_s))
    return {"lease": _lease_dict(lease)}


@router.post("/{instance_id}/queue/complete")
def complete(
    body: CompleteBody,
    request: Request,
    instance_id: str = InstancePath,
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    """The fenced commit (``ShardQueue.complete``): 409 ``LeaseLost`` for a stale token."""
    queue = _queue(request, principal, instance_id, body.job, body.lease)
    done = _carried(lambda: queue.complete(body.lease.lease(), body.output_ref))
    return {
        "shard_id": done.shard_id,
        "token": done.token,
        "output_ref": done.output_ref,
        "first": done.first,
    }


@router.post("/{instance_id}/queue/release")
def release(
    body: HeldBody,
    request: Request,
    instance_id: str = InstancePath,
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    """Give a valid lease back, its attempt refunded (``ShardQueue.release``)."""
    queue = _queue(request, principal, instance_id, body.job, body.lease)
    _carried(lambda: queue.release(body.lease.lease()))
    return {"status": "ok"}


@router.post("/{instance_id}/queue/fail")
def fail(
    body: FailBody,
    request: Request,
    instance_id: str = InstancePath,
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    """Record a failed attempt (``ShardQueue.fail``): the shard's state after it."""
    queue = _queue(request, principal, instance_id, body.job, body.lease)
    state: ShardState = _carried(lambda: queue.fail(body.lease.lease(), body.error))
    return {"state": state.value}


@router.post("/{instance_id}/queue/release-worker")
def release_worker(
    body: WorkerBody,
    request: Request,
    instance_id: str = InstancePath,
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    """Release every lease ``worker`` holds in the job's queue (``ShardQueue.release_worker``)."""
    queue = _queue(request, principal, instance_id, body.job)
    return {"released": _carried(lambda: queue.release_worker(body.worker))}


@router.get("/{instance_id}/queue/stats")
def stats(
    request: Request,
    instance_id: str = InstancePath,
    job: str = Query(min_length=1, max_length=200),
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    """The job's counts (``ShardQueue.stats``)."""
    queue = _queue(request, principal, instance_id, job)
    answer: dict[str, Any] = _carried(queue.stats).as_dict()
    return answer


@router.get("/{instance_id}/queue/records")
def records(
    request: Request,
    instance_id: str = InstancePath,
    job: str = Query(min_length=1, max_length=200),
    state: ShardState | None = None,
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    """Every shard of the job, or those in ``state`` (``ShardQueue.records``)."""
    queue = _queue(request, principal, instance_id, job)
    return {"records": [r.to_dict() for r in _carried(lambda: queue.records(state))]}


def _lease_dict(lease: Lease) -> dict[str, Any]:
    from spothop.queue.http_backend import lease_dict

    return lease_dict(lease)
