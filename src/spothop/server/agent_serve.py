"""The embedded controller's agent API: :func:`create_agent_app` on loopback.

Two ways to serve it:

- ``python -m spothop.server.agent_serve --store URL --queue-url URL --fd N``
  (:func:`main`): the home's agent API as a process of its own, on the listening
  socket it inherits; :mod:`spothop.server.agent_process` starts it for
  ``spothop controller run`` and it outlives the controller. SIGTERM stops it.
- :func:`serve_agent_api`: in a thread of the calling process (tests).

The daemon never imports this module: the front passes
:func:`spothop.server.agent_process.ensure_agent_api` in (``serve_agents``), as it
passes the ``/metrics`` server.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import threading
import time
from collections.abc import Sequence

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


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the agent API over ``--store`` and ``--queue-url`` on the listening socket ``--fd``
    (inherited from the process that bound it) until SIGTERM or SIGINT; 0. Bad settings: one
    line on stderr, 2."""
    import uvicorn

    from spothop.server.app import create_agent_app
    from spothop.server.settings import Settings

    parser = argparse.ArgumentParser(
        prog="python -m spothop.server.agent_serve",
        description="The home's agent API (started by `spothop controller run`).",
    )
    parser.add_argument("--store", required=True, help="the job store's URL")
    parser.add_argument("--queue-url", required=True, help="the shard queue's URL")
    parser.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = Settings(db_url=args.store, queue_url=args.queue_url, host=HOST, port=0)
        settings.check()
        sock = socket.socket(fileno=args.fd)
    except (ConfigError, OSError) as exc:
        print(f"spothop agent API: {exc}", file=sys.stderr)
        return 2
    url = "http://{}:{}".format(*sock.getsockname()[:2])
    config = uvicorn.Config(
        create_agent_app(settings), log_level="warning", access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    log.info("agent API on %s", url)
    try:
        server.run(sockets=[sock])  # uvicorn's SIGTERM/SIGINT handlers: a graceful exit
    finally:
        sock.close()
    log.info("agent API on %s stopped", url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
