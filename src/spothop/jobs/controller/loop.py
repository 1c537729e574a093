"""The reconcile loop: observe, decide, act — woken by events, with a slow periodic pass.

One pass (:meth:`Controller.run_pass`) is
:func:`~spothop.jobs.controller.observe.observe` (the store, the providers,
the agents' events after the cursor, the queues, the market) →
:func:`~spothop.jobs.controller.decide.decide` (pure) →
:meth:`~spothop.jobs.controller.executor.Executor.execute`.

Between passes the loop sleeps on the home's
:class:`~spothop.state.wake.Waker`: the agent's store process pokes it after
it records an event (a notice, an interruption, a worker's exit), the CLI
after it creates or cancels a job, the executor after a launch ends; so a
final notice becomes a replacement launch within one pass (well under 1 s),
not after a polling period. With no poke, a pass runs every ``period_s``
(default 10 s: what catches an instance the cloud ended without any agent
event, e.g. a host that died). ``poll_only=True`` ignores pokes (the peers'
fixed polling, for ``bench/recovery.py``'s reference column).

A pass that raises is logged and counted (:attr:`Controller.failed_passes`),
never the end of the loop: a store or a cloud that is down now may be back
at the next pass. A store whose disk is full or read-only
(:class:`~spothop.errors.StoreUnwritable`) is one log line per pass naming the
file and the fix: nothing is launched meanwhile (every launch writes its
attempt before the cloud call), what runs keeps running, and the first pass
after the disk has room records what happened meanwhile (an instance launched
just before is adopted by its launch token).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from spothop.errors import StoreUnwritable
from spothop.state.wake import Waker

if TYPE_CHECKING:
    from spothop.jobs.controller.actions import Action
    from spothop.jobs.controller.config import ControllerConfig
    from spothop.jobs.controller.executor import StepReport
    from spothop.jobs.controller.views import Observation
    from spothop.jobs.records import JobLease
    from spothop.jobs.store import JobStore
    from spothop.providers.base import Distribution, Provider

log = logging.getLogger(__name__)


class HeldLeases(Protocol):
    """What a replica's loop needs of the jobs it holds (:class:`~.replica.HeldJobs` is one):
    who holds them, each job's lease for the fenced store, a lost one dropped, and the jobs
    held with since when (the observer's scope)."""

    owner: str

    def lease(self, job_id: str) -> JobLease | None: ...

    def drop(self, job_id: str) -> None: ...

    def held(self) -> Mapping[str, float]: ...


# A hook run after each pass's actions: (job store, providers by name, the pass's observation).
AfterPass = Callable[["JobStore", Mapping[str, "Provider"], "Observation | None"], None]

DEFAULT_PERIOD_S = 10.0


@dataclass
class LoopStats:
    passes: int = 0
    failed_passes: int = 0
    woken: int = 0
    last_pass_s: float = 0.0
    last_error: str | None = None
    started_unix_s: float = field(default_factory=time.time)


class Loop:
    """Run ``step`` now, then after every poke or every ``period_s``, until :meth:`stop`."""

    def __init__(
        self,
        step: Callable[[], object],
        waker: Waker | None = None,
        period_s: float = DEFAULT_PERIOD_S,
        poll_only: bool = False,
    ) -> None:
        self.step = step
        self.waker = waker
        self.period_s = period_s
        self.poll_only = poll_only
        self.stats = LoopStats()
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask the loop to end after the pass it is in (safe from a signal handler)."""
        self._stop.set()
        if self.waker is not None:
            from spothop.state.wake import poke

            poke(self.waker.address)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run_once(self) -> None:
        started = time.monotonic()
        try:
            self.step()
        except StoreUnwritable as exc:  # its disk full or read-only: said in one line, each pass
            self.stats.failed_passes += 1
            self.stats.last_error = str(exc)
            log.error("controller pass failed, retried next pass: %s", exc)
        except Exception as exc:  # the next pass may succeed: never let one end the loop
            self.stats.failed_passes += 1
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("controller pass failed")
        finally:
            self.stats.passes += 1
            self.stats.last_pass_s = time.monotonic() - started

    def run(self) -> LoopStats:
        next_periodic = time.monotonic()
        while not self._stop.is_set():
            self.run_once()
            if time.monotonic() >= next_periodic:
                next_periodic = time.monotonic() + self.period_s
            while not self._stop.is_set():
                timeout = max(0.0, next_periodic - time.monotonic())
                if self.waker is None:
                    self._stop.wait(timeout)
                    woke = False
                else:
                    woke = self.waker.wait(timeout)
                if self._stop.is_set():
                    break
                if woke and not self.poll_only:
                    self.stats.woken += 1
                    break
                if time.monotonic() >= next_periodic:
                    break
        return self.stats


def replica_cursor(owner: str) -> str:
    """A replica's own agent-event cursor name (``agent_events@<owner>``, hashed past 64 chars)."""
    import hashlib

    from spothop.jobs.controller.events import CURSOR_NAME

    name = f"{CURSOR_NAME}@{owner}"
    if len(name) <= 64:
        return name
    return f"{CURSOR_NAME}@{hashlib.sha256(owner.encode()).hexdigest()[:32]}"


class Controller:
    """One controller over one job store and a set of providers: :meth:`run_pass` is one reconcile.

    Order within a pass: observe (facts synced) → ``decide`` → execute →
    reconcile orphans → move the event cursor. Launches whose node already has
    a launch in flight are dropped before execution (the executor would skip them).
    """

    def __init__(
        self,
        store: JobStore,
        providers: Mapping[str, Provider],
        *,
        store_url: str,
        queue_url: str | None = None,
        home: Path | None = None,
        config: ControllerConfig | None = None,
        wake_address: str | None = None,
        market_ttl_s: float = 5.0,
        after_pass: Sequence[AfterPass] = (),
        leases: HeldLeases | None = None,
        control_plane_url: str | None = None,
        token_grace_s: float | None = None,
        distribution: Distribution | None = None,
    ) -> None:
        """``after_pass``: hooks run after each pass's actions with the store, the providers
        and the pass's observation (the ledger's books, from the front that starts the
        controller: observability sits above the jobs layer, so the jobs layer never imports
        it); a hook that raises is logged and the pass goes on.

        ``leases`` (a :class:`~spothop.jobs.controller.replica.HeldJobs`): a replica's jobs.
        The controller then sees only the jobs it holds, and writes through
        ``store.fenced(...)``, so a job it lost takes none of its writes (docs/controller.md,
        "Replicas"). ``None``: every job of the store (the home's one daemon).
        ``control_plane_url``: the server the agents talk to (server mode: each instance gets
        a token of its own, revoked ``token_grace_s`` after its attempt ended and its instance
        went), else the store itself; ``distribution``: the wheel it serves, which each
        instance's boot script installs spothop from."""
        from spothop.jobs.controller.events import CURSOR_NAME
        from spothop.jobs.controller.executor import DEFAULT_TOKEN_GRACE_S, Executor
        from spothop.jobs.controller.observe import Observer
        from spothop.state.wake import poke

        self.base_store = store
        self.leases = leases
        if leases is not None:
            store = store.fenced(leases.lease, on_lost=leases.drop)
        self.store = store
        self.providers = providers
        self.store_url = store_url
        self.queue_url = queue_url or store_url
        self.config = config
        self.observer = Observer(
            store,
            providers,
            queue_url=self.queue_url,
            market_ttl_s=market_ttl_s,
            scope=leases,
            cursor_name=CURSOR_NAME if leases is None else replica_cursor(leases.owner),
        )
        self.executor = Executor(
            store,
            providers,
            store_url=store_url,
            queue_url=self.queue_url,
            home=home,
            wake=lambda: poke(wake_address),
            wake_address=wake_address,
            control_plane_url=control_plane_url,
            token_grace_s=DEFAULT_TOKEN_GRACE_S if token_grace_s is None else token_grace_s,
            distribution=distribution,
        )
        self.last_actions: list[Action] = []
        self.last_reports: list[StepReport] = []
        self.orphans_terminated = 0
        self.listeners: list[Callable[[float, list[Action]], None]] = []  # benches and tests
        self.after_pass = tuple(after_pass)

    def run_pass(self) -> list[StepReport]:
        from spothop.jobs.controller import TAG_JOB, Launch, decide
        from spothop.jobs.orphans import reconcile

        started = time.monotonic()
        # Read before the observe: a launch that ends after it has stored its instance by then.
        inflight = self.executor.launching()
        snapshot = replace(self.observer.snapshot(), launching=frozenset(inflight))
        observed = time.monotonic()
        actions = decide(snapshot, self.config) if self.config is not None else decide(snapshot)
        decided = time.monotonic()
        last = self.observer.last
        if last is not None:
            self.executor.instance_jobs = {
                i: inst.tags.get(TAG_JOB) for i, inst in last.instances.items()
            }
            if self.leases is not None:  # a finished job's instance no one holds (observe.py)
                held = {j.job_id for j in last.jobs}
                self.executor.unheld_instances = frozenset(
                    i for i, job in self.executor.instance_jobs.items() if job not in held
                )
        inflight = self.executor.launching()
        actions = [
            a for a in actions if not (isinstance(a, Launch) and (a.job_id, a.node) in inflight)
        ]
        decided_at = time.time()
        reports = self.executor.execute(actions)
        for hook in self.after_pass:
            try:
                hook(self.store, self.providers, self.observer.last)
            except Exception:
                log.exception("after-pass hook %s failed", getattr(hook, "__name__", hook))
        for listener in self.listeners:
            listener(decided_at, actions)
        observation = self.observer.last
        if observation is not None:
            # Every instance of this store (not only this replica's jobs'): one no attempt knows.
            self.orphans_terminated += len(
                reconcile(self.base_store, self.store_url, self.providers, observation.listed)
            )
            self.executor.sync_tokens(observation)  # server mode: agent tokens bound, revoked
        self.observer.commit()
        if actions:
            log.info(
                "pass: observe %.0f ms, decide %.0f ms, execute %.0f ms: %s",
                (observed - started) * 1000,
                (decided - observed) * 1000,
                (time.monotonic() - decided) * 1000,
                ", ".join(sorted({type(a).__name__ for a in actions})),
            )
        for report in reports:
            if not report.ok:
                log.warning("%s failed: %s", report.action, report.error)
        self.last_actions, self.last_reports = actions, reports
        return reports

    def close(self) -> None:
        self.executor.close()
