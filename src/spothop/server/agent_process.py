"""The home's agent API as a process of its own: it outlives the controller.

The control plane every instance of the home talks to is not the controller's:
a controller that dies (SIGKILL, a crash) must never cost an agent's event, so
the agent API runs in a process of its own (``python -m
spothop.server.agent_serve``, in a session of its own: no signal to the
controller's process group reaches it), which ``spothop controller run``
makes sure of before its loop (:func:`ensure_agent_api`, passed to
:func:`spothop.jobs.controller.daemon.run_controller` as ``serve_agents``).

The contract:

1. ``<home>/controller/agent-api.json``
   (:class:`~spothop.jobs.controller.daemon.AgentApiInfo`) names it. When the
   process it names runs, answers ``GET /healthz`` and serves the same store,
   queue, code (the wheel's sha256) and port (when ``--agent-port`` names one),
   it is reused: same pid, same URL.
2. One process at a time makes sure of it (``agent-api.lock``: the replicas of
   one home may start together). Else the one it names (if any) is stopped, and a new one started on
   127.0.0.1: ``--agent-port``, else the previous one's port when it is free
   (the running instances were given that URL), else a free port. This process
   binds the socket (a port in use is a clear error at once) and hands it over;
   ``agent-api.json`` is written as soon as the process exists, so a controller
   killed meanwhile leaves nothing unnamed. Its output goes to
   ``<home>/controller/agent-api.log``.
3. It answers within :data:`START_TIMEOUT_S`, or it is stopped and
   :class:`AgentApiStartFailed` names the log's tail.
4. The controller's end leaves it running (:meth:`AgentApiProcess.shutdown` does
   nothing); ``spothop controller stop`` stops it after the controller
   (:func:`spothop.jobs.controller.daemon.stop`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from spothop.controlplane.dist import distribution_for
from spothop.errors import ConfigError, SpothopError
from spothop.jobs.controller.daemon import (
    AGENT_API_LOG,
    AGENT_API_MARK,
    AgentApiInfo,
    agent_api_status,
    controller_dir,
    read_agent_api,
    stop_agent_api,
    write_agent_api,
)
from spothop.paths import PRIVATE_UMASK, open_private, private_dir
from spothop.providers.base import Distribution
from spothop.server.agent_serve import HOST

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # it answers within this (it imports the app and opens the store)
HEALTH_TIMEOUT_S = 2.0  # one GET /healthz
ENSURE_LOCK = "agent-api.lock"  # held while one process makes sure of the agent API
LEGACY_PORT_FILE = "agent-api.port"  # where an older controller kept its agent API's port
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class AgentApiStartFailed(SpothopError):
    """The agent API process exited, or did not answer in time, when it was started."""


@dataclass(frozen=True)
class AgentApiProcess:
    """The home's agent API process, answering: ``url``, the wheel it serves
    (``distribution``), its record (``info``)."""

    info: AgentApiInfo
    distribution: Distribution
    # the child this process started (kept: it is reaped, not warned about, while we run)
    process: subprocess.Popen[bytes] | None = field(default=None, compare=False, repr=False)

    @property
    def url(self) -> str:
        return self.info.url

    def shutdown(self) -> None:
        """Nothing: the process outlives the controller (``spothop controller stop`` ends it)."""


def answers(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
    """Whether ``url``'s ``GET /healthz`` answers ``{"status": "ok"}`` (no proxy asked)."""
    try:
        with _NO_PROXY.open(f"{url}/healthz", timeout=timeout_s) as response:
            return bool(json.loads(response.read()).get("status") == "ok")
    except (OSError, ValueError, AttributeError):
        return False


def ensure_agent_api(
    home: Path, port: int | None, store_url: str, queue_url: str
) -> AgentApiProcess:
    """The home's agent API over ``store_url`` and ``queue_url``: the running one reused, or a
    new one started (see the module docstring). A ``port`` in use is a
    :class:`~spothop.errors.ConfigError` naming ``--agent-port``; a process that does not
    answer, :class:`AgentApiStartFailed`."""
    private_dir(controller_dir(home))
    # Replicas of one home (``controller run --replica``) may start together: one at a time
    # here, so the second reuses the first's process instead of starting a rival.
    with open_private(controller_dir(home) / ENSURE_LOCK, "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            return _ensure(home, port, store_url, queue_url)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _ensure(home: Path, port: int | None, store_url: str, queue_url: str) -> AgentApiProcess:
    running = agent_api_status(home)
    if running is not None:
        distribution = distribution_for(running.url, home)
        why = _differs(running, port, store_url, queue_url, distribution.sha256)
        if why is None and answers(running.url):
            log.info("the agent API on %s (pid %d) runs: reused", running.url, running.pid)
            return AgentApiProcess(running, distribution)
        log.info(
            "stopping the agent API on %s (pid %d): %s",
            running.url,
            running.pid,
            why or "it does not answer",
        )
        stop_agent_api(home)
    sock = _listen(port, _previous_port(home))
    try:
        return _start(home, sock, store_url, queue_url)
    finally:
        sock.close()


def _differs(
    info: AgentApiInfo, port: int | None, store_url: str, queue_url: str, dist_sha256: str
) -> str | None:
    """Why the running agent API is not the one wanted, or None."""
    if info.store_url != store_url:
        return "it serves another store"
    if info.queue_url != queue_url:
        return "it serves another queue"
    if port and info.port != port:
        return f"it listens on port {info.port}, not --agent-port {port}"
    if info.dist_sha256 != dist_sha256:
        return "it runs other code"
    return None


def _previous_port(home: Path) -> int:
    """The port the home's last agent API listened on (0: none known)."""
    info = read_agent_api(home)
    if info is not None:
        return info.port
    try:
        return int((controller_dir(home) / LEGACY_PORT_FILE).read_text().strip())
    except (OSError, ValueError):
        return 0


def _listen(port: int | None, previous: int) -> socket.socket:
    """A socket listening on 127.0.0.1: ``port``; with none, ``previous`` when free, else a
    free port."""
    if not port and previous:
        try:
            return _bind(previous)
        except OSError as exc:  # taken meanwhile: its instances' agents wait in their spools
            log.warning("the agent API's previous port %d is taken (%s)", previous, exc.strerror)
    try:
        return _bind(port or 0)
    except OSError as exc:
        raise ConfigError(
            f"--agent-port {port}: cannot listen on {HOST}:{port} ({exc.strerror}); pick another "
            "port, or leave the option out for a free one"
        ) from None


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        sock.listen(128)  # connections wait in the backlog while the process starts
    except OSError:
        sock.close()
        raise
    return sock


def _start(home: Path, sock: socket.socket, store_url: str, queue_url: str) -> AgentApiProcess:
    """Start the agent API process on ``sock``, record it, and wait until it answers."""
    port = int(sock.getsockname()[1])
    url = f"http://{HOST}:{port}"
    log_path = controller_dir(home) / AGENT_API_LOG
    command = [sys.executable, "-m", AGENT_API_MARK, "--store", store_url]
    command += ["--queue-url", queue_url, "--fd", str(sock.fileno())]
    with open_private(log_path) as out:
        process = subprocess.Popen(
            command,
            umask=PRIVATE_UMASK,  # what it writes is its user's only (paths.PRIVATE_UMASK)
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # the controller's process group's signals never reach it
            pass_fds=(sock.fileno(),),
            env={**os.environ, "SPOTHOP_HOME": str(home)},
        )
    distribution = distribution_for(url, home)
    info = AgentApiInfo(
        process.pid, url, port, store_url, queue_url, time.time(), distribution.sha256
    )
    write_agent_api(home, info)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not answers(url):
        if process.poll() is not None or time.monotonic() > deadline:
            why = (
                f"exited with {process.returncode}"
                if process.returncode is not None
                else f"did not answer within {START_TIMEOUT_S:g} s"
            )
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()
            raise AgentApiStartFailed(
                f"the agent API on {url} {why}: {_last_words(log_path)} (its log: {log_path})"
            )
        time.sleep(0.05)
    log.info("the agent API on %s (pid %d) started", url, process.pid)
    return AgentApiProcess(info, distribution, process)


def _last_words(log_path: Path, lines: int = 2) -> str:
    """The log's last lines that are not a traceback's frames (the error itself), joined."""
    try:
        text = log_path.read_text(errors="replace")[-8000:]
    except OSError:
        return "no output"
    said = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line[:1].isspace() and not line.startswith("Traceback")
    ]
    return " / ".join(said[-lines:])[-1000:] or "no output"
