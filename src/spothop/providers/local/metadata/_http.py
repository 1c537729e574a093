"""What every protocol handler shares: the HTTP server, request dispatch, tokens, time formats.

A protocol module subclasses :class:`MetadataHandler` and implements
:meth:`MetadataHandler.route`, which turns one parsed request into a
:class:`Response`. The base class guarantees that nothing escapes a handler
thread: an exception in ``route`` becomes a 500, a client that hangs up is
ignored, and request logging goes to stderr only when the server's ``debug``
flag is set.
"""

from __future__ import annotations

import abc
import contextlib
import email.utils
import json
import logging
import secrets
import socket
import socketserver
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, cast
from urllib.parse import parse_qs, unquote, urlsplit

from spothop.providers.base import BillingRule
from spothop.providers.local.metadata.codes import ErrorCodes, IdQuery, InstanceIdShape
from spothop.providers.local.metadata.state import Clock, InstanceMetadata, NoticeState

_log = logging.getLogger(__name__)

# The largest request body read (Azure's StartRequests is a few hundred bytes).
MAX_BODY_BYTES = 64 * 1024
TEXT = "text/plain"
JSON = "application/json"


@dataclass(frozen=True)
class Request:
    """One parsed request: method, percent-decoded path, query (first value per key), headers."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]  # keys lower-cased
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes | str = b""
    content_type: str = TEXT
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def text(
        cls, body: str, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> Response:
        return cls(status, body, TEXT, dict(headers or {}))

    @classmethod
    def json(
        cls, payload: Any, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> Response:
        return cls(status, json.dumps(payload, separators=(",", ":")), JSON, dict(headers or {}))


NO_ANSWER = Response(0)  # route() returns it to close the connection without answering


def listing(keys: list[str]) -> str:
    """A metadata directory listing: one key a line, sub-directories with a trailing slash."""
    return "\n".join(keys)


# -- time formats ------------------------------------------------------------

ISO_UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # AWS termination-time example "2015-01-05T18:02:00Z"
CHINA_STANDARD_TIME = timezone(timedelta(hours=8), "CST")  # Tencent prints UTC+8


def iso_utc(ts: float) -> str:
    """``2026-01-01T00:02:00Z``: whole seconds, UTC."""
    return datetime.fromtimestamp(int(ts), UTC).strftime(ISO_UTC_FORMAT)


def rfc1123(ts: float) -> str:
    """``Mon, 19 Sep 2016 18:29:47 GMT`` (Azure's NotBefore)."""
    return email.utils.formatdate(int(ts), usegmt=True)


def china_standard(ts: float) -> str:
    """``2018-08-18 12:05:33`` in UTC+8 (Tencent's termination-time)."""
    return datetime.fromtimestamp(int(ts), CHINA_STANDARD_TIME).strftime("%Y-%m-%d %H:%M:%S")


# -- session tokens (IMDSv2 and Alibaba's hardened mode) ---------------------


class TokenStore:
    """Random per-server session tokens whose TTL runs on the injected clock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._expiry: dict[str, float] = {}

    def issue(self, ttl_s: int) -> str:
        token = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            self._expiry = {t: e for t, e in self._expiry.items() if e > now}
            self._expiry[token] = now + ttl_s
        return token

    def valid(self, token: str) -> bool:
        with self._lock:
            expiry = self._expiry.get(token)
        return expiry is not None and expiry > self._clock()


def parse_ttl(raw: str | None, low: int, high: int) -> int | None:
    """The TTL header as an int in ``[low, high]``, or None when missing or malformed."""
    if raw is None:
        return None
    try:
        ttl = int(raw.strip())
    except ValueError:
        return None
    return ttl if low <= ttl <= high else None


# -- server and handler ------------------------------------------------------


class MetadataHTTPServer(ThreadingHTTPServer):
    """A threading server that carries the instance, its notices and per-server protocol state."""

    daemon_threads = True  # a long-poll in flight never keeps the process alive
    block_on_close = False

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[MetadataHandler],
        metadata: InstanceMetadata,
        notices: NoticeState,
        options: Mapping[str, Any],
        debug: bool = False,
    ) -> None:
        self.metadata = metadata
        self.notices = notices
        self.options = dict(options)
        self.debug = debug
        self.tokens = TokenStore(notices.now)
        self.stopping = threading.Event()  # set by MetadataServer.stop(): hanging GETs answer now
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN (a DNS lookup); a loopback endpoint needs none.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


class MetadataHandler(BaseHTTPRequestHandler, abc.ABC):
    """Base of every protocol handler. Subclasses implement :meth:`route`.

    ``OPTIONS`` names the keyword options a protocol accepts (checked by
    ``MetadataServer``); their values are in ``self.server.options``.
    ``OPTION_VALUES`` closes the values of those that take one of a few.
    ``MAINTENANCE_CODES`` are the scheduled-event codes the protocol serves
    (:class:`~spothop.providers.local.metadata.state.ScheduledEvent`); empty
    where it serves none. ``MAINTENANCE_ENDS`` are those after which the
    instance is gone (a stop, a retirement); see
    :mod:`spothop.providers.local.maintenance`. ``ERROR_CODES`` and
    ``INSTANCE_IDS`` are the imitated cloud's API error codes and instance-id
    shape (:mod:`.codes`); every protocol declares both, and ``BILLING``, the
    imitated cloud's billing rule (what the local cloud bills by).
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset()
    OPTION_VALUES: ClassVar[Mapping[str, frozenset[str]]] = {}
    MAINTENANCE_CODES: ClassVar[frozenset[str]] = frozenset()
    MAINTENANCE_ENDS: ClassVar[frozenset[str]] = frozenset()
    ERROR_CODES: ClassVar[ErrorCodes]
    INSTANCE_IDS: ClassVar[InstanceIdShape]
    BILLING: ClassVar[BillingRule]
    ID_QUERY: ClassVar[IdQuery] = IdQuery()

    @classmethod
    def new_event_id(cls) -> str:
        """A new scheduled event's id, in the protocol's shape."""
        return secrets.token_hex(8)

    @classmethod
    def maintenance_description(cls, code: str) -> str:
        """The description a scheduled event with ``code`` carries unless the user gives one."""
        return code

    server_version = "spothop-metadata/1"
    sys_version = ""

    @property
    def meta_server(self) -> MetadataHTTPServer:
        return cast(MetadataHTTPServer, self.server)

    @property
    def metadata(self) -> InstanceMetadata:
        return self.meta_server.metadata

    @property
    def notices(self) -> NoticeState:
        return self.meta_server.notices

    @abc.abstractmethod
    def route(self, request: Request) -> Response:
        """Answer one request in the protocol's terms; each protocol module implements it."""

    # Every method goes through one dispatcher; route() answers 405 where a method is not allowed.
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def _dispatch(self, method: str) -> None:
        try:
            response = self._answer(method)
        except Exception:  # a bug in a handler is a 500 and a log record, never a dead thread
            _log.exception("metadata handler failed on %s %s", method, self.path)
            response = Response.text("internal error\n", 500)
        if response is NO_ANSWER:  # an answer lost on the way, as a dropped packet is
            self.close_connection = True
            return
        # A client that hung up (a long-poll given up on) needs no answer.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._send(response, include_body=method != "HEAD")

    def _answer(self, method: str) -> Response:
        length_raw = self.headers.get("Content-Length")
        try:
            length = int(length_raw) if length_raw else 0
        except ValueError:
            return Response.text("bad Content-Length\n", 400)
        if length < 0:
            return Response.text("bad Content-Length\n", 400)
        if length > MAX_BODY_BYTES:
            return Response.text("request body too large\n", 413)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        headers = {k.lower(): v for k, v in self.headers.items()}
        request = Request(method, unquote(parts.path) or "/", query, headers, body)
        return self.route(request)

    def _send(self, response: Response, include_body: bool) -> None:
        body = response.body.encode() if isinstance(response.body, str) else response.body
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if include_body and body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        if self.meta_server.debug:
            sys.stderr.write(f"[metadata {self.address_string()}] {format % args}\n")


def tree_lookup(leaves: Mapping[str, str], path: str) -> str | None:
    """The value at ``path`` in a flat ``{"a/b": value}`` tree, a directory listing, or None.

    Leading and trailing slashes are ignored, so ``placement/`` lists the
    ``placement`` directory and ``/instance-id/`` reads the leaf.
    """
    key = path.strip("/")
    if key in leaves:
        return leaves[key]
    prefix = f"{key}/" if key else ""
    children: set[str] = set()
    for leaf in leaves:
        if leaf.startswith(prefix):
            head, sep, _rest = leaf[len(prefix) :].partition("/")
            children.add(head + sep)
    return listing(sorted(children)) if children else None


def serve_leaves(leaves: Mapping[str, str], root: str, path: str) -> Response:
    """A GET under ``root`` answered from ``leaves`` (values and directory listings); 404 otherwise."""
    if path != root and not path.startswith(root + "/"):
        return Response.text("Not Found\n", 404)
    value = tree_lookup(leaves, path[len(root) :])
    if value is None:
        return Response.text("Not Found\n", 404)
    return Response.text(value)


def issue_token(
    request: Request,
    tokens: TokenStore,
    ttl_header: str,
    ttl_min_s: int,
    ttl_max_s: int,
    echo_ttl: bool,
) -> Response:
    """The IMDSv2-style session token PUT (AWS; Alibaba's token mode copies it).

    A forwarded request (``X-Forwarded-For``) is refused as the real services
    refuse it, so a proxy on the instance cannot mint tokens for others.
    """
    if request.header("X-Forwarded-For") is not None:
        return Response.text("Forbidden\n", 403)
    ttl = parse_ttl(request.header(ttl_header), ttl_min_s, ttl_max_s)
    if ttl is None:
        return Response.text("Bad Request\n", 400)
    token = tokens.issue(ttl)
    return Response.text(token, headers={ttl_header: str(ttl)} if echo_ttl else None)
