"""Every error the API answers is ``{"error": {"type": ..., "message": ...}}``, never a traceback.

=======  ====================================================================
status   when
=======  ====================================================================
400      bad input that is not a job spec (a :class:`~spothop.errors.ConfigError`)
401      no token, or a token that is malformed, unknown or revoked
403      a valid token asking for what is not its own (another job, project or instance)
404      what was named does not exist (:class:`~spothop.errors.NotFoundError`), or no such path
409      a state the request conflicts with (cancel a finished job; another :class:`SpothopError`)
413      a body over the bound (1 MiB)
422      a body or query that does not validate (pydantic), or a job spec that does not
429      too many failed authentications from this address lately (``Retry-After``)
503      a service the answer needs (the database, the queue) is down
500      a bug: the message says only that; the log has the traceback (secrets redacted)
=======  ====================================================================
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel

from spothop.errors import (
    EXIT_BAD_INPUT,
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    JobSpecError,
    SpothopError,
)

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An answer other than 2xx, raised anywhere in a handler."""

    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.headers = headers or {}
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message, **self.extra}}


def unauthorized(message: str = "") -> ApiError:
    return ApiError(
        401,
        "Unauthorized",
        message
        or "a valid token is needed: send 'Authorization: Bearer TOKEN' (`spothop server tokens"
        " create` makes a user token; an agent gets its token at launch)",
        headers={"WWW-Authenticate": "Bearer"},
    )


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def not_found(message: str) -> ApiError:
    return ApiError(404, "NotFound", message)


def from_spothop(exc: SpothopError) -> ApiError:
    """The API's answer for one of spothop's own errors (its exit code picks the status)."""
    name = type(exc).__name__
    if isinstance(exc, JobSpecError):
        problems = [{"field": f, "message": m} for f, m in exc.problems]
        return ApiError(422, name, str(exc), extra={"problems": problems} if problems else None)
    status = {EXIT_BAD_INPUT: 400, EXIT_NOT_FOUND: 404, EXIT_UNAVAILABLE: 503}.get(
        exc.exit_code, 409
    )
    return ApiError(status, name, str(exc))


def validation_problems(errors: Any) -> list[dict[str, str]]:
    """pydantic's errors as ``{"field": "body.events.0.kind", "message": ...}``, never echoing input."""
    out = []
    for e in list(errors)[:50]:
        where = ".".join(str(p) for p in e.get("loc", ()))
        out.append({"field": where, "message": str(e.get("msg", "invalid"))})
    return out


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorBody(BaseModel):
    """What every error answers."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of those error statuses: each the one error body."""
    return {s: {"model": ErrorBody, "description": DESCRIPTIONS.get(s, "error")} for s in statuses}


DESCRIPTIONS = {
    400: "bad input",
    401: "no token, or not a valid one",
    403: "the token may not do this",
    404: "no such thing",
    409: "conflicts with the state it is in",
    413: "the body is over 1 MiB",
    422: "the body or query does not validate",
    429: "too many failed authentications from this address",
    503: "the database or the queue is down",
}
