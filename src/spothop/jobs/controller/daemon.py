"""One controller per ``SPOTHOP_HOME``: the lock, the pid file, starting and stopping it.

Files, under ``<home>/controller/``:

- ``controller.lock`` — held (``fcntl.flock``, exclusive) by the running
  controller for as long as it lives; the kernel lets go when the process
  dies, SIGKILL included, so a stale lock is impossible;
- ``controller.json`` — written by the controller once it holds the lock:
  ``pid``, ``started_unix_s``, ``store_url``, ``log``, ``control_plane_url``
  (the agent API its instances are given, when it has one); a SIGKILLed one's stays
  until its successor writes its own, so it is believed only while its ``pid``
  runs (:func:`_holders_info`);
- ``controller.log`` — the background controller's output;
- ``wake.sock`` — its :class:`~spothop.state.wake.Waker`;
- ``agent-api.json`` — the home's agent API, a process of its own that
  outlives the controller (:class:`AgentApiInfo`: ``pid``, ``url``, ``port``,
  ``store_url``, ``queue_url``, ``started_unix_s``, ``dist_sha256``), written by
  whoever starts it (``spothop.server.agent_process``); ``agent-api.log`` its
  output. The next controller reuses it, or starts one on its port (the
  running instances were given that URL);
- ``catalog_refresh.json`` — when each real cloud's catalog was last refreshed
  (:func:`daily_catalog_refresh`: once a day, in the background, never fatal).

Rules:

- :func:`acquire` takes the lock or raises :class:`ControllerRunning`
  naming the pid that holds it ("a second controller on the same home says
  which one runs").
- :func:`status` never takes the lock for more than a probe: it says whether a
  controller runs and which.
- :func:`start_background` starts ``python -m spothop.cli.main controller run``
  in a session of its own (it outlives the command that started it) unless one
  runs, and returns once the new controller holds the lock (or raises with the
  tail of its log if it died first).
- :func:`stop` sends SIGTERM and waits until the lock is free, then stops the
  agent API process (:func:`stop_agent_api`); the instances keep running (a
  controller's death never ends a job), and the next controller adopts them.
  A controller that dies any other way (SIGKILL, a crash) leaves the agent API
  running: its instances' events are stored while no controller runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

from spothop.errors import SpothopError
from spothop.jobs.controller.env_settings import (
    CATALOG_REFRESH_ENV as CATALOG_REFRESH_ENV,
)
from spothop.jobs.controller.env_settings import (
    METRICS_PORT_ENV as METRICS_PORT_ENV,
)
from spothop.jobs.controller.env_settings import (
    catalog_refresh_interval_s,
    daemon_settings,
)
from spothop.paths import PRIVATE_UMASK, open_private, private_dir, spothop_home
from spothop.processes import process_running

if TYPE_CHECKING:
    from spothop.jobs.controller.loop import AfterPass, Loop
    from spothop.jobs.store import JobStore
    from spothop.providers.base import Distribution, Provider
    from spothop.providers.catalog_schedule import DailyRefresh


class Stoppable(Protocol):
    """A server that :meth:`shutdown` stops."""

    def shutdown(self) -> None: ...


class AgentApi(Stoppable, Protocol):
    """The agent API a controller gives its instances: its ``url``, the wheel it serves
    (``distribution``: each instance's boot script installs spothop from it), and
    :meth:`shutdown`, called when the controller ends (the home's agent API process outlives
    it: its shutdown leaves it running)."""

    @property
    def url(self) -> str: ...

    @property
    def distribution(self) -> Distribution: ...


# serve(port, store, queue_url) -> a server with shutdown(): the /metrics endpoint's maker.
MetricsServer = Callable[[int, "JobStore", str], Stoppable]
# serve(home, port or None, store_url, queue_url) -> the agent API, answering: its maker
# (spothop.server.agent_process.ensure_agent_api, passed in by `spothop controller run`).
AgentServer = Callable[[Path, int | None, str, str], AgentApi]

START_TIMEOUT_S = 30.0  # a background controller holds its lock within this (it imports the store)
STOP_TIMEOUT_S = 20.0


class ControllerRunning(SpothopError):
    """Another controller holds this home's lock; ``pid`` is the one that runs."""

    def __init__(self, home: Path, pid: int | None) -> None:
        self.home = home
        self.pid = pid
        which = f"pid {pid}" if pid else "a process whose pid file is not written yet"
        super().__init__(
            f"a controller already runs for SPOTHOP_HOME {str(home)!r} ({which}); "
            "`spothop controller status` shows it, `spothop controller stop` stops it"
        )


class ControllerStartFailed(SpothopError):
    """The background controller exited before it took its lock."""


def controller_dir(home: Path | None = None) -> Path:
    return (home or spothop_home()) / "controller"


@dataclass(frozen=True)
class ControllerInfo:
    """What ``controller.json`` says of the running controller."""

    pid: int
    started_unix_s: float
    store_url: str | None
    log: str | None
    queue_url: str | None = None
    control_plane_url: str | None = None  # the agent API it serves (None: agents use the store)

    def to_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "started_unix_s": self.started_unix_s,
            "store_url": self.store_url,
            "queue_url": self.queue_url,
            "log": self.log,
            "control_plane_url": self.control_plane_url,
        }


class Lock:
    """The held lock of the running controller; :meth:`release` (or exit) lets go."""

    def __init__(self, home: Path, handle: IO[str]) -> None:
        self.home = home
        self._handle = handle

    def write_info(
        self,
        store_url: str | None,
        log: str | None = None,
        queue_url: str | None = None,
        control_plane_url: str | None = None,
    ) -> ControllerInfo:
        info = ControllerInfo(
            os.getpid(), time.time(), store_url, log, queue_url or store_url, control_plane_url
        )
        path = controller_dir(self.home) / "controller.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(info.to_dict()))
        tmp.replace(path)
        return info

    def release(self) -> None:
        with contextlib.suppress(OSError):
            (controller_dir(self.home) / "controller.json").unlink()
        self._handle.close()


AGENT_API_FILE = "agent-api.json"  # the home's agent API process (AgentApiInfo)
AGENT_API_LOG = "agent-api.log"
AGENT_API_MARK = "spothop.server.agent_serve"  # in its command line: a reused pid is not it


@dataclass(frozen=True)
class AgentApiInfo:
    """What ``agent-api.json`` says of the home's agent API process. ``dist_sha256``: the wheel
    of the code it runs (a controller running other code starts another)."""

    pid: int
    url: str
    port: int
    store_url: str
    queue_url: str
    started_unix_s: float
    dist_sha256: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "url": self.url,
            "port": self.port,
            "store_url": self.store_url,
            "queue_url": self.queue_url,
            "started_unix_s": self.started_unix_s,
            "dist_sha256": self.dist_sha256,
        }


def read_agent_api(home: Path | None = None) -> AgentApiInfo | None:
    """``agent-api.json`` as written (its process may have ended), or None if none is readable."""
    try:
        data = json.loads((controller_dir(home) / AGENT_API_FILE).read_text())
        return AgentApiInfo(
            int(data["pid"]),
            str(data["url"]),
            int(data["port"]),
            str(data["store_url"]),
            str(data["queue_url"]),
            float(data["started_unix_s"]),
            str(data.get("dist_sha256") or ""),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_agent_api(home: Path, info: AgentApiInfo) -> None:
    """Write ``agent-api.json`` atomically (a reader never sees half of it)."""
    path = controller_dir(home) / AGENT_API_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info.to_dict()))
    tmp.replace(path)


def agent_api_running(pid: int) -> bool:
    """Whether ``pid`` runs and is an agent API process (its command line names the module;
    without ``/proc``, a running pid is believed)."""
    if not process_running(pid):
        return False
    try:
        return AGENT_API_MARK.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return not Path("/proc/self").is_dir()
    except OSError:
        return True


def agent_api_status(home: Path | None = None) -> AgentApiInfo | None:
    """The home's agent API process, if the one ``agent-api.json`` names runs."""
    info = read_agent_api(home)
    return info if info is not None and agent_api_running(info.pid) else None


def stop_agent_api(
    home: Path | None = None, timeout_s: float = STOP_TIMEOUT_S
) -> AgentApiInfo | None:
    """SIGTERM the home's agent API process and wait (bounded) until it exits, SIGKILL after;
    what ran, or None when none did. Its instances' agents keep their events in their spools
    until an agent API answers on that URL again."""
    info = agent_api_status(home)
    if info is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while process_running(info.pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    return info


def _holders_info(home: Path) -> ControllerInfo | None:
    """``controller.json`` if the process it names still runs; None until the holder wrote its own.

    A SIGKILLed controller leaves its file behind, and the next one takes the lock a moment
    before it writes its own: in between, the file names the dead one.
    """
    info = _read_info(home)
    return info if info is not None and process_running(info.pid) else None


def _read_info(home: Path) -> ControllerInfo | None:
    try:
        data = json.loads((controller_dir(home) / "controller.json").read_text())
        return ControllerInfo(
            int(data["pid"]),
            float(data["started_unix_s"]),
            data.get("store_url"),
            data.get("log"),
            data.get("queue_url"),
            data.get("control_plane_url"),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


PROBE_GRACE_S = (
    0.5  # status() holds the lock for microseconds to probe it: acquire retries past that
)


def acquire(home: Path | None = None) -> Lock:
    """Take the home's controller lock, or raise :class:`ControllerRunning`."""
    home = home or spothop_home()
    directory = private_dir(controller_dir(home))
    handle = open_private(directory / "controller.lock", "a+")  # held for the controller's life
    deadline = time.monotonic() + PROBE_GRACE_S
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return Lock(home, handle)
        except BlockingIOError:
            if _holders_info(home) is None and time.monotonic() < deadline:
                time.sleep(0.01)  # a status() probe, or a controller still writing its info
                continue
            handle.close()
            info = _holders_info(home)
            raise ControllerRunning(home, info.pid if info else None) from None


def status(home: Path | None = None) -> ControllerInfo | None:
    """The running controller of ``home``, or ``None`` if none holds the lock."""
    home = home or spothop_home()
    path = controller_dir(home) / "controller.lock"
    if not path.exists():
        return None
    deadline = time.monotonic() + 2.0
    with open(path, "a+") as handle:
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # Held: a controller runs, or another status() probes. A starting controller's
                # info may not be written yet (or still be a killed one's): look again a moment
                # later, at the lock and the info both.
                info = _holders_info(home)
                if info is not None:
                    return info
                if time.monotonic() >= deadline:
                    return ControllerInfo(0, 0.0, None, None)
                time.sleep(0.05)
                continue
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            return None


def start_background(
    home: Path | None = None,
    store_url: str | None = None,
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> ControllerInfo:
    """The running controller of ``home``; started in the background first if none runs."""
    home = home or spothop_home()
    running = status(home)
    if running is not None:
        return running
    directory = private_dir(controller_dir(home))
    log_path = directory / "controller.log"
    command = [sys.executable, "-m", "spothop.cli.main", "controller", "run", *extra_args]
    if store_url:
        command += ["--store", store_url]
    child_env = {**os.environ, **(env or {}), "SPOTHOP_HOME": str(home)}
    with open_private(log_path) as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=child_env,
            umask=PRIVATE_UMASK,  # what it writes is its user's only (paths.PRIVATE_UMASK)
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        info = status(home)
        if info is not None and info.pid:
            return info
        if process.poll() is not None:
            # It lost a race to another controller (fine: that one runs), or it failed.
            info = status(home)
            if info is not None:
                return info
            tail = log_path.read_text(errors="replace")[-2000:].strip()
            raise ControllerStartFailed(
                f"the controller exited with {process.returncode} before it started: "
                f"{tail or 'no output'} (its log: {log_path})"
            )
        time.sleep(0.05)
    raise ControllerStartFailed(
        f"the controller did not start within {START_TIMEOUT_S:g} s; its log: {log_path}"
    )


def stop(home: Path | None = None, timeout_s: float = STOP_TIMEOUT_S) -> ControllerInfo | None:
    """SIGTERM the running controller and wait until its lock is free (SIGKILL after
    ``timeout_s``), then stop the home's agent API process (:func:`stop_agent_api`); the
    controller that ran, or ``None``."""
    home = home or spothop_home()
    info = status(home)
    if info is not None and not info.pid:
        return info  # a controller starting (its info not written yet): nothing to signal
    if info is not None:
        _stop_controller(home, info, timeout_s)
    stop_agent_api(home)
    return info


def _stop_controller(home: Path, info: ControllerInfo, timeout_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if status(home) is None:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGKILL)
    wait = time.monotonic() + timeout_s  # the lock frees when the kernel has ended it
    while status(home) is not None and time.monotonic() < wait:
        time.sleep(0.05)


# -- running the controller ------------------------------------------------------------


def daily_catalog_refresh(providers: Mapping[str, Provider], home: Path) -> DailyRefresh:
    """The daily live catalog refresh of every real cloud in ``providers`` (not the local world's).

    State (each provider's last attempt) in ``<controller dir>/catalog_refresh.json``:
    :class:`spothop.providers.catalog_schedule.DailyRefresh`. ``$SPOTHOP_CATALOG_REFRESH_S``:
    seconds between refreshes (default a day); ``0`` turns the refresh off; anything else is a
    :class:`~spothop.errors.ConfigError` naming the variable.
    """
    from spothop.providers.catalog_schedule import STATE_FILE, DailyRefresh
    from spothop.providers.registry import LOCAL_FAMILY, members

    interval_s = catalog_refresh_interval_s()
    local = set(members(LOCAL_FAMILY))
    real = {name: p for name, p in providers.items() if name not in local and interval_s > 0}
    return DailyRefresh(real, controller_dir(home) / STATE_FILE, interval_s=interval_s or 1.0)


def run_controller(
    *,
    home: Path | None = None,
    store_url: str | None = None,
    queue_url: str | None = None,
    period_s: float | None = None,
    poll_only: bool = False,
    providers: tuple[str, ...] = (),
    on_ready: Callable[[Loop], object] | None = None,
    metrics_port: int | None = None,
    after_pass: Sequence[AfterPass] = (),
    serve_metrics: MetricsServer | None = None,
    serve_agents: AgentServer | None = None,
    agent_port: int | None = None,
) -> int:
    """Run this home's controller in this process until SIGTERM or SIGINT; 0.

    Takes the lock first (:class:`ControllerRunning` if another holds it),
    then the waker, then runs :class:`~spothop.jobs.controller.loop.Loop`.
    Instances keep running when it ends; the next controller adopts them.
    ``metrics_port`` (else ``$SPOTHOP_METRICS_PORT``; unset: off) serves Prometheus
    ``/metrics`` on 127.0.0.1 through ``serve_metrics`` (``serve(port, store, queue_url)``).
    ``after_pass`` hooks run after every pass (:class:`~spothop.jobs.controller.loop.Controller`).
    Both come from the front that starts the controller (``spothop controller run`` passes
    the ledger's books and :mod:`spothop.observe.metrics`): observability sits above the jobs
    layer, and the jobs layer never imports it.

    ``serve_agents`` (``serve(home, port, store_url, queue_url)``, from the front too:
    :func:`spothop.server.agent_process.ensure_agent_api`) makes sure the home's agent API
    process answers (on 127.0.0.1: ``agent_port``; None: its previous port, else a free one)
    before the loop starts; its URL goes into ``controller.json`` (``control_plane_url``) and
    to every launch, whose agent then talks HTTP with a token of its own. The agent API
    outlives this controller (its ``shutdown`` leaves the process running). Without it the
    agents are given the store's URL (the database plane: tests that run the controller
    in-process).
    """
    import logging

    from spothop.db import default_database_url
    from spothop.jobs.controller.loop import DEFAULT_PERIOD_S, Controller, Loop
    from spothop.jobs.store import JobStore
    from spothop.providers.registry import default_providers
    from spothop.state.wake import Waker, wake_address

    home = home or spothop_home()
    config, metrics_port = daemon_settings(metrics_port)  # before the lock: env_settings.py
    lock = acquire(home)
    waker = None
    controller = None
    metrics_server = None
    agents: AgentApi | None = None
    try:
        url = store_url or default_database_url()
        if serve_agents is not None:
            agents = serve_agents(home, agent_port, url, queue_url or url)
        agents_url = agents.url if agents is not None else None
        lock.write_info(url, str(controller_dir(home) / "controller.log"), queue_url, agents_url)
        address = wake_address(home)
        waker = Waker(address)
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        store = JobStore(url)
        metrics_server = _serve_metrics(metrics_port, serve_metrics, store, queue_url or url)
        controller = Controller(
            store,
            default_providers(providers),
            store_url=url,
            queue_url=queue_url,
            home=home,
            wake_address=address,
            after_pass=after_pass,
            config=config,
            control_plane_url=agents_url,
            distribution=agents.distribution if agents is not None else None,
        )
        catalogs = daily_catalog_refresh(controller.providers, home)

        def step() -> object:
            catalogs.poll()  # in the background, at most once a day per real cloud; never raises
            return controller.run_pass()

        _run_until_signalled(Loop(step, waker, period_s or DEFAULT_PERIOD_S, poll_only), on_ready)
        return 0
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
        if controller is not None:
            controller.close()
        if agents is not None:
            agents.shutdown()
        if waker is not None:
            waker.close()
        lock.release()


def _run_until_signalled(loop: Loop, on_ready: Callable[[Loop], object] | None) -> None:
    """``loop.run()`` until SIGTERM or SIGINT stops it (the previous handlers back after)."""
    previous = {
        sig: signal.signal(sig, lambda *_: loop.stop()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        if on_ready is not None:
            on_ready(loop)
        loop.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve_metrics(
    port: int | None, serve: MetricsServer | None, store: JobStore, queue_url: str
) -> Stoppable | None:
    """The /metrics server on ``port`` (else ``$SPOTHOP_METRICS_PORT``), or None when neither is set."""
    from spothop.errors import ConfigError

    if port is None:
        return None
    if serve is None:
        raise ConfigError(
            "a metrics port was given, but this controller was started without metrics"
        )
    return serve(port, store, queue_url)
