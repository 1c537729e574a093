"""The embedded controller's agent API: :func:`create_agent_app` served on loopback, in a thread.

``spothop controller run`` (the home's one controller, no ``spothop server``)
starts it before its loop: the instances of its jobs talk HTTP to it, each with
a token of its own, as they talk to ``spothop server``
(:mod:`spothop.controlplane.http`). The daemon never imports this module: the
front passes :func:`serve_agent_api` in (``serve_agents``), as it passes the
``/metrics`` server.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

from spothop.controlplane.dist import distribution_for
from spothop.errors import ConfigError
from spothop.paths import spothop_home
from spothop.providers.base import Distribution

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0  # uvicorn listens within this (it imports the app and opens the store)
STOP_TIMEOUT_S = 10.0


class AgentApiServer:
    """The agent API served on ``url`` from a thread; :meth:`shutdown` stops it.
    ``distribution``: the wheel it serves (``GET /v1/dist/…``), which the launches carry."""

    def __init__(
        self, server: object, thread: threading.Thread, url: str, distribution: Distribution
    ) -> None:
        self._server = server
        self._thread = thread
        self.url = url
        self.distribution = distribution

    def shutdown(self) -> None:
        """Stop listening (uvicorn's ``should_exit``), and wait for the thread (bounded)."""
        self._server.should_exit = True  # type: ignore[attr-defined]
        self._thread.join(STOP_TIMEOUT_S)


def serve_agent_api(port: int | None, store_url: str, queue_url: str) -> AgentApiServer:
    """Serve :func:`spothop.server.app.create_agent_app` over ``store_url`` and ``queue_url`` on
    127.0.0.1:``port`` (None or 0: a free port the OS picks) in a daemon thread; returns once it
    listens, its URL known. A port in use, or a server that does not start, is a
    :class:`~spothop.errors.ConfigError` naming ``--agent-port``."""
    import uvicorn

    from spothop.server.app import create_agent_app
    from spothop.server.settings import Settings

    settings = Settings(db_url=store_url, queue_url=queue_url, host=HOST, port=port or 0)
    settings.check()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port or 0))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"--agent-port {port}: cannot listen on {HOST}:{port} ({exc.strerror}); pick another "
            "port, or leave the option out for a free one"
        ) from None
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        create_agent_app(settings),
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    # (uvicorn installs no signal handlers off the main thread: the controller's loop keeps its own)

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except Exception:
            log.exception("the agent API stopped")
        finally:
            sock.close()

    thread = threading.Thread(target=run, name="agent-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise ConfigError(
                f"the agent API did not start on {HOST}:{bound}; the controller's log says why"
            )
        time.sleep(0.02)
    url = f"http://{HOST}:{bound}"
    log.info("agent API on %s", url)
    return AgentApiServer(server, thread, url, distribution_for(url, spothop_home()))
