"""Who is calling: the bearer token read, checked and scoped, and failed attempts rate-limited.

- The token comes from ``Authorization: Bearer TOKEN``; the dashboard's pages
  also take ``?token=`` once, which sets an HttpOnly cookie for ``/dashboard``.
- :class:`FailureLimiter`: an address with more than ``limit`` failed
  authentications within ``window_s`` is refused with 429 (``Retry-After``)
  until the oldest failure leaves the window. While refused, only a token
  that verified lately (the token store's cache) is still taken, so the
  agents behind one NAT address keep working while a guesser behind it gets
  no answer, and no guess costs a database lookup or a hash.
- :func:`require_user` / :func:`require_agent` are the endpoints' dependencies;
  :func:`may_read_job` is the one scoping rule of the user API (a user: its
  project's jobs; an agent: its own job).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NoReturn

from fastapi import Request
from sqlalchemy import Connection

from spothop.server.errors import ApiError, forbidden, unauthorized
from spothop.state.tokens import Principal, TokenStore

COOKIE = "spothop_token"
MAX_TRACKED_ADDRESSES = 100_000


class FailureLimiter:
    """Failed authentications per client address in a sliding window."""

    def __init__(
        self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after_s(self, address: str) -> float | None:
        """Seconds until ``address`` may try again; None when it is not refused."""
        now = self._clock()
        with self._lock:
            seen = self._failures.get(address)
            if seen is None:
                return None
            while seen and seen[0] <= now - self.window_s:
                seen.popleft()
            if not seen:
                del self._failures[address]
                return None
            if len(seen) < self.limit:
                return None
            return seen[0] + self.window_s - now

    def failed(self, address: str) -> None:
        now = self._clock()
        with self._lock:
            if len(self._failures) >= MAX_TRACKED_ADDRESSES and address not in self._failures:
                self._failures = {
                    a: d for a, d in self._failures.items() if d and d[-1] > now - self.window_s
                }
            seen = self._failures.setdefault(address, deque(maxlen=self.limit + 1))
            seen.append(now)


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value.strip() else None
    if request.url.path.startswith("/dashboard"):
        return request.query_params.get("token") or request.cookies.get(COOKIE)
    return None


def authenticate(request: Request, conn: Connection | None = None) -> Principal:
    """The caller's principal, or 401 / 429 (see the module docstring); the token's row is read in
    ``conn``'s transaction when given."""
    token, wait = presented(request)
    tokens: TokenStore = request.app.state.tokens
    principal = tokens.authenticate(token, cached_only=wait is not None, conn=conn)
    return principal if principal is not None else refuse(request, wait)


def presented(request: Request) -> tuple[str, float | None]:
    """The caller's bearer token (401 without one), and how long its address is refused (or None)."""
    token = bearer(request)
    if token is None:
        raise unauthorized()
    limiter: FailureLimiter = request.app.state.limiter
    return token, limiter.retry_after_s(client_address(request))


def refuse(request: Request, wait: float | None) -> NoReturn:
    """The answer to a token that was not taken: 429 while the address is refused, else 401
    (the failure counted against the address)."""
    address = client_address(request)
    if wait is not None:
        raise ApiError(
            429,
            "TooManyFailedAuthentications",
            f"too many failed authentications from {address}; try again in {math.ceil(wait)} s",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )
    limiter: FailureLimiter = request.app.state.limiter
    limiter.failed(address)
    raise unauthorized("the token is not valid (malformed, unknown or revoked)")


def client_address(request: Request) -> str:
    """The address the failure limit counts against: the peer's, or the client a proxy of
    ``--forwarded-allow-ips`` names in ``X-Forwarded-For`` (uvicorn has put it in its place)."""
    return request.client.host if request.client else "unknown"


def require_user(request: Request) -> Principal:
    principal = authenticate(request)
    if principal.kind != "user":
        raise forbidden("an agent's token cannot use the user API; use a user token")
    return principal


def require_agent(request: Request) -> Principal:
    """The agent's principal, its token bound on first use to the path's ``{instance_id}``
    (:func:`first_use`)."""
    return first_use(request.app.state.tokens, agent_principal(request), _path_instance(request))


def first_use(
    tokens: TokenStore,
    principal: Principal,
    instance_id: str | None,
    conn: Connection | None = None,
) -> Principal:
    """``principal``, its token bound to ``instance_id`` when this is the first use of a launch's
    token not yet bound (:meth:`TokenStore.bind_on_first_use`; ``docs/server.md``, "Security":
    agent tokens). The instance holds its token before the controller has bound it (a
    controller killed between the cloud's launch call and the bind leaves it so until the next
    one adopts the instance); refusing it meanwhile would refuse its worker's exit too."""
    if principal.kind != "agent" or not principal.unbound or not instance_id:
        return principal
    return tokens.bind_on_first_use(principal, instance_id, conn=conn)


def _path_instance(request: Request) -> str | None:
    value = request.path_params.get("instance_id")
    return value if isinstance(value, str) else None


def agent_principal(request: Request, conn: Connection | None = None) -> Principal:
    """An agent's principal (403 for a user's token), its token read in ``conn`` when given."""
    return agent_only(authenticate(request, conn))


def agent_only(principal: Principal) -> Principal:
    """``principal`` when it is an agent's; 403 for a user's token."""
    if principal.kind != "agent":
        raise forbidden("the agent API takes an agent's token (issued to the instance at launch)")
    return principal


def require_token(request: Request) -> None:
    """401 when no token is sent at all, before the body is read: for the routes that check the
    token itself later, with a batch of others (:mod:`spothop.server.beats`)."""
    if bearer(request) is None:
        raise unauthorized()


def require_any(request: Request) -> Principal:
    return authenticate(request)


def may_read_job(request: Request, principal: Principal, job_id: str) -> None:
    """403 unless ``principal`` may read ``job_id`` (its project's, or the agent's own)."""
    if principal.kind == "agent":
        if principal.job_id != job_id:
            raise forbidden(f"this agent's token is for job {principal.job_id}, not {job_id}")
        return
    tokens: TokenStore = request.app.state.tokens
    if tokens.job_project(job_id) != principal.project:
        raise forbidden(f"job {job_id} is not in project {principal.project}")
