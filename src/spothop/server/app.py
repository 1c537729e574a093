"""The control-plane server's ASGI app: :func:`create_app` (``spothop server run`` serves it with uvicorn),
and :func:`create_agent_app`, the agent API alone (``spothop controller run`` serves it on loopback).

What it serves (``docs/server.md``, "The API"):

- the agent API (:mod:`spothop.server.agents`, the shard queue of
  :mod:`spothop.server.agent_queue`), the user API
  (:mod:`spothop.server.users`) and the dashboard (:mod:`spothop.server.dashboard`);
- ``/healthz`` (the process answers), ``/readyz`` (the database and the queue
  answer; 503 naming what is down), ``/openapi.json``, ``/metrics`` (Prometheus
  text: the store's metrics, as the controller serves them) — these four need no token.

What it guarantees on every request:

- a body over ``settings.max_body_bytes`` is refused with 413 before it is read
  whole (by its ``Content-Length``, or by counting a body sent without one); an
  upload of code (``PUT /v1/code/{sha256}``) has its own bound, kept the same way
  by its route (:mod:`spothop.server.code`);
- every error is ``{"error": {"type", "message"}}`` (:mod:`spothop.server.errors`);
  an unexpected one is a 500 that says only that (its traceback goes to the log);
- no response body and no log line carries a credential from the server's
  environment or a token's secret (:mod:`spothop.server.safety`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy import Engine, event
from sqlalchemy.exc import DisconnectionError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spothop import __version__
from spothop.errors import SpothopError
from spothop.server.errors import ApiError, error_responses, from_spothop, validation_problems
from spothop.server.safety import Redactor, install_log_filter, secret_values
from spothop.server.settings import Settings

log = logging.getLogger(__name__)

STATUS_TYPES = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
    422: "ValidationError",
    429: "TooManyRequests",
}


class SafeJSONResponse(JSONResponse):
    """JSON with non-finite numbers as null and every known secret redacted."""

    redactor: Redactor = Redactor()

    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, allow_nan=False, default=str, separators=(",", ":"))
        except ValueError:  # NaN or infinity somewhere: JSON has no such numbers
            text = json.dumps(_finite(content), default=str, separators=(",", ":"))
        return self.redactor.bytes(text.encode("utf-8"))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


# A body declared past the bound is still read (and dropped) up to this size before the 413 goes
# out: a client that writes its whole body before reading would otherwise see a broken pipe, not
# the answer. Past it the connection is simply closed after the 413.
DRAIN_MAX_BYTES = 16 * 1024 * 1024
# Where code is uploaded (spothop.server.code's routes): a PUT there has its route's own bound.
CODE_UPLOADS = "/v1/code/"


class BodyTooLarge(StarletteHTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over {limit} bytes")


class BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes (see the module docstring)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _own_limit(scope):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.limit or declared < 0:
                    if 0 < declared <= DRAIN_MAX_BYTES:
                        await _drain(receive)  # so the client, still sending, reads the 413
                    response = _error_response(
                        413 if declared > self.limit else 400,
                        "PayloadTooLarge" if declared > self.limit else "BadRequest",
                        f"the request body is over {self.limit} bytes"
                        if declared > self.limit
                        else "Content-Length is not a number",
                    )
                    await response(scope, receive, send)
                    return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    while message.get("more_body", False) and seen <= DRAIN_MAX_BYTES:
                        message = await receive()  # read and drop the rest (see DRAIN_MAX_BYTES)
                        seen += len(message.get("body", b""))
                    raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, counted, send)


def _own_limit(scope: Scope) -> bool:
    """An upload of code (``PUT /v1/code/{sha256}``): bounded by its route
    (:func:`spothop.server.code.upload_max_bytes`), counted as it is streamed to disk."""
    return scope.get("method") == "PUT" and str(scope.get("path", "")).startswith(CODE_UPLOADS)


async def _drain(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


def _error_response(
    status: int, type_: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> SafeJSONResponse:
    return SafeJSONResponse(
        {"error": {"type": type_, "message": message, **extra}}, status_code=status, headers=headers
    )


class _Lazy:
    """A value made on first use, once, under a lock (the providers: making them can be slow)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._value: Any = None
        self._made = False
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        with self._lock:
            if not self._made:
                self._value = self._make()
                self._made = True
            return self._value


# What the request paths import on first use (the services, the reports, job specs, the
# dashboard's data, the metrics): imported at start-up, before the heap is frozen, so that the
# modules, their classes and functions (tens of thousands of objects) are not walked by every
# full collection (tests/server/test_heap.py checks that serving imports nothing more).
WARM_MODULES = (
    "spothop.batch.inputs",
    "spothop.batch.spec",
    "spothop.checkpoint.admin",
    "spothop.controlplane.mounts",
    "spothop.dashboard.data",
    "spothop.jobs.controller.observe",
    "spothop.jobs.dstack",
    "spothop.jobs.reachable",
    "spothop.jobs.skypilot",
    "spothop.jobs.spec",
    "spothop.jobs.spec_secrets",
    "spothop.market.interruptions",
    "spothop.market.price_import",
    "spothop.market.price_store",
    "spothop.observe.job_report",
    "spothop.observe.ledger",
    "spothop.observe.metrics",
    "spothop.observe.recommend",
    "spothop.observe.report",
    "spothop.providers.credentials",
    "spothop.service",
    "spothop.state.sealed",
    "spothop.state.wake",
)
# A full collection slower than this (CPU) means the heap grew by long-lived objects since the
# last freeze: they are frozen too, at most once per SETTLE_EVERY_S.
SLOW_FULL_COLLECTION_S = 0.005
SETTLE_EVERY_S = 60.0


def settle_heap(app: FastAPI) -> None:
    """Make what serving needs now — the providers, the modules of :data:`WARM_MODULES` — then
    move the whole start-up heap out of the garbage collector's view (``gc.freeze``), and keep
    it so for a server about to serve.

    A full collection walks every tracked object that is not frozen, on whichever thread
    allocates (the event loop, mostly): with the providers and the request paths' modules made
    after the start-up freeze it took ~50 ms of CPU every ~13 s, 100-260 ms on a loaded
    machine, every heartbeat waiting (it was most of bench/server.py's p99). Collected first,
    so no garbage is frozen. After that, a full collection slower than
    :data:`SLOW_FULL_COLLECTION_S` freezes its survivors (long-lived by then: something made
    lazily later), at most once per :data:`SETTLE_EVERY_S`. For ``spothop server run`` only: a
    process that makes many apps (the tests) would keep each one's objects for good."""
    import importlib

    try:
        app.state.providers()
    except Exception as exc:  # made again on first use, where its error is that request's
        log.warning("the providers could not be made at start-up: %s", exc)
    for name in WARM_MODULES:
        importlib.import_module(name)
    from spothop.providers.credentials import credential_rules

    credential_rules()  # every cloud adapter's rule, imported once (a job's envs are checked)
    gc.collect()
    gc.freeze()
    gc.callbacks.append(_FreezeSlowCollections().__call__)


class _FreezeSlowCollections:
    """A ``gc.callbacks`` entry: freezes the survivors of a slow full collection (see
    :func:`settle_heap`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = 0.0
        self.last_freeze = -math.inf
        self.freezes = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self.started = time.thread_time()
            return
        slow = time.thread_time() - self.started >= SLOW_FULL_COLLECTION_S
        now = self.clock()
        if slow and now - self.last_freeze >= SETTLE_EVERY_S:
            gc.freeze()  # the collection is over: its survivors are what is left
            self.last_freeze = now
            self.freezes += 1


def create_app(settings: Settings | None = None) -> FastAPI:
    """The server over ``settings``' store and queue (opened, and migrated, now)."""
    from spothop.dashboard.app import Dashboard
    from spothop.server import code, dashboard, users

    settings = settings or Settings.from_env()
    app = _app(
        settings,
        "spothop server",
        "The control plane of spothop: the user API, the agent API, the dashboard.",
    )
    app.state.providers = _Lazy(_providers)
    app.state.dashboard = Dashboard(app.state.store, queue_url=settings.jobs_queue_url)
    app.state.wake = _wake
    app.state.reports = TtlCache(settings.report_cache_s)
    app.include_router(users.router)
    app.include_router(code.router)
    app.include_router(dashboard.router)
    return app


def create_agent_app(settings: Settings) -> FastAPI:
    """The agent API alone (``spothop controller run`` serves it on loopback): the routes an
    instance calls (:mod:`spothop.server.agents`, the shard queue of
    :mod:`spothop.server.agent_queue`), with the same tokens, checks and errors as
    :func:`create_app`'s, over ``settings``' store and queue; ``/healthz``, ``/readyz`` and
    ``/metrics`` too. No user API, no dashboard."""
    return _app(settings, "spothop agent API", "The agent API of this home's controller.")


def _app(settings: Settings, title: str, description: str) -> FastAPI:
    """The app both servers share: the store, the tokens, the beat writer, the error handlers,
    the health routes and the agent API; the caller adds its own."""
    from spothop.db import pool_options, shared_engine
    from spothop.jobs.store import JobStore
    from spothop.server import agent_files, agent_logs, agent_queue, agents
    from spothop.server.auth import FailureLimiter
    from spothop.server.beats import BeatWriter, HeartbeatFastPath
    from spothop.state.code_archives import CodeArchives
    from spothop.state.tokens import TokenStore

    redactor = Redactor(secret_values())
    SafeJSONResponse.redactor = redactor
    install_log_filter(redactor)

    shutdown: list[Callable[[], None]] = []

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        for step in shutdown:  # e.g. the controller replica lets go of its job leases
            await run_in_threadpool(step)

    app = FastAPI(
        lifespan=lifespan,
        title=title,
        version=__version__,
        description=description,
        default_response_class=SafeJSONResponse,
        docs_url=None,  # the interactive pages load scripts from a CDN; /openapi.json is the document
        redoc_url=None,
        # /metrics is the server's own; FastAPI's OpenTelemetry hooks only cost each request a look
        # at the environment for providers (a few per cent of a replica at 500 beats a second).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    # The URL's shared engine from now on (the agents' control plane, the tokens, the beat writer).
    options = pool_options(settings.store_url, settings.db_pool)
    if options:  # PostgreSQL: a ping only for a connection that sat idle (settings.DB_PING_IDLE_S)
        options["pool_pre_ping"] = False
    engine = shared_engine(settings.store_url, **options)
    if options:
        ping_when_idle(engine, settings.db_ping_idle_s)
    app.state.settings = settings
    app.state.store = JobStore(engine=engine)
    app.state.code_archives = CodeArchives(engine)  # uploaded code, shared by every replica
    app.state.tokens = TokenStore(engine, cache_ttl_s=settings.token_cache_ttl_s)
    app.state.limiter = FailureLimiter(settings.auth_failures_per_window, settings.auth_window_s)
    app.state.registry = None
    app.state.redactor = redactor
    beat_engine = _beat_engine(settings, engine)
    app.state.beats = BeatWriter(beat_engine, app.state.tokens, settings.heartbeat_batch_s)
    app.state.on_shutdown = shutdown  # callables run when the server stops, before it exits
    shutdown.append(app.state.beats.close)
    if beat_engine is not engine:
        shutdown.append(beat_engine.dispose)

    _handlers(app)
    _plain_routes(app)
    app.include_router(agents.router)
    app.include_router(agent_queue.router)
    app.include_router(agent_files.router)
    app.include_router(agent_logs.router)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(HeartbeatFastPath, state=app.state, build=agents.heartbeat_row)
    return app


def _beat_engine(settings: Settings, engine: Engine) -> Engine:
    """The beat writer's own engine on PostgreSQL: one connection, kept, in autocommit (a batch's
    token read and its upsert are two statements, two round trips instead of four with BEGIN and
    COMMIT), whose commits do not wait for the disk
    (:func:`spothop.db.commit_without_waiting_for_disk`; docs/server.md, "Heartbeats"); on SQLite
    the store's engine."""
    from spothop.db import commit_without_waiting_for_disk, make_engine

    if engine.dialect.name != "postgresql":
        return engine
    beat_engine = make_engine(
        settings.store_url,
        pool_size=1,
        max_overflow=0,
        pool_pre_ping=False,
        isolation_level="AUTOCOMMIT",
    )
    ping_when_idle(beat_engine, settings.db_ping_idle_s)
    commit_without_waiting_for_disk(beat_engine)
    return beat_engine


_IDLE_SINCE = "spothop_idle_since"
_PINGED: weakref.WeakSet[Engine] = weakref.WeakSet()  # the engines given the listeners below
_PINGED_LOCK = threading.Lock()


def ping_when_idle(engine: Engine, idle_s: float) -> None:
    """Check a pooled connection before use only when it sat idle ``idle_s`` or more (instead of
    ``pool_pre_ping``'s every checkout): one the database closed meanwhile is replaced, the
    pool trying a fresh one (SQLAlchemy's custom pessimistic disconnect handling)."""
    with _PINGED_LOCK:
        if engine in _PINGED:
            return  # the URL's shared engine (another app made on it) has its listeners already
        _PINGED.add(engine)

    @event.listens_for(engine, "checkin")
    def _checkin(dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is None or time.monotonic() - since < idle_s:
            return  # a new connection, or one in steady use
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception:
            alive = False
        if not alive:
            raise DisconnectionError("a pooled connection was closed while idle")


class TtlCache:
    """Values kept ``ttl_s`` after they were made, by key; one maker at a time per key (the
    callers meanwhile wait for its value rather than make it again). ``ttl_s`` 0: no cache."""

    MAX_KEYS = 10_000

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._values: dict[Any, tuple[float, Any]] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        if self.ttl_s <= 0:
            return make()
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            now = self._clock()
            hit = self._values.get(key)
            if hit is not None and now < hit[0]:
                return hit[1]
            value = make()
            with self._lock:
                if len(self._values) >= self.MAX_KEYS:
                    self._values = {k: v for k, v in self._values.items() if v[0] > now}
                    self._locks = {k: self._locks[k] for k in self._values if k in self._locks}
                self._values[key] = (self._clock() + self.ttl_s, value)
            return value


def _providers() -> dict[str, Any]:
    from spothop.providers.registry import default_providers

    return default_providers()


def _wake() -> None:
    """Tell a controller on this home to look now (best effort; the replicas also poll)."""
    from spothop.state.wake import poke

    poke()


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> Response:
        return SafeJSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(SpothopError)
    async def _spothop(request: Request, exc: SpothopError) -> Response:
        error = from_spothop(exc)
        return SafeJSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = validation_problems(exc.errors())
        first = problems[0] if problems else {"field": "", "message": "invalid"}
        return _error_response(
            422,
            "ValidationError",
            f"{first['field']}: {first['message']}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            problems=problems,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        type_ = STATUS_TYPES.get(exc.status_code, "HTTPError")
        message = str(exc.detail) if exc.detail else type_
        if exc.status_code == 404 and message == "Not Found":
            message = f"no endpoint {request.url.path!r} (GET /openapi.json lists them)"
        return _error_response(
            exc.status_code, type_, message, headers=getattr(exc, "headers", None)
        )

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        return _error_response(
            500, "InternalError", "the server failed on this request; its log has the details"
        )


def _plain_routes(app: FastAPI) -> None:
    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """The process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses=error_responses(503))
    def readyz(request: Request) -> Response:
        """The database and the queue answer: 200, or 503 naming what is down."""
        settings: Settings = request.app.state.settings
        checks = {"db": _check_db(request), "queue": _check_queue(settings)}
        down = {k: v for k, v in checks.items() if v != "ok"}
        if down:
            return _error_response(
                503,
                "NotReady",
                "not ready: " + ", ".join(f"{k} {v}" for k, v in down.items()),
                checks=checks,
            )
        return SafeJSONResponse({"status": "ready", **checks})

    @app.get("/metrics", tags=["health"], response_class=Response)
    def metrics(request: Request) -> Response:
        """The store's Prometheus metrics (as the controller's ``/metrics`` serves them)."""
        from prometheus_client import CONTENT_TYPE_LATEST

        from spothop.observe.metrics import registry_for, render

        state = request.app.state
        if state.registry is None:
            state.registry = registry_for(state.store, state.settings.jobs_queue_url)
        return Response(render(state.registry), media_type=CONTENT_TYPE_LATEST)


def _check_db(request: Request) -> str:
    from sqlalchemy import text

    try:
        with request.app.state.store.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        log.warning("readiness: the database does not answer: %s", exc)
        return "down"
    return "ok"


def _check_queue(settings: Settings) -> str:
    url = settings.jobs_queue_url
    if url == settings.store_url:
        return "ok"  # the queue is the store's tables: the db check covers it
    try:
        if url.startswith("redis"):
            import redis

            client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
            try:
                client.ping()
            finally:
                client.close()
        else:
            from sqlalchemy import text

            from spothop.db import shared_engine

            with shared_engine(url).connect() as conn:
                conn.execute(text("SELECT 1"))
    except Exception as exc:
        log.warning("readiness: the queue does not answer: %s", exc)
        return "down"
    return "ok"
