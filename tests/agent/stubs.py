"""Tiny HTTP servers the tests script: canned answers per path, and a minimal independent IMDSv2."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[int, str]
Route = Callable[["StubHandler"], Answer]


class StubHandler(BaseHTTPRequestHandler):
    server: StubServer  # type: ignore[assignment]

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.body = self.rfile.read(length) if length else b""
        self.server.requests.append((self.command, self.path, dict(self.headers), self.body))
        status, body = self.server.route(self)
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        for name, value in self.server.extra_headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = _answer

    def log_message(self, *_args: Any) -> None:
        pass


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, route: Callable[[StubHandler], Answer], *, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), StubHandler)
        self.route = route
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.extra_headers: dict[str, str] = {}
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.shutdown()
        self.server_close()


def canned(
    answers: dict[str, Answer], default: Answer = (404, "Not Found")
) -> Callable[[StubHandler], Answer]:
    """Answer by path (query ignored); ``"sleep:S"`` as a body waits S seconds first (a hung endpoint)."""

    def route(handler: StubHandler) -> Answer:
        status, body = answers.get(handler.path.split("?")[0], default)
        if body.startswith("sleep:"):
            time.sleep(float(body.split(":")[1]))
        return status, body

    return route


class MiniImdsV2:
    """An IMDSv2 written from AWS's documentation alone, sharing no code with spothop's local cloud.

    PUT /latest/api/token (TTL header 1–21600) → token; every GET needs a live
    token (401 otherwise); spot/instance-action is 404 until :meth:`interrupt`,
    then ``{"action": "terminate", "time": "…Z"}``.
    """

    def __init__(self) -> None:
        self.tokens: dict[str, float] = {}
        self.action: dict[str, str] | None = None

    def interrupt(self, at_unix_s: float) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at_unix_s))
        self.action = {"action": "terminate", "time": stamp}

    def __call__(self, handler: StubHandler) -> Answer:
        if handler.command == "PUT" and handler.path == "/latest/api/token":
            ttl = int(handler.headers.get("X-aws-ec2-metadata-token-ttl-seconds") or 0)
            if not 1 <= ttl <= 21600:
                return 400, ""
            token = secrets.token_hex(16)
            self.tokens[token] = time.monotonic() + ttl
            return 200, token
        expiry = self.tokens.get(handler.headers.get("X-aws-ec2-metadata-token") or "")
        if handler.command != "GET" or expiry is None or expiry < time.monotonic():
            return 401, ""
        leaves = {
            "/latest/meta-data/instance-id": "i-0mini",
            "/latest/meta-data/instance-type": "m5.large",
            "/latest/meta-data/placement/availability-zone": "eu-west-1b",
            "/latest/meta-data/placement/region": "eu-west-1",
        }
        if self.action is not None:
            leaves["/latest/meta-data/spot/instance-action"] = json.dumps(self.action)
        value = leaves.get(handler.path)
        return (200, value) if value is not None else (404, "")
