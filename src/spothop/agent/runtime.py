"""The agent itself: self-check, supervise the worker, watch for notices, run the emergency protocol.

:meth:`Agent.run` returns the process's exit code: ``EXIT_DONE`` (0) when the
worker finished, ``EXIT_PREEMPTED`` (75) after a final notice was handled or when the worker
itself exited 75 (resumable: the controller relaunches it), ``EXIT_WORKER_FAILED``
(1) when the worker crashed past its restart limit (its own code is in the
``worker_exited`` event, and the controller keeps that one).

Threads: the main thread runs the loop below (and gets SIGTERM); one daemon
thread per watcher polls (restarted by the watchdog if it dies); one daemon
thread copies the worker's output to its log; one daemon thread registers,
heartbeats and reads requests from the control plane (:mod:`spothop.agent.link`).
Notices and requests reach the main loop through deques (appending is
atomic, so the SIGTERM handler may do it) and are picked up within
:data:`MAIN_TICK_S`. Every event goes to ``events.jsonl`` and the control
plane (:mod:`spothop.agent.reporter`).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from spothop.agent import model
from spothop.agent.code import CodeFetchError, fetch_code
from spothop.agent.config import AgentConfig
from spothop.agent.control import ControlDir
from spothop.agent.emergency import EmergencyContext, release_leases, run_emergency
from spothop.agent.errors import NoticeEndpointError
from spothop.agent.events import EventLog
from spothop.agent.first_boot import probe_first_boot
from spothop.agent.hooks import LeaseReleaser, Upload
from spothop.agent.job_secrets import add_secrets
from spothop.agent.link import ControlLink
from spothop.agent.logship import LogShipper
from spothop.agent.model import Identity, Notice, NoticeKind, SelfCheck, final_notice
from spothop.agent.mounts import MountError, apply_mounts
from spothop.agent.notices import Watcher, make_watcher, sigterm_notice
from spothop.agent.rendezvous import RendezvousWait, with_address
from spothop.agent.reporter import Reporter
from spothop.agent.supervisor import LogSink, Supervisor
from spothop.agent.watch import WatcherThread, WatchLoop
from spothop.controlplane.open import TOKEN_ENV, NoControlPlane
from spothop.controlplane.queue_leases import QueueLeases, queue_leases
from spothop.wire.contract import (
    CONTROL_PLANE_PROTOCOL,
    ControlPlane,
    ControlRequest,
    Heartbeat,
    Registration,
)
from spothop.wire.events import (
    AdvanceNotice,
    Exited,
    FinalNotice,
    LeasesReleased,
    NoticeBlind,
    Probe,
    RequestReceived,
    SelfCheckEvent,
    Stamp,
    WatcherRestarted,
    WorkerExited,
    WorkerStarted,
)
from spothop.wire.group import GENERATION_ENV, NNODES_ENV, deferred
from spothop.wire.logs import (
    ATTEMPT_ID_ENV,
    NODE_RANK_ENV,
    read_worker_phase,
    worker_log_path,
    worker_phase_path,
)
from spothop.worker import channel

log = logging.getLogger(__name__)

MAIN_TICK_S = 0.02  # notice → stop latency added by the main loop, at most
SELF_CHECK_ATTEMPTS = 3  # an endpoint still coming up gets a few tries
SELF_CHECK_RETRY_S = 0.3
FINAL_FLUSH_S = 2.0  # at exit, how long spooled events may take to reach the control plane
RENDEZVOUS_TICK_S = 0.2  # while a group's node waits: how soon it sees a stop, at most
LOG_FLUSH_S = 3.0  # at exit (after the emergency protocol too), how long the log's rest may take


class Agent:
    """One agent run. Hooks left None are skipped; see :mod:`spothop.agent.emergency`.

    ``plane`` is the control plane (default: none, the local log only);
    ``queue`` the job's queue (default: from ``config.queue_url`` and
    ``config.job_id``), where leases go back when the control plane cannot be
    reached; ``releaser`` replaces both for releasing leases.
    """

    def __init__(
        self,
        config: AgentConfig,
        *,
        watcher: Watcher | None = None,
        plane: ControlPlane | None = None,
        releaser: LeaseReleaser | None = None,
        queue: QueueLeases | None = None,
        upload: Upload | None = None,
        log_sink: LogSink | None = None,
        echo_json: bool = False,
    ) -> None:
        self.config = config
        self.watcher = watcher or make_watcher(
            config.protocol,
            config.metadata_url,
            poll_interval_s=config.poll_interval_s,
            assumed_lead_s=config.assumed_lead_s,
        )
        self.queue = queue or queue_leases(config.queue_url, config.job_id)
        self.plane: ControlPlane = plane or NoControlPlane(self.queue)
        self.releaser, self.upload = releaser, upload
        self.events = EventLog(config.state_dir, echo_json=echo_json)
        self.reporter = Reporter(
            self.events,
            self.plane,
            Stamp(
                instance_id=config.instance_id,
                provider=config.cloud or config.protocol,
                job_id=config.job_id or "",
                worker_id=config.worker_id,
            ),
        )
        self.control = ControlDir(config.state_dir / "control")
        self.supervisor = Supervisor(
            config.command,
            self._worker_env(),
            worker_log_path(config.state_dir),
            restart_limit=config.restart_limit,
            restart_backoff_s=config.restart_backoff_s,
            log_sink=log_sink,
            cwd=config.workdir,
        )
        self.notices: collections.deque[Notice] = collections.deque()
        self.wake = threading.Event()
        self.watch = WatcherThread(
            WatchLoop(
                self.watcher,
                self._emit,
                poll_interval_s=self.watcher.poll_interval_s,
                endpoint_lost_polls=config.endpoint_lost_polls,
            )
        )
        self.link = ControlLink(
            self.plane,
            self._registration,
            self._heartbeat,
            config.heartbeat_interval_s,
            self.wake,
            requests_interval_s=config.requests_interval_s,
        )
        self.shipper = log_shipper(config, self.plane)
        self.check = SelfCheck(notice_blind=True, reasons=("not checked yet",))
        self._restart_at: float | None = None
        self._state = "starting"

    # -- environment and notices -------------------------------------------------

    def _worker_env(self) -> dict[str, str]:
        c = self.config
        env = {
            **os.environ,
            **c.extra_env,
            channel.AGENT_DIR_ENV: str(c.state_dir / "control"),
            channel.WORKER_ID_ENV: c.worker_id,
            channel.INSTANCE_ID_ENV: c.instance_id,
        }
        # The control plane's credential is the agent's, not the job's code's; except for a batch
        # worker whose queue is reached through the control plane (an http(s) queue URL), which
        # calls it with the instance's token (scoped to this job and instance).
        if not (c.queue_url or "").startswith(("http:", "https:")):
            env.pop(TOKEN_ENV, None)
        for name, value in (
            (channel.JOB_ID_ENV, c.job_id),
            (channel.QUEUE_URL_ENV, c.queue_url),
            (channel.CHECKPOINT_URL_ENV, c.checkpoint_url),
        ):
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
            self.reporter.report(Probe, ran=False, reason=f"instance type unknown: {exc}")
            return
        outcome = probe_first_boot(self.config.cloud, identity.instance_type)
        self.reporter.report(
            Probe, ran=outcome.ran, reason=outcome.reason, duration_s=round(outcome.duration_s, 3)
        )

    def _start(self) -> None:
        self.control.reset()
        worker_phase_path(self.config.state_dir).unlink(missing_ok=True)  # the driver writes it
        pid = self.supervisor.start()
        self.reporter.report(
            WorkerStarted,
            pid=pid,
            command=tuple(self.config.command),
            restarts=self.supervisor.restarts,
        )
        self._set_state("running")

    def _set_state(self, state: str) -> None:
        self._state = state
        self.events.set_status(state=state)

    # -- the loop ---------------------------------------------------------------

    def run(self) -> int:
        """Run until the worker is done, fails for good, or the instance is preempted; return the exit code."""
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            return self._run()
        finally:
            if (
                previous is not None
            ):  # run in-process (tests, a library caller): leave SIGTERM as it was
                signal.signal(signal.SIGTERM, previous)

    def _run(self) -> int:
        self.events.set_status(
            instance_id=self.config.instance_id,
            protocol=self.config.protocol,
            notice_blind=False,
            blind_reasons=[],
        )
        if not self._prepare():
            return self._failed_before_start()
        if self.config.probe_first_boot:
            self._probe_first_boot()
        # A group's node starts its worker only with its group's rendezvous (agent/rendezvous.py).
        group = deferred(self.supervisor.env)
        if not group:
            self._start()
        self.check = self.self_check()
        if group:
            self.check = with_address(self.check, self.config.protocol)
        identity = self.check.identity
        self.reporter.identify(
            instance_id=identity.instance_id,
            region=identity.region,
            zone=identity.zone,
            instance_type=identity.instance_type,
        )
        self.reporter.report(
            SelfCheckEvent,
            protocol=self.config.protocol,
            notice_blind=self.check.notice_blind,
            reasons=self.check.reasons,
            identity=dataclasses.asdict(identity),
        )
        self.events.set_status(
            notice_blind=self.check.notice_blind, blind_reasons=list(self.check.reasons)
        )
        if self.check.notice_blind:
            log.error("notice-blind: %s", "; ".join(self.check.reasons))
            self.reporter.report(
                NoticeBlind, protocol=self.config.protocol, reasons=self.check.reasons
            )
        self.watch.start()
        self.link.start()
        if self.shipper is not None:
            self.shipper.start()
        try:
            code = self._await_rendezvous() if group else None
            if code is None:
                if group:
                    self._start()
                code = self._loop()
        finally:
            self.watch.close()
            self.link.close()
            self.supervisor.kill()
            if self.shipper is not None and not self.shipper.close(LOG_FLUSH_S):
                log.warning("the worker's log was not all shipped; the rest stays in its file")
        self.reporter.report(Exited, code=code)
        left = self.plane.flush(FINAL_FLUSH_S)
        if left:
            log.warning("%d events did not reach the control plane; they stay in the spool", left)
        self.plane.close()
        return code

    def _prepare(self) -> bool:
        """Code, files and secrets (agent/job_secrets.py) in place; False (logged) if one is not."""
        c = self.config
        ready = (not c.code_url or self._fetch_code()) and (not c.mounts or self._mount_files())
        return ready and add_secrets(self.plane, self.supervisor.env)

    def _fetch_code(self) -> bool:
        """The job's code into ``workdir`` before the worker starts; False (logged) when it cannot."""
        c = self.config
        assert c.code_url is not None and c.code_sha256 is not None
        workdir = c.workdir or c.state_dir / "workdir"
        try:
            fetched = fetch_code(
                c.code_url, c.code_sha256, workdir, token=c.token, instance_id=c.instance_id
            )
        except CodeFetchError as err:
            log.error("code: %s", err)
            return False
        self.supervisor.cwd = workdir
        log.info("%s into %s", fetched.line(), workdir)
        return True

    def _mount_files(self) -> bool:
        """The job's file mounts onto the node before the worker starts (relative ones in the
        worker's working folder); False (logged) when one cannot be put there."""
        c = self.config
        workdir = Path(self.supervisor.cwd or os.getcwd())
        try:
            apply_mounts(c.mounts, workdir, token=c.token, instance_id=c.instance_id, log=log.info)
        except MountError as err:
            log.error("%s; the worker is not started", err)
            return False
        return True

    def _failed_before_start(self) -> int:
        """A failed attempt that never ran the worker (its code or files did not arrive)."""
        self.reporter.report(Exited, code=model.EXIT_WORKER_FAILED)
        self.plane.flush(FINAL_FLUSH_S)
        self.plane.close()
        return model.EXIT_WORKER_FAILED

    def _await_rendezvous(self) -> int | None:
        """Wait for the group's rendezvous (:mod:`spothop.agent.rendezvous`) while acting on
        requests and notices; None once the worker's environment has it, else the exit code."""
        env = self.supervisor.env
        what = (
            f"node {env.get(NODE_RANK_ENV, '?')} of {env.get(NNODES_ENV, '?')}"
            f" (generation {env.get(GENERATION_ENV, '?')})"
        )
        wait = RendezvousWait(self.plane, timeout_s=self.config.rendezvous_timeout_s, what=what)
        self._set_state("rendezvous")
        while not wait.expired:
            self.wake.wait(min(RENDEZVOUS_TICK_S, wait.wait_s()))
            self.wake.clear()
            stopped = self._drain(on_final=self._stopped_before_start)
            if stopped is not None:
                return stopped
            answer = wait.step()
            if answer is not None:
                self.supervisor.env.update(answer.env())
                return None
        log.error(
            "%s had no rendezvous within %g s (--rendezvous-timeout); giving up: the controller"
            " relaunches the group",
            what,
            self.config.rendezvous_timeout_s,
        )
        self._set_state("failed")
        return model.EXIT_WORKER_FAILED

    def _stopped_before_start(self, notice: Notice) -> int:
        """A final notice (or the control plane's stop) before the worker started: recorded, and
        the agent exits resumable; nothing ran, so nothing is saved."""
        self._set_state("preempting")
        self.reporter.report(FinalNotice, **_notice_fields(notice), raw=notice.raw)
        self.watcher.acknowledge(notice)
        self._set_state("preempted")
        return model.EXIT_PREEMPTED

    def _drain(self, on_final: Callable[[Notice], int]) -> int | None:
        """Handle the control plane's requests and the notices that came in; a final notice ends
        the wait or the run through ``on_final`` (its exit code returned), else None."""
        while self.link.requests:
            self._request(self.link.requests.popleft())
        while self.notices:
            notice = self.notices.popleft()
            if notice.kind is NoticeKind.FINAL:
                return on_final(notice)
            self._advance(notice)
        return None

    def _loop(self) -> int:
        while True:
            self.wake.wait(MAIN_TICK_S)
            self.wake.clear()
            preempted = self._drain(on_final=self._preempted)
            if preempted is not None:
                return preempted
            code = self._supervise()
            if code is not None:
                return code
            if self.watch.ensure_alive():
                self.reporter.report(
                    WatcherRestarted, protocol=self.watcher.protocol, restarts=self.watch.restarts
                )

    def _advance(self, notice: Notice) -> None:
        seq = self.control.request_checkpoint(f"{notice.protocol}:{notice.cause}")
        self.reporter.report(
            AdvanceNotice,
            **_notice_fields(notice),
            checkpoint_seq=seq,
        )

    def _request(self, request: ControlRequest) -> None:
        """What the control plane asked: a checkpoint now, or a stop (a final notice of its own)."""
        self.reporter.report(
            RequestReceived,
            request_id=request.request_id,
            request=request.kind,
            reason=request.reason,
        )
        if request.kind == "checkpoint":
            self.control.request_checkpoint(f"control-plane:{request.reason or 'checkpoint'}")
        elif request.kind == "stop":
            now = time.time()
            deadline = request.deadline_unix_s if request.deadline_unix_s is not None else now
            self.notices.append(
                final_notice(
                    CONTROL_PLANE_PROTOCOL,
                    "stop-requested",
                    seen_at=now,
                    deadline=deadline,
                    documented_lead_s=None,
                    raw=request.reason,
                )
            )
        else:
            log.warning(
                "ignoring control-plane request %s of unknown kind %r",
                request.request_id,
                request.kind,
            )
        self.link.acknowledge(request)

    def _supervise(self) -> int | None:
        if self._restart_at is not None:
            if time.monotonic() >= self._restart_at:
                self._restart_at = None
                self.supervisor.restarts += 1
                self._start()
            return None
        code = self.supervisor.poll()
        if code is None or (code != model.EXIT_DONE and self._final_pending()):
            return None  # a final notice that came with the exit (one shutdown's SIGTERMs) first
        self.reporter.report(
            WorkerExited,
            code=code,
            restarts=self.supervisor.restarts,
            phase=read_worker_phase(self.config.state_dir) if code else "",
        )
        if code == model.EXIT_DONE:
            self._set_state("done")
            return model.EXIT_DONE
        if code == model.EXIT_PREEMPTED:
            # The worker says "resumable, relaunch me" (docs/jobs.md): the controller relaunches
            # it on an instance of its choosing; restarting it here would only repeat the exit.
            self._release("worker exited resumable (75)")
            self._set_state("preempted")
            return model.EXIT_PREEMPTED
        self._release("worker crashed")
        if not self.supervisor.can_restart():
            self._set_state("failed")
            return model.EXIT_WORKER_FAILED
        self._restart_at = time.monotonic() + self.supervisor.restart_delay_s()
        self._set_state("restarting")
        return None

    def _final_pending(self) -> bool:
        return any(n.kind is NoticeKind.FINAL for n in self.notices)

    def _release(self, why: str) -> None:
        count, via, error = release_leases(
            self.config.worker_id, self.plane, self.releaser, self.queue
        )
        self.reporter.report(LeasesReleased, count=count, cause=why, via=via, error=error)

    def _registration(self) -> Registration:
        return Registration(
            **self.reporter.stamp.__dict__,
            protocol=self.config.protocol,
            notice_blind=self.check.notice_blind,
            reasons=self.check.reasons,
            private_address=self.check.identity.private_address,
        )

    def _heartbeat(self) -> Heartbeat:
        return Heartbeat(
            self.reporter.stamp.instance_id,
            self.config.worker_id,
            time.time(),
            self._state,
            self.supervisor.pid,
            self.supervisor.restarts,
            self.control.worker_heartbeat(),
            self.check.notice_blind,
            job_id=self.config.job_id or "",
            provider=self.reporter.stamp.provider,
            worker_step=self.control.worker_step(),
        )

    def _preempted(self, notice: Notice) -> int:
        self._set_state("preempting")
        self.reporter.report(
            FinalNotice,
            **_notice_fields(notice),
            raw=notice.raw,
        )
        ctx = EmergencyContext(
            supervisor=self.supervisor,
            control=self.control,
            reporter=self.reporter,
            plane=self.plane,
            worker_id=self.config.worker_id,
            safety_margin_s=self.config.safety_margin_s,
            releaser=self.releaser,
            queue=self.queue,
            upload=self.upload,
            acknowledge=self.watcher.acknowledge,
        )
        run_emergency(notice, ctx)
        self._set_state("preempted")
        return model.EXIT_PREEMPTED


def log_shipper(config: AgentConfig, plane: ControlPlane) -> LogShipper | None:
    """The shipper of the worker's output, for an agent the launcher started for an attempt
    (``SPOTHOP_ATTEMPT_ID`` set); None otherwise (the output stays in the instance's file)."""
    attempt_id = os.environ.get(ATTEMPT_ID_ENV, "")
    if not attempt_id:
        return None
    node = os.environ.get(NODE_RANK_ENV, "0")
    return LogShipper(
        plane,
        worker_log_path(config.state_dir),
        instance_id=config.instance_id,
        attempt_id=attempt_id,
        job_id=config.job_id or "",
        node=int(node) if node.isdigit() else 0,
    )


def _notice_fields(notice: Notice) -> dict[str, Any]:
    """What an advance and a final notice event both carry of the notice."""
    return {
        "protocol": notice.protocol,
        "cause": notice.cause,
        "notice_id": notice.event_id,
        "notice_time_unix_s": notice.notice_time,
        "deadline_unix_s": notice.deadline,
        "lead_time_s": notice.lead_time_s,
    }
