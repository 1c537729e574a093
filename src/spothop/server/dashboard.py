"""The dashboard (:mod:`spothop.dashboard`) served inside the API, under ``/dashboard/``.

The pages and their JSON are the dashboard's own (:meth:`Dashboard.api`, the
page and its static files); the server adds the token — ``?token=`` once,
then an HttpOnly cookie for ``/dashboard`` — and narrows every answer to the
caller's project's jobs. ``/dashboard/api/stream`` is the same server-sent
event stream as the standalone dashboard's (job events, then a ``tick``),
ending after :data:`STREAM_MAX_S` (the browser reconnects and resumes from
``Last-Event-ID``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse

from spothop.dashboard import data
from spothop.dashboard.app import (
    POLL_S,
    STATIC_TYPES,
    TICK_S,
    plotly_js,
    resume_point,
    static_file,
)
from spothop.server.auth import COOKIE, bearer, require_user
from spothop.server.errors import not_found
from spothop.state.tokens import Principal, TokenStore

router = APIRouter(prefix="/dashboard", tags=["dashboard"], include_in_schema=False)
STREAM_MAX_S = 600.0
COOKIE_MAX_AGE_S = 8 * 3600


def _visible(request: Request, principal: Principal) -> set[str]:
    tokens: TokenStore = request.app.state.tokens
    return tokens.project_jobs(principal.project or "")


@router.get("")
def root(request: Request) -> RedirectResponse:
    return RedirectResponse("/dashboard/", status_code=307)


@router.get("/")
def page(request: Request, principal: Principal = Depends(require_user)) -> Response:
    del principal
    response = Response(static_file("index.html") or b"", media_type=STATIC_TYPES[".html"])
    token = request.query_params.get("token")
    if token and token == bearer(request):
        response.set_cookie(
            COOKIE,
            token,
            max_age=COOKIE_MAX_AGE_S,
            path="/dashboard",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    response.headers["Cache-Control"] = "no-store"
    return response


@router.get("/static/{name}")
def static(name: str, principal: Principal = Depends(require_user)) -> Response:
    del principal
    if name == "plotly.min.js":
        return Response(plotly_js(), media_type=STATIC_TYPES[".js"])
    body = static_file(name) if "/" not in name and ".." not in name else None
    if body is None:
        raise not_found(f"no static file {name!r}")
    suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
    return Response(body, media_type=STATIC_TYPES.get(suffix, "text/plain"))


@router.get("/api/stream")
async def stream(request: Request, principal: Principal = Depends(require_user)) -> Response:
    visible = await run_in_threadpool(_visible, request, principal)
    store = request.app.state.store
    after = resume_point(request.query_params.get("after") or "") or resume_point(
        request.headers.get("last-event-id") or "", "Last-Event-ID"
    )

    async def events() -> AsyncIterator[bytes]:
        nonlocal after
        if after <= 0:
            after = await run_in_threadpool(store.last_event_seq)
        until = time.monotonic() + STREAM_MAX_S
        next_tick = 0.0
        while time.monotonic() < until and not await request.is_disconnected():
            for event in await run_in_threadpool(data.events, store, after, 200, visible):
                after = event["seq"]
                yield f"id: {after}\nevent: job\ndata: {json.dumps(event, default=str)}\n\n".encode()
            if time.monotonic() >= next_tick:
                yield f"event: tick\ndata: {time.time():.3f}\n\n".encode()
                next_tick = time.monotonic() + TICK_S
            await asyncio.sleep(POLL_S)

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )


@router.get("/api/{name}")
def api(name: str, request: Request, principal: Principal = Depends(require_user)) -> Any:
    query = {k: request.query_params.getlist(k) for k in request.query_params}
    try:
        answer = request.app.state.dashboard.api(
            f"/api/{name}", query, only=_visible(request, principal)
        )
    except KeyError:
        raise not_found(f"no dashboard endpoint {name!r}") from None
    return JSONResponse(json.loads(json.dumps(answer, default=str)))
