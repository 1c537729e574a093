"""Heartbeats written in batches: one write for every beat that arrived meanwhile.

500 agents beat every second; one transaction each (a connection checked out,
the token's row read, the beat upserted, a commit) was most of a replica's
CPU. :class:`BeatWriter` runs one thread that takes every beat waiting, waits
``linger_s`` more for others, and writes them all at once (on PostgreSQL on a connection of
its own, in autocommit, whose commits do not wait for the disk: :func:`spothop.server.app.
_beat_engine`, docs/server.md "Heartbeats"):

- every token's row is read in one query (:meth:`TokenStore.authenticate_many`),
  so a revoked token is refused at once, on any replica, as before;
- each beat's row is built by the request's own ``build(principal)`` (the
  scoping checks of :mod:`spothop.server.agents`: a 403 there is that beat's
  answer only), and the instance's latest beat of the batch is upserted;
- each request is answered once its beat committed, so an answered beat is
  stored (``docs/server.md``, "Heartbeats").

An events call rides a batch for its token's check only (its ``build`` writes
nothing): it then stores its events in a transaction of its own, with no
connection of the pool spent on reading a token's row.

Tokens in the verify cache come here (:func:`write`), and so do agent tokens
that must be verified (argon2id at 64 KiB, ~0.05 ms: a replica taking over
another's ~250 agents writes their first beats in a batch or two, not ~250
transactions); any other token that must be verified (a user's: ~4 ms), or one
from an address refused for its failures, takes the one-transaction path in a
worker thread, so a slow verify never holds up a batch.

:class:`HeartbeatFastPath` answers the common heartbeat — a valid body, a token
in the cache, written — without FastAPI's routing, dependency and middleware
layers (a third of a beat's CPU); anything else (a bad body, an unknown or
revoked token, a 403) is handed to the app as it came, so every error is the
app's own answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Connection, Engine
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spothop.controlplane.store import upsert_heartbeat, upsert_heartbeats
from spothop.server.auth import agent_principal, first_use, presented, refuse
from spothop.server.errors import ApiError
from spothop.state.tokens import Principal, TokenStore, parse_token

log = logging.getLogger(__name__)

# The beat's row (None: nothing to write, the call only wanted its token checked), or ApiError (403).
Build = Callable[[Principal], dict[str, Any] | None]
MAX_BATCH = 1000


@dataclass
class _Beat:
    token: str
    build: Build
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Principal | BaseException | None] = field(repr=False)
    claim: str | None = None  # the instance the request is about: a launch's token binds to it


class BeatWriter:
    """The replica's heartbeat writer thread (see the module docstring); started on first use."""

    def __init__(self, engine: Engine, tokens: TokenStore, linger_s: float) -> None:
        self.engine = engine
        self.tokens = tokens
        self.linger_s = linger_s
        self._waiting: list[_Beat] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.batches = 0  # how many transactions, and how many beats they wrote (for the bench)
        self.beats = 0

    async def submit(self, token: str, build: Build, claim: str | None = None) -> Principal | None:
        """The principal the beat was written for; None when the token was not taken (the
        caller answers 401/429); raises the ApiError ``build`` raised. ``claim``: the instance
        the request is about, which a launch's token not yet bound is bound to
        (:func:`spothop.server.auth.first_use`)."""
        loop = asyncio.get_running_loop()
        beat = _Beat(token, build, loop, loop.create_future(), claim)
        with self._cond:
            if self._thread is None:  # the first beat, or the first since close()
                self._thread = threading.Thread(target=self._run, name="beat-writer", daemon=True)
                self._thread.start()
            self._waiting.append(beat)
            if len(self._waiting) == 1:
                self._cond.notify()
        outcome = await beat.future
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def close(self) -> None:
        """Write what waits, then stop the thread (a later beat starts another)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(10)
        with self._cond:
            self._closed = False

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if not self._waiting:
                    self._thread = None  # under the lock: the next beat starts a thread
                    return
            if self.linger_s > 0 and not self._closed:
                time.sleep(self.linger_s)  # the others arriving meanwhile join this batch
            with self._cond:
                batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            outcomes = self._write(batch)
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Beat, Any]]] = {}
            for beat, outcome in zip(batch, outcomes, strict=True):
                by_loop.setdefault(beat.loop, []).append((beat, outcome))
            for loop, answered in by_loop.items():
                with contextlib.suppress(RuntimeError):  # that loop has closed: no one waits
                    loop.call_soon_threadsafe(_answer, answered)

    def _write(self, batch: list[_Beat]) -> list[Any]:
        """The batch written (one transaction on SQLite; on PostgreSQL the writer's connection is
        in autocommit: the tokens' read, then the upsert); each beat's outcome (principal, None
        or an exception)."""
        try:
            with self.engine.begin() as conn:
                principals = self.tokens.authenticate_many(conn, [b.token for b in batch])
                outcomes: list[Any] = []
                latest: dict[str, dict[str, Any]] = {}
                for beat, principal in zip(batch, principals, strict=True):
                    if principal is None:
                        outcomes.append(None)
                        continue
                    try:
                        principal = first_use(self.tokens, principal, beat.claim, conn)
                        row = beat.build(principal)
                    except ApiError as exc:
                        outcomes.append(exc)
                        continue
                    if row is not None:
                        latest[row["instance_id"]] = row  # the instance's latest beat wins
                    outcomes.append(principal)
                _upsert_all(conn, list(latest.values()))
        except Exception as exc:  # the database: every beat of the batch fails alike (a 500)
            log.warning("a batch of %d heartbeats was not written: %s", len(batch), exc)
            return [exc] * len(batch)
        self.batches += 1
        self.beats += len(latest)
        return outcomes


class HeartbeatFastPath:
    """ASGI middleware: ``POST /v1/agents/{instance_id}/heartbeat`` that will be a 200, answered
    here (see the module docstring); every other request, and every beat that would not be a
    200, goes to ``app`` (the beat's body replayed)."""

    def __init__(self, app: ASGIApp, state: Any, build: Callable[[str, Any], Build]) -> None:
        self.app = app
        self.state = state  # the FastAPI app's state: settings, tokens, beats
        self.build = build  # (path's instance id, HeartbeatBody) -> the route's own row builder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        match = _BEAT_PATH.fullmatch(path) if scope.get("method") == "POST" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        body, token = await self._read(scope, receive)
        if body is not None and token is not None and await self._beat(match[1], body, token):
            await send(_OK_START)
            await send({"type": "http.response.body", "body": OK_BODY})
            return
        await self.app(scope, _replay(body or b"", receive) if body is not None else receive, send)

    async def _read(self, scope: Scope, receive: Receive) -> tuple[bytes | None, str | None]:
        """The body (None: not read, the app reads it) and the cached token (None: not cached)."""
        length, token, json_body = -1, None, False
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = int(value) if value.isdigit() else -1
            elif name == b"authorization" and value[:7].lower() == b"bearer ":
                token = value[7:].strip().decode("latin-1")
            elif name == b"content-type":
                json_body = value.split(b";")[0].strip() == b"application/json"
        if not 0 <= length <= self.state.settings.max_body_bytes or not json_body:
            return None, None
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None, None  # the client went away: nothing to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if len(body) != length:
            return body, None
        return body, token if token and self.state.tokens.cached(token) else None

    async def _beat(self, instance_id: str, body: bytes, token: str) -> bool:
        from pydantic import ValidationError

        from spothop.controlplane.bodies import HeartbeatBody

        if not 1 <= len(instance_id) <= MAX_ID:
            return False
        try:
            parsed = HeartbeatBody.model_validate_json(body)
        except ValidationError:
            return False
        writer: BeatWriter = self.state.beats
        try:
            built = self.build(instance_id, parsed)
            return await writer.submit(token, built, instance_id) is not None
        except Exception:  # a 403, or the database: the app answers it (and logs it) its own way
            return False


_BEAT_PATH = re.compile(r"/v1/agents/([^/]+)/heartbeat")
MAX_ID = 128  # spothop.wire.fields.Id
OK_BODY = b'{"status":"ok"}'
_OK_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(OK_BODY)).encode()),
    ],
}


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body already read given back first."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


def _upsert_all(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """The rows upserted, one statement per column set (a heartbeat's, a registration's): one
    multi-row statement each, not one per row (a per-row execute was most of the writer's time)."""
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        by_columns.setdefault(tuple(sorted(row)), []).append(row)
    for same in by_columns.values():
        upsert_heartbeats(conn, same)


def _agent_kind(token: str) -> bool:
    """Whether ``token`` is shaped as an agent's (its verify is cheap: see the module docstring)."""
    parsed = parse_token(token)
    return parsed is not None and parsed[0] == "agent"


def _answer(answered: list[tuple[_Beat, Any]]) -> None:
    for beat, outcome in answered:
        if not beat.future.done():
            beat.future.set_result(outcome)


async def write(request: Request, build: Build, claim: str | None = None) -> Principal:
    """Write the caller's beat (``build(principal)`` is its row; None writes nothing, as for the
    events, whose token rides a batch): in the next batch when its token verified lately or is
    an agent's, else in a transaction of its own (401/403/429 as any agent call). The caller's
    principal. ``claim``: the instance the request is about (:meth:`BeatWriter.submit`)."""
    state = request.app.state
    token, wait = presented(request)
    if state.tokens.cached(token) or (wait is None and _agent_kind(token)):
        writer: BeatWriter = state.beats
        principal = await writer.submit(token, build, claim)
        return principal if principal is not None else refuse(request, wait)

    def alone() -> Principal:
        with state.store.engine.begin() as conn:
            principal = first_use(state.tokens, agent_principal(request, conn), claim, conn)
            row = build(principal)
            if row is not None:
                upsert_heartbeat(conn, row)
            return principal

    answer: Principal = await run_in_threadpool(alone)
    return answer
