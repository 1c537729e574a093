"""The dashboard's HTTP app: the standard library's ThreadingHTTPServer, nothing else.

Routes (all GET; JSON unless said):

- ``/`` the page; ``/static/<file>`` its script and style (package data);
  ``/static/plotly.min.js`` plotly.js from the installed ``plotly`` package
  (extra ``dashboard``): the charts need no network at run time;
- ``/api/jobs``, ``/api/events?after=SEQ``, ``/api/cost[?job=ID]``,
  ``/api/markets``, ``/api/timeline?job=ID`` — :mod:`spothop.dashboard.data`;
- ``/api/stream``: server-sent events — each new job event as ``event: job``
  (``id`` its seq, so a reconnecting browser resumes after it), and a
  ``tick`` every :data:`TICK_S` so progress and cost move between events;
- ``/metrics``: the Prometheus text (:mod:`spothop.observe.metrics`).

An unknown job is a 404 whose JSON ``error`` says so and lists the nearest
ids; an unknown path a 404; a failure inside a handler a 500 with its
message, never a traceback to the browser.
"""

from __future__ import annotations

import difflib
import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from prometheus_client import CONTENT_TYPE_LATEST

from spothop.dashboard import data
from spothop.errors import ConfigError
from spothop.jobs.errors import JobNotFound
from spothop.jobs.store import JobStore
from spothop.observe.metrics import registry_for, render

log = logging.getLogger(__name__)

DEFAULT_PORT = 8470
POLL_S = 0.25  # how often the stream looks for new events
TICK_S = 2.0
PRICES_TTL_S = 300.0
STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "application/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


def plotly_js() -> bytes:
    """plotly.min.js as the installed ``plotly`` package ships it; ConfigError if not installed."""
    try:
        return resources.files("plotly").joinpath("package_data/plotly.min.js").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError):
        raise ConfigError(
            "the dashboard's charts need plotly.js from the plotly package: "
            "pip install 'spothop[dashboard]'"
        ) from None


MAX_STATIC_NAME = 100


def static_file(name: str) -> bytes | None:
    """The packaged static file ``name``; None for any name that is not one (a path, ``..``, a
    NUL, a name too long for the file system)."""
    if not name or len(name) > MAX_STATIC_NAME or any(c in name for c in "/\\\0") or ".." in name:
        return None
    node = resources.files("spothop.dashboard").joinpath("static", name)
    try:
        return node.read_bytes() if node.is_file() else None
    except (OSError, ValueError):
        return None


class Dashboard:
    """The app over one store: ``queue_url`` for batch progress, ``providers`` for on-demand prices."""

    def __init__(
        self,
        store: JobStore,
        *,
        queue_url: str | None = None,
        providers: Mapping[str, Any] | None = None,
    ) -> None:
        self.store = store
        self.queue_url = queue_url
        self.providers = dict(providers or {})
        self.registry = registry_for(store, queue_url)
        self.stopping = threading.Event()
        self._prices: dict[tuple[str, str, str], float] = {}
        self._prices_at = -PRICES_TTL_S
        self._plotly: bytes | None = None
        self.server: ThreadingHTTPServer | None = None

    # -- data --------------------------------------------------------------------------

    def prices(self) -> dict[tuple[str, str, str], float]:
        if time.monotonic() - self._prices_at > PRICES_TTL_S:
            self._prices = data.on_demand_prices(self.providers)
            self._prices_at = time.monotonic()
        return self._prices

    def nearest_jobs(self, job_id: str) -> list[str]:
        ids = [j.job_id for j in self.store.list_jobs()]
        return difflib.get_close_matches(job_id, ids, n=3, cutoff=0.3) or ids[-3:]

    def api(
        self, path: str, query: Mapping[str, list[str]], only: Collection[str] | None = None
    ) -> Any:
        """The JSON of ``path`` (``/api/jobs``, …); of the jobs in ``only`` when given (the server
        passes a user's project's jobs). KeyError for an unknown path; JobNotFound for a timeline
        of a job outside ``only``."""
        job = (query.get("job") or [""])[0] or None
        if job is not None and only is not None and job not in only:
            raise JobNotFound(job)
        routes: dict[str, Callable[[], Any]] = {
            "/api/jobs": lambda: data.jobs(self.store, self.queue_url, only),
            "/api/events": lambda: data.events(self.store, _int(query, "after"), only=only),
            "/api/cost": lambda: data.cost(self.store, self.prices(), job, only),
            "/api/markets": lambda: data.markets(self.store, only),
            "/api/timeline": lambda: data.timeline(self.store, _required(job, "job")),
        }
        handler = routes.get(path)
        if handler is None:
            raise KeyError(path)
        return handler()

    # -- serving -----------------------------------------------------------------------

    def make_server(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
        app = self

        class Handler(_Handler):
            dashboard = app

        server = ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        self.server = server
        return server

    def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[ThreadingHTTPServer, str]:
        """Serve in a background thread (tests, the server); the server and its base URL."""
        server = self.make_server(host, port)
        threading.Thread(target=server.serve_forever, name="dashboard", daemon=True).start()
        return server, f"http://{host}:{server.server_address[1]}"

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


MAX_SEQ = 2**63 - 1  # the largest event seq a store can hold


def resume_point(raw: str, name: str = "after") -> int:
    """The event seq a stream or an events query resumes after: 0 (the newest) when empty; a
    ConfigError for anything but a whole number from 0 to :data:`MAX_SEQ`."""
    text = raw.strip()
    if not text:
        return 0
    if (
        not (text.isascii() and text.isdigit())
        or len(text) > len(str(MAX_SEQ))
        or int(text) > MAX_SEQ
    ):
        raise ConfigError(
            f"{name} must be a whole number from 0 to {MAX_SEQ} (an event's seq), got {raw[:40]!r}"
        )
    return int(text)


def _int(query: Mapping[str, list[str]], name: str) -> int:
    return resume_point((query.get(name) or [""])[0], name)


def _required(value: str | None, name: str) -> str:
    if not value:
        raise ConfigError(f"the query needs {name}=…")
    return value


class _Handler(BaseHTTPRequestHandler):
    dashboard: Dashboard
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes, content_type: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value, default=str).encode(), "application/json")

    def do_GET(self) -> None:
        app = self.dashboard
        try:
            self._route()
        except KeyError as exc:
            self._json(404, {"error": f"no endpoint {exc.args[0]!r}"})
        except JobNotFound as exc:
            self._json(
                404, {"error": f"no job {exc.job_id!r}", "nearest": app.nearest_jobs(exc.job_id)}
            )
        except ConfigError as exc:
            self._json(400, {"error": str(exc)})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # the page shows the message; the log keeps the traceback
            log.exception("dashboard request %s failed", self.path)
            self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

    def _route(self) -> None:
        url = urlparse(self.path)
        path, query = url.path, parse_qs(url.query)
        app = self.dashboard
        if path in ("/", "/index.html"):
            self._send(200, static_file("index.html") or b"", STATIC_TYPES[".html"])
        elif path == "/static/plotly.min.js":
            if app._plotly is None:
                app._plotly = plotly_js()
            self._send(200, app._plotly, STATIC_TYPES[".js"], cache=True)
        elif path.startswith("/static/"):
            name = path.removeprefix("/static/")
            body = static_file(name) if "/" not in name and ".." not in name else None
            if body is None:
                self._json(404, {"error": f"no static file {name!r}"})
            else:
                self._send(200, body, STATIC_TYPES.get(Path(name).suffix, "text/plain"))
        elif path == "/metrics":
            self._send(200, render(app.registry), CONTENT_TYPE_LATEST)
        elif path == "/api/stream":
            resumed = resume_point(self.headers.get("Last-Event-ID") or "", "Last-Event-ID")
            self._stream(_int(query, "after") or resumed)
        elif path.startswith("/api/"):
            self._json(200, app.api(path, query))
        else:
            self._json(404, {"error": f"no page {path!r}"})

    def _stream(self, after: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        app = self.dashboard
        if after <= 0:
            after = app.store.last_event_seq()
        next_tick = 0.0
        while not app.stopping.is_set():
            for event in data.events(app.store, after):
                after = event["seq"]
                self.wfile.write(
                    f"id: {after}\nevent: job\ndata: {json.dumps(event, default=str)}\n\n".encode()
                )
            if time.monotonic() >= next_tick:
                self.wfile.write(f"event: tick\ndata: {time.time():.3f}\n\n".encode())
                next_tick = time.monotonic() + TICK_S
            self.wfile.flush()
            app.stopping.wait(POLL_S)
