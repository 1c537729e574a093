"""The CLI's client of ``spothop server``'s user API: the same commands, over HTTP.

With ``$SPOTHOP_SERVER`` (or ``--server URL``) set, every job command —
``launch``, ``jobs``, ``status``, ``logs``, ``cancel``, ``report``, ``events``,
``offers``, ``plan`` — asks the server instead of opening the embedded store,
with ``$SPOTHOP_TOKEN`` (or ``--token``) as its bearer token, and prints the
same output: the server answers the objects of :mod:`spothop.service`, the
ones ``--json`` prints locally (a list the server wraps, ``{"jobs": […]}``, is
unwrapped here). It sends through :mod:`spothop.wire.client`, standard-library
``urllib`` only: the core needs no extra.

The server's errors become the CLI's, never a traceback:

======  ===================================================  ======
status  raised as                                            exit
======  ===================================================  ======
401     :class:`ServerAuthError` (how to get a token)        2
403     :class:`ServerForbidden` (not your project's)        2
404     :class:`ServerNotFound` (the server's message)       3
409     :class:`ServerConflict` (e.g. the job is finished)   1
400/413/422  :class:`ServerRefused` (bad input, its message) 2
429, 5xx, unreachable  :class:`ServerUnavailable` (names the URL)  4
======  ===================================================  ======

A ``GET`` the server could not answer (unreachable, 429, 5xx) is asked again
twice with backoff before it is an error, as is any call whose connection was
refused: a replica restarting behind a proxy is a blip. The token is never
printed: not in errors, not in ``repr``.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, BinaryIO, cast

import typer

from spothop.errors import (
    ConfigError,
    ServerAuthError,
    ServerConflict,
    ServerError,
    ServerForbidden,
    ServerNotFound,
    ServerRefused,
    ServerUnavailable,
)
from spothop.wire.client import (
    HttpStatus,
    JsonClient,
    NotJson,
    Unreachable,
    full_jitter_s,
    retrying,
)

SERVER_ENV = "SPOTHOP_SERVER"
TOKEN_ENV = "SPOTHOP_TOKEN"
REQUEST_TIMEOUT_S = 60.0  # a report brings a job's ledger up to date: seconds, not milliseconds
ERROR_DETAIL_CHARS = 500
ATTEMPTS = 3  # a replica restarting behind a proxy is a blip, not an error
RETRY_BACKOFF_S = 0.25
RETRY_MAX_S = 5.0
TOKEN_HINT = (
    "get a user token from the server's operator (`spothop server users create NAME --project P` "
    f"on the server prints one) and pass it with --token or ${TOKEN_ENV}"
)

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar=SERVER_ENV,
        help="spothop server URL (http(s)://HOST:PORT): ask it instead of the embedded store",
        show_envvar=True,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar=TOKEN_ENV,
        help="the user token for --server",
        show_envvar=True,
        show_default=False,
    ),
]


def _error_for(status: int) -> type[ServerError]:
    if status == 401:
        return ServerAuthError
    if status == 403:
        return ServerForbidden
    if status == 404:
        return ServerNotFound
    if status == 409:
        return ServerConflict
    if status == 429 or status >= 500:
        return ServerUnavailable
    return ServerRefused


class ServerClient:
    """The user API of ``spothop server`` at ``base_url`` (``http(s)://host[:port][/prefix]``)."""

    def __init__(
        self, base_url: str, token: str | None, *, timeout_s: float = REQUEST_TIMEOUT_S
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(
                f"--server / ${SERVER_ENV} {base_url!r} is not a server URL: "
                "give http(s)://HOST:PORT (unset it to use the embedded store)"
            )
        self.base_url = base_url.strip().rstrip("/")
        self._token = token.strip() if token and token.strip() else None
        self.timeout_s = timeout_s
        self._client = JsonClient(
            self.base_url, self._token, timeout_s=timeout_s, user_agent="spothop-cli"
        )

    def __repr__(self) -> str:
        return f"ServerClient({self.base_url!r}, token={'***' if self._token else None})"

    # -- the user API (docs/server.md) -------------------------------------------------

    def launch(
        self, spec_text: str, filename: str, code: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """``code``: the archives uploaded for the job (:mod:`spothop.cli.upload`)."""
        body: dict[str, Any] = {"spec": spec_text, "filename": filename}
        if code:
            body["code"] = dict(code)
        return dict(self.call("POST", "/v1/jobs", body=body))

    def code_held(self, sha256: str) -> dict[str, Any]:
        """``GET /v1/code/{sha256}``: whether the server holds the archive for this project."""
        return dict(self.call("GET", f"/v1/code/{_q(sha256)}"))

    def upload_code(self, sha256: str, path: str, progress: Callable[[int], None]) -> Any:
        """``PUT /v1/code/{sha256}`` with the archive at ``path`` as the body, streamed (each
        block read is told to ``progress``); asked again as a ``GET`` is (the same bytes to
        the same name: it cannot be done twice)."""

        def once() -> Any:
            with open(path, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                upload = (cast(BinaryIO, _Counted(file, progress)), size, "application/gzip")
                return self._once("PUT", f"/v1/code/{_q(sha256)}", None, None, upload)

        return retrying(
            once,
            attempts=ATTEMPTS,
            retry=lambda exc: isinstance(exc, ServerUnavailable),
            delay_s=_retry_delay_s,
        )

    def jobs(self, states: Sequence[str] = (), limit: int | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if states:
            params["state"] = ",".join(states)
        return list(self._field(self.call("GET", "/v1/jobs", params), "jobs"))

    def status(self, job_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/v1/jobs/{_q(job_id)}"))

    def cancel(self, job_id: str) -> dict[str, Any]:
        return dict(self.call("POST", f"/v1/jobs/{_q(job_id)}/cancel", body={}))

    def logs(
        self, job_id: str, node: int | None = None, tail_bytes: int | None = None
    ) -> list[dict[str, Any]]:
        params = {"node": node, "tail_bytes": tail_bytes}
        return list(self._field(self.call("GET", f"/v1/jobs/{_q(job_id)}/logs", params), "logs"))

    def events(
        self, job_id: str, after: str | None = None, limit: int | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The job's stream events after the cursor ``after`` (none: from the start), and the
        next cursor (the server's ``next``; None when it gives none)."""
        answer = self.call(
            "GET", f"/v1/jobs/{_q(job_id)}/events", {"after_id": after, "limit": limit}
        )
        nxt = answer.get("next") if isinstance(answer, Mapping) else None
        return list(self._field(answer, "events")), None if nxt is None else str(nxt)

    def report(self, job_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/v1/jobs/{_q(job_id)}/report"))

    def costs(self, since: str, by: str) -> dict[str, Any]:
        return dict(self.call("GET", "/v1/costs", {"since": since, "by": by}))

    def offers(self, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        return list(self._field(self.call("GET", "/v1/offers", dict(params)), "offers"))

    def plan(self, spec_text: str, filename: str, **options: Any) -> dict[str, Any]:
        body = {"spec": spec_text, "filename": filename, **options}
        return dict(self.call("POST", "/v1/plans", body=body))

    # -- transport -----------------------------------------------------------------------

    def _field(self, answer: Any, name: str) -> Any:
        """``answer[name]`` of an object answer; a list answer is taken as it is."""
        if isinstance(answer, list):
            return answer
        if isinstance(answer, Mapping) and isinstance(answer.get(name), list):
            return answer[name]
        raise ServerError(f"{self.base_url}: expected {{{name!r}: [...]}}, got {str(answer)[:200]}")

    def call(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        *,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        """One request; its decoded JSON answer. Errors as the module's table says.

        A server that is restarting or busy is asked again, up to :data:`ATTEMPTS` times with
        backoff and full jitter (its ``Retry-After`` when it gives one; at most
        :data:`RETRY_MAX_S`): a ``GET`` on any :class:`ServerUnavailable`, any other method
        only when the connection was refused (the request never reached it, so it cannot have been done twice)."""
        return retrying(
            lambda: self._once(method, path, params, body),
            attempts=ATTEMPTS,
            retry=lambda exc: (
                isinstance(exc, ServerUnavailable) and (method == "GET" or exc.refused)
            ),
            delay_s=_retry_delay_s,
        )

    def _once(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: Mapping[str, Any] | None,
        upload: tuple[BinaryIO, int, str] | None = None,
    ) -> Any:
        try:
            return self._client.send(
                method, path, params=params, body=body, timeout_s=self.timeout_s, upload=upload
            )
        except HttpStatus as exc:
            raise self._http_error(method, path, exc) from None
        except Unreachable as exc:
            failure = ServerUnavailable(
                f"the spothop server at {self.base_url} did not answer ({exc.reason}); is it running? "
                f"(check the URL in --server / ${SERVER_ENV}, or unset it to use the embedded store)"
            )
            failure.refused = exc.refused
            raise failure from None
        except NotJson as exc:
            raise ServerError(
                f"{method} {self.base_url}{path}: the answer is not JSON ({exc.raw[:120]!r}); "
                f"is {self.base_url} a spothop server?"
            ) from None

    def _http_error(self, method: str, path: str, exc: HttpStatus) -> ServerError:
        raw = exc.body
        kind, message = None, raw.decode("utf-8", "replace").strip()[:ERROR_DETAIL_CHARS]
        try:
            error = json.loads(raw).get("error")
            if isinstance(error, Mapping):
                kind = str(error.get("type")) if error.get("type") else None
                message = str(error.get("message", message))
            else:  # FastAPI's own {"detail": ...} for a route it does not know
                message = str(json.loads(raw).get("detail", message))
        except (ValueError, AttributeError):
            pass
        cls = _error_for(exc.code)
        if cls is ServerAuthError:
            what = "no token was given" if not self._token else "the token was refused"
            message = (
                f"the spothop server at {self.base_url} said 401 ({what}: {message}); {TOKEN_HINT}"
            )
        elif cls is ServerForbidden:
            message = f"the spothop server at {self.base_url} refused: {message} (HTTP 403: your token's project may not do this)"
        elif cls is ServerUnavailable:
            retry = exc.headers.get("Retry-After") if exc.headers else None
            wait = f"; retry in {retry} s" if retry else ""
            message = f"the spothop server at {self.base_url} answered HTTP {exc.code} to {method} {path}: {message}{wait}"
            failure = ServerUnavailable(message, status=exc.code, kind=kind)
            failure.retry_after_s = _seconds(retry)
            return failure
        elif cls is ServerNotFound and kind is None:
            message = f"{method} {path}: {message or 'not found'} (HTTP 404 from {self.base_url})"
        return cls(message, status=exc.code, kind=kind)


class _Counted:
    """A file read by ``http.client`` in blocks, each block's size told to ``progress``."""

    def __init__(self, file: BinaryIO, progress: Callable[[int], None]) -> None:
        self.file = file
        self.progress = progress

    def read(self, size: int = -1) -> bytes:
        data = self.file.read(size)
        if data:
            self.progress(len(data))
        return data


def _retry_delay_s(attempt: int, failure: Exception) -> float:
    """The server's ``Retry-After`` when it gave one, else exponential backoff with full jitter
    (uniform in ``[0, RETRY_BACKOFF_S × 2^attempt]``, so many clients refused at once do not come
    back together); at most :data:`RETRY_MAX_S`."""
    retry_after_s = failure.retry_after_s if isinstance(failure, ServerUnavailable) else None
    if retry_after_s:
        return min(RETRY_MAX_S, retry_after_s)
    return full_jitter_s(attempt, RETRY_BACKOFF_S, RETRY_MAX_S)


def _seconds(value: str | None) -> float | None:
    """A ``Retry-After`` in seconds (the date form is not used by spothop server: None)."""
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def connect(server: str | None, token: str | None = None) -> ServerClient | None:
    """The client for ``--server`` (``$SPOTHOP_SERVER``), or None: use the embedded store.

    ``token`` defaults to ``$SPOTHOP_TOKEN``. An empty server URL means the embedded store.
    """
    if server is None or not server.strip():
        return None
    return ServerClient(server, token if token is not None else os.environ.get(TOKEN_ENV))
