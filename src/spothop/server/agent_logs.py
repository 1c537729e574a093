"""``POST /v1/agents/{instance_id}/logs``: a chunk of the worker's output, stored in order.

The agent's log shipper (``docs/agent.md``, "Log shipping") sends each
:class:`~spothop.wire.logs.LogChunk` here; it is appended by
:meth:`~spothop.controlplane.store.StoreControlPlane.store_log`, the same code the
embedded control plane runs. Scoping, 403 when broken: the path's and the chunk's
``instance_id`` are the token's instance, a ``job_id`` in the chunk is the token's job
(an empty one is filled in with it). Answers: ``{"end_bytes": N}`` (the attempt's
stored end); 409 ``LogOffsetGap`` with ``end_bytes`` (and the chunk's ``attempt_id``
and ``offset_bytes``) for a chunk past the stored end: resend from ``end_bytes``;
422 for data that is not base64 of 1 to 256 KiB. The body is bounded by its model
(the base64 of one chunk) and by the server's ``max_body_bytes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Path, Request

from spothop.controlplane.bodies import body_model
from spothop.controlplane.store import StoreControlPlane
from spothop.server.auth import require_agent
from spothop.server.errors import ApiError, error_responses, forbidden
from spothop.server.settings import Settings
from spothop.state.tokens import Principal
from spothop.wire.errors import LogOffsetGap
from spothop.wire.fields import wire_fields
from spothop.wire.logs import LogChunk

if TYPE_CHECKING:
    from pydantic import BaseModel

    class LogChunkBody(BaseModel):
        instance_id: str
        attempt_id: str
        offset_bytes: int
        data: str
        job_id: str
        node: int

else:
    LogChunkBody = body_model("LogChunkBody", wire_fields(LogChunk))

router = APIRouter(
    prefix="/v1/agents",
    tags=["agents"],
    responses=error_responses(400, 401, 403, 409, 413, 422, 429, 503),
)


@router.post("/{instance_id}/logs")
def ship_log(
    body: LogChunkBody,
    request: Request,
    instance_id: str = Path(min_length=1, max_length=128),
    principal: Principal = Depends(require_agent),
) -> dict[str, Any]:
    """Append the chunk to its attempt's output in order; the attempt's stored end."""
    for what, named in (("the path", instance_id), ("the log chunk", body.instance_id)):
        if named != principal.instance_id:
            raise forbidden(
                f"{what} is about instance {named!r}; this token is for instance"
                f" {principal.instance_id!r} only"
            )
    if body.job_id and body.job_id != principal.job_id:
        raise forbidden(
            f"the log chunk names job {body.job_id!r}; this token is for job"
            f" {principal.job_id!r} only"
        )
    assert principal.instance_id is not None and principal.job_id is not None  # an agent's token
    chunk = LogChunk(**{**body.model_dump(), "job_id": principal.job_id})
    settings: Settings = request.app.state.settings
    plane = StoreControlPlane(settings.store_url, principal.instance_id)
    try:
        return {"end_bytes": plane.store_log(chunk)}
    except LogOffsetGap as exc:
        extra = {
            "attempt_id": exc.attempt_id,
            "offset_bytes": exc.offset_bytes,
            "end_bytes": exc.end_bytes,
        }
        raise ApiError(409, "LogOffsetGap", str(exc), extra=extra) from None
    except ValueError as exc:
        raise ApiError(422, "BadLogChunk", str(exc)) from None
