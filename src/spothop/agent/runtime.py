"""The agent itself: self-check, supervise the worker, watch for notices, run the emergency protocol.

:meth:`Agent.run` returns the process's exit code: ``EXIT_DONE`` (0) when the
worker finished, ``EXIT_PREEMPTED`` (75) after a final notice was handled,
``EXIT_WORKER_FAILED`` (1) when the worker crashed past its restart limit.

Threads: the main thread runs the loop below (and gets SIGTERM); one daemon
thread per watcher polls (restarted by the watchdog if it dies); one daemon
thread copies the worker's output to its log. Notices reach the main loop
through a deque (appending is atomic, so the SIGTERM handler may do it) and
are picked up within :data:`MAIN_TICK_S`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from types import FrameType

from spothop.agent import model
from spothop.agent.config import AgentConfig
from spothop.agent.control import ControlDir
from spothop.agent.emergency import EmergencyContext, run_emergency
from spothop.agent.errors import NoticeEndpointError
from spothop.agent.events import EventLog
from spothop.agent.first_boot import probe_first_boot
from spothop.agent.heartbeat import Heartbeat, Heartbeats
from spothop.agent.hooks import InterruptionRecorder, LeaseReleaser, Upload
from spothop.agent.model import Identity, Notice, NoticeKind, SelfCheck
from spothop.agent.notices import Watcher, make_watcher, sigterm_notice
from spothop.agent.supervisor import LogSink, Supervisor
from spothop.agent.watch import WatcherThread, WatchLoop

log = logging.getLogger(__name__)

MAIN_TICK_S = 0.02  # notice → stop latency added by the main loop, at most
SELF_CHECK_ATTEMPTS = 3  # an endpoint still coming up gets a few tries
SELF_CHECK_RETRY_S = 0.3


class Agent:
    """One agent run. Hooks left None are skipped; see :mod:`spothop.agent.emergency`."""

    def __init__(self, config: AgentConfig, *, watcher: Watcher | None = None,
                 releaser: LeaseReleaser | None = None, upload: Upload | None = None,
                 recorders: Sequence[InterruptionRecorder] = (), heartbeats: Heartbeats | None = None,
                 log_sink: LogSink | None = None, echo_json: bool = False) -> None:
        self.config = config
        self.watcher = watcher or make_watcher(
            config.protocol, config.metadata_url, poll_interval_s=config.poll_interval_s,
            assumed_lead_s=config.assumed_lead_s)
        self.releaser, self.upload, self.recorders = releaser, upload, list(recorders)
        self.heartbeats = heartbeats
        self.events = EventLog(config.state_dir, echo_json=echo_json)
        self.control = ControlDir(config.state_dir / "control")
        self.supervisor = Supervisor(config.command, self._worker_env(), config.state_dir / "worker.log",
                                     restart_limit=config.restart_limit,
                                     restart_backoff_s=config.restart_backoff_s, log_sink=log_sink)
        self.notices: collections.deque[Notice] = collections.deque()
        self.wake = threading.Event()
        self.watch = WatcherThread(WatchLoop(self.watcher, self._emit, poll_interval_s=self.watcher.poll_interval_s,
                                             endpoint_lost_polls=config.endpoint_lost_polls))
        self.check = SelfCheck(notice_blind=True, reasons=("not checked yet",))
        self._restart_at: float | None = None
        self._next_beat = 0.0
        self._state = "starting"

    # -- environment and notices -------------------------------------------------

    def _worker_env(self) -> dict[str, str]:
        c = self.config
        env = {**os.environ, **c.extra_env, model.AGENT_DIR_ENV: str(c.state_dir / "control"),
               model.WORKER_ID_ENV: c.worker_id, model.INSTANCE_ID_ENV: c.instance_id}
        for name, value in ((model.JOB_ID_ENV, c.job_id), (model.QUEUE_URL_ENV, c.queue_url),
                            (model.CHECKPOINT_URL_ENV, c.checkpoint_url)):
            if value:
                env[name] = value
        return env

    def _emit(self, notice: Notice) -> None:
        self.notices.append(notice)
        self.wake.set()

    def _on_sigterm(self, _signum: int, _frame: FrameType | None) -> None:
        # Only an append: the handler may interrupt the main thread anywhere, even inside a lock.
        self.notices.append(sigterm_notice(time.time(), self.config.sigterm_grace_s))

    # -- start-up ---------------------------------------------------------------

    def self_check(self) -> SelfCheck:
        """Metadata endpoint answers in its protocol, and the worker's group can be signalled."""
        reasons: list[str] = []
        identity = Identity(instance_id=self.config.instance_id)
        for attempt in range(SELF_CHECK_ATTEMPTS):
            try:
                identity = self.watcher.self_check()
                break
            except NoticeEndpointError as exc:
                if attempt == SELF_CHECK_ATTEMPTS - 1:
                    reasons.append(f"metadata endpoint ({self.config.protocol}): {exc}")
                time.sleep(SELF_CHECK_RETRY_S)
        probe = self.supervisor.probe()
        if probe is not None:
            reasons.append(f"signal path to the worker: {probe}")
        if not identity.instance_id:
            identity = dataclasses.replace(identity, instance_id=self.config.instance_id)
        return SelfCheck(notice_blind=bool(reasons), reasons=tuple(reasons), identity=identity)

    def _probe_first_boot(self) -> None:
        """Measure this instance type's GPUs once, before the worker takes them."""
        try:
            identity = self.watcher.self_check()
        except NoticeEndpointError as exc:
            self.events.write("probe", ran=False, reason=f"instance type unknown: {exc}")
            return
        outcome = probe_first_boot(self.config.cloud, identity.instance_type)
        self.events.write("probe", ran=outcome.ran, reason=outcome.reason, duration_s=round(outcome.duration_s, 3))

    def _start(self) -> None:
        self.control.reset()
        pid = self.supervisor.start()
        self.events.write("worker_started", pid=pid, command=list(self.config.command),
                          restarts=self.supervisor.restarts, worker_id=self.config.worker_id)
        self._set_state("running")

    def _set_state(self, state: str) -> None:
        self._state = state
        self.events.set_status(state=state)

    # -- the loop ---------------------------------------------------------------

    def run(self) -> int:
        """Run until the worker is done, fails for good, or the instance is preempted; return the exit code."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)
        self.events.set_status(instance_id=self.config.instance_id, protocol=self.config.protocol,
                               notice_blind=False, blind_reasons=[])
        if self.config.probe_first_boot:
            self._probe_first_boot()
        self._start()
        self.check = self.self_check()
        self.events.write("self_check", notice_blind=self.check.notice_blind, reasons=list(self.check.reasons),
                          identity=self.check.identity.__dict__)
        self.events.set_status(notice_blind=self.check.notice_blind, blind_reasons=list(self.check.reasons))
        if self.check.notice_blind:
            log.error("notice-blind: %s", "; ".join(self.check.reasons))
            self.events.write("notice_blind", reasons=list(self.check.reasons))
        self.watch.start()
        try:
            code = self._loop()
        finally:
            self.watch.close()
            self.supervisor.kill()
        self.events.write("agent_exit", code=code)
        return code

    def _loop(self) -> int:
        while True:
            self.wake.wait(MAIN_TICK_S)
            self.wake.clear()
            while self.notices:
                notice = self.notices.popleft()
                if notice.kind is NoticeKind.FINAL:
                    return self._preempted(notice)
                self._advance(notice)
            code = self._supervise()
            if code is not None:
                return code
            self._beat()
            if self.watch.ensure_alive():
                self.events.write("watcher_restarted", protocol=self.watcher.protocol, restarts=self.watch.restarts)

    def _advance(self, notice: Notice) -> None:
        seq = self.control.request_checkpoint(f"{notice.protocol}:{notice.cause}")
        self.events.write("advance_notice", notice=notice.as_dict(), checkpoint_seq=seq)

    def _supervise(self) -> int | None:
        if self._restart_at is not None:
            if time.monotonic() >= self._restart_at:
                self._restart_at = None
                self.supervisor.restarts += 1
                self._start()
            return None
        code = self.supervisor.poll()
        if code is None:
            return None
        self.events.write("worker_exited", code=code, restarts=self.supervisor.restarts)
        if code == model.EXIT_DONE:
            self._set_state("done")
            return model.EXIT_DONE
        self._release("worker crashed")
        if not self.supervisor.can_restart():
            self._set_state("failed")
            return model.EXIT_WORKER_FAILED
        self._restart_at = time.monotonic() + self.supervisor.restart_delay_s()
        self._set_state("restarting")
        return None

    def _release(self, why: str) -> None:
        if self.releaser is None:
            return
        try:
            count = self.releaser.release_worker(self.config.worker_id)
        except Exception as exc:
            log.exception("releasing leases (%s) failed", why)
            self.events.write("leases_released", worker_id=self.config.worker_id, count=None, error=str(exc))
            return
        self.events.write("leases_released", worker_id=self.config.worker_id, count=count, why=why)

    def _beat(self) -> None:
        now = time.monotonic()
        if self.heartbeats is None or now < self._next_beat:
            return
        self._next_beat = now + self.config.heartbeat_interval_s
        beat = Heartbeat(self.config.instance_id, self.config.worker_id, time.time(), self._state,
                         self.supervisor.pid, self.supervisor.restarts, self.control.worker_heartbeat(),
                         self.check.notice_blind)
        try:
            self.heartbeats.beat(beat)
        except Exception as exc:  # a control plane that is down must not take the agent with it
            log.warning("heartbeat failed: %s", exc)

    def _preempted(self, notice: Notice) -> int:
        self._set_state("preempting")
        self.events.write("final_notice", notice=notice.as_dict())
        ctx = EmergencyContext(
            supervisor=self.supervisor, control=self.control, events=self.events, identity=self.check.identity,
            cloud=self.config.cloud or self.config.protocol, worker_id=self.config.worker_id,
            safety_margin_s=self.config.safety_margin_s, releaser=self.releaser, upload=self.upload,
            recorders=self.recorders, acknowledge=self.watcher.acknowledge)
        run_emergency(notice, ctx)
        self._set_state("preempted")
        return model.EXIT_PREEMPTED
