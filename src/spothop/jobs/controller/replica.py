"""Controller replicas: several controllers share one store's jobs through leases on the jobs rows.

Each replica is a :class:`~spothop.jobs.controller.loop.Controller` whose world
is the jobs it holds a lease on (:meth:`JobStore.claim_jobs`: ``FOR UPDATE SKIP
LOCKED`` on PostgreSQL, so replicas take different jobs at once, without a
leader). The contract:

1. **Claim.** A keeper thread, every ``lease_s / 3``, renews the held leases
   (:meth:`JobStore.renew_jobs`: same token, later expiry, two statements
   whatever the number of jobs; a job that needs no controller any more —
   final, no live attempt — is released) and then claims up to
   ``claim_limit`` jobs no one holds, so a replica that starts first does not
   take every waiting job at once: the others claim theirs at their next tick;
   plus its share of the jobs whose holder let the lease lapse (a dead or
   stopped replica's: their count over the live holders, itself included,
   :meth:`JobStore.lease_census`), so those are taken over in one tick, however
   many. A job gained wakes the loop at once.
2. **Fence.** Every write the controller makes goes through
   ``store.fenced(...)``: the job's row is locked under this replica's token
   in the write's own transaction, so a replica that lost a job — paused
   (SIGSTOP, a VM freeze, a long GC) past its lease while another took it —
   writes nothing of it: the write raises :class:`JobLeaseLost` and the job is
   dropped from this replica. On PostgreSQL a replica paused in the middle of a
   transaction would also keep the rows it locked, and every other replica's
   ``SKIP LOCKED`` claim would pass its jobs by until it woke: its sessions
   are ended by the server after half a lease idle in a transaction
   (``idle_in_transaction_session_timeout``), locks and all, so its jobs are
   free once its leases lapse. Cloud calls (terminate, a stop request) check
   the lease right before; a launch's attempt row is a fenced write made
   before the cloud call, as always.
3. **See only your own.** The snapshot holds the held jobs, their attempts,
   and the instances tagged with them: another replica's instances are never
   this one's orphans. A job taken over has its live instances' stored events
   read again once (what its previous holder had not acted on is not lost),
   and its attempts still ``launching`` from before the takeover are ended as
   cut by a crash (``Snapshot.held_since``), as a restarted daemon does.
4. **Release.** A clean stop (``stop_event``) waits for the launches in
   flight, then ends every lease at once (:meth:`JobStore.expire_jobs`), so
   the others share the jobs out at their next tick rather than after ``lease_s``. A killed replica's jobs are taken
   within one lease period of its last renewal: its leases expire, and each
   other replica's keeper, which knows the first foreign lease to lapse
   (:meth:`JobStore.lease_census`), ticks just after it (``LAPSE_MARGIN_S``)
   rather than at its next third of a lease.

Clocks: a lease's expiry is compared with each writer's own clock (the
store's); replicas on several machines need clocks in sync (NTP) to well
within ``lease_s``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spothop.errors import ConfigError
from spothop.jobs.records import JobLease
from spothop.jobs.store import JobStore

if TYPE_CHECKING:
    from spothop.jobs.controller.config import ControllerConfig
    from spothop.jobs.controller.loop import AfterPass, Controller, Loop
    from spothop.providers.base import Distribution, Provider
    from spothop.state.wake import Waker

log = logging.getLogger(__name__)

DEFAULT_LEASE_S = 15.0
DEFAULT_CLAIM_LIMIT = 8  # jobs one replica claims per tick: the rest are left to the others
LAPSE_MARGIN_S = (
    0.05  # how soon after another holder's lease lapses the keeper looks (its clock vs the store's)
)
DEFAULT_PERIOD_S = 5.0
MAX_OWNER_CHARS = 128  # jobs.lease_owner's width
TOKEN_GRACE_ENV = "SPOTHOP_AGENT_TOKEN_GRACE_S"  # server mode: see Executor.sync_tokens


def token_grace_from_env(environ: Mapping[str, str]) -> float | None:
    """``$SPOTHOP_AGENT_TOKEN_GRACE_S``: seconds an ended instance's agent token outlives it."""
    raw = environ.get(TOKEN_GRACE_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86_400:
        raise ConfigError(
            f"${TOKEN_GRACE_ENV}={raw!r}: give the seconds (0 to 86400) an ended instance's "
            "agent token outlives it (default 120)"
        )
    return value  # the slow pass; a gained job and an agent's poke wake it at once


def default_replica_id() -> str:
    """``<hostname>-<pid>``: unique per process on one machine, readable in ``jobs.lease_owner``."""
    return f"{socket.gethostname()}-{os.getpid()}"


def replica_wake_address(home: Path, owner: str) -> str:
    """The replica's own wake socket (the home's is the daemon's): a path, or ``@abstract`` if too long."""
    digest = hashlib.sha256(f"{home.resolve()}\0{owner}".encode()).hexdigest()[:16]
    path = home / "controller" / f"replica-{digest}.sock"
    if len(os.fsencode(str(path))) <= 100 or not sys.platform.startswith("linux"):
        return str(path)
    return f"@spothop-replica-{digest}"


class HeldJobs:
    """The jobs one replica holds: their leases, renewed and extended by :meth:`tick`.

    Thread-safe: the keeper ticks, the controller's writes read :meth:`lease`
    (the fenced store's holder) and call :meth:`drop` when the database says a
    lease no longer holds.
    """

    def __init__(
        self,
        store: JobStore,
        owner: str,
        lease_s: float,
        *,
        claim_limit: int = DEFAULT_CLAIM_LIMIT,
        max_jobs: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not owner or len(owner) > MAX_OWNER_CHARS:
            raise ConfigError(
                f"replica id {owner!r}: give a name of 1 to {MAX_OWNER_CHARS} characters "
                "(default: <hostname>-<pid>)"
            )
        if not lease_s > 0:
            raise ValueError(f"lease_s must be positive, got {lease_s!r}")
        if claim_limit < 1:
            raise ValueError(f"claim_limit must be at least 1, got {claim_limit!r}")
        self.store = store
        self.owner = owner
        self.lease_s = float(lease_s)
        self.claim_limit = claim_limit
        self.max_jobs = max_jobs
        self.clock = clock
        self._lock = threading.Lock()
        self._leases: dict[str, JobLease] = {}
        self._since: dict[str, float] = {}
        self.gained_total = 0
        self.lost_total = 0
        self.next_lapse_unix_s: float | None = None  # another holder's first lease to lapse

    # -- what the controller reads -------------------------------------------------

    def lease(self, job_id: str) -> JobLease | None:
        with self._lock:
            return self._leases.get(job_id)

    def held(self) -> Mapping[str, float]:
        """Job id → since when it is held (this replica's clock)."""
        with self._lock:
            return dict(self._since)

    def drop(self, job_id: str) -> None:
        """Forget ``job_id`` (its lease no longer holds); logged once."""
        with self._lock:
            dropped = self._leases.pop(job_id, None)
            self._since.pop(job_id, None)
            if dropped is not None:
                self.lost_total += 1
        if dropped is not None:
            log.warning("replica %s: lost the lease on %s; dropped it", self.owner, job_id)

    # -- the keeper ----------------------------------------------------------------

    def tick(self) -> tuple[list[str], list[str]]:
        """Renew what is held, then claim more; the jobs (gained, lost)."""
        with self._lock:
            current = list(self._leases.values())
        kept, finished = self.store.renew_jobs(current, self.lease_s)
        renewed = {lease.job_id: lease for lease in kept}
        for job_id in finished:  # released: nothing left to do for it
            with self._lock:
                self._leases.pop(job_id, None)
                self._since.pop(job_id, None)
        lost = sorted(
            lease.job_id
            for lease in current
            if lease.job_id not in renewed and lease.job_id not in finished
        )
        for job_id in lost:
            self.drop(job_id)
        with self._lock:
            for job_id, lease in renewed.items():
                if job_id in self._leases:  # not dropped by a write meanwhile
                    self._leases[job_id] = lease
            mine = len(self._leases)
            exclude = set(self._leases)
        # A dead (or stopped) replica's jobs are shared out at once: this replica's share of
        # them, on top of the few new ones a tick takes (module docstring, 1).
        census = self.store.lease_census(self.owner)
        self.next_lapse_unix_s = census.next_lapse_unix_s
        room = self.claim_limit + -(-census.lapsed // (census.holders + 1))
        if self.max_jobs is not None:
            room = min(room, self.max_jobs - mine)
        gained: list[str] = []
        if room > 0:
            now = self.clock()
            claimed = self.store.claim_jobs(
                self.owner, self.lease_s, limit=room, exclude=sorted(exclude)
            )
            with self._lock:
                for lease in claimed:
                    self._leases[lease.job_id] = lease
                    self._since[lease.job_id] = now
                    gained.append(lease.job_id)
                self.gained_total += len(claimed)
        if gained:
            log.info("replica %s: took %s", self.owner, ", ".join(gained))
        return gained, lost

    def next_tick_s(self) -> float:
        """Seconds until the keeper's next tick: a third of a lease, or sooner, just after
        another holder's lease would lapse (a killed replica's jobs are then taken within
        one lease of its last renewal, not up to a third of one later)."""
        interval = self.lease_s / 3
        if self.next_lapse_unix_s is None:
            return interval
        until = self.next_lapse_unix_s - self.clock() + LAPSE_MARGIN_S
        return min(interval, max(LAPSE_MARGIN_S, until))

    def release_all(self) -> int:
        """End every lease now (a clean stop): the others share the jobs out at their next tick;
        how many still held."""
        with self._lock:
            leases = list(self._leases.values())
            self._leases.clear()
            self._since.clear()
        try:
            return self.store.expire_jobs(leases)
        except Exception as exc:  # they expire by themselves: others take them after lease_s
            log.warning("replica %s: ending its leases failed: %s", self.owner, exc)
            return 0


@dataclass(frozen=True)
class ReplicaStats:
    owner: str
    passes: int
    failed_passes: int
    gained: int
    lost: int
    released: int

    def to_dict(self) -> dict[str, object]:
        return {
            "owner": self.owner,
            "passes": self.passes,
            "failed_passes": self.failed_passes,
            "gained": self.gained,
            "lost": self.lost,
            "released": self.released,
        }


def run_replica(
    store_url: str,
    *,
    owner: str | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    providers: Mapping[str, Provider] | Sequence[str] = (),
    stop_event: threading.Event,
    after_pass: Sequence[AfterPass] = (),
    queue_url: str | None = None,
    period_s: float = DEFAULT_PERIOD_S,
    home: Path | None = None,
    config: ControllerConfig | None = None,
    claim_limit: int = DEFAULT_CLAIM_LIMIT,
    max_jobs: int | None = None,
    control_plane_url: str | None = None,
    on_ready: Callable[[Controller], object] | None = None,
    distribution: Distribution | None = None,
) -> ReplicaStats:
    """Run one controller replica on ``store_url`` in this thread until ``stop_event`` is set.

    ``owner``: this replica's name in the lease rows (default
    :func:`default_replica_id`); ``providers``: the providers by name, or the
    names for :func:`~spothop.providers.registry.default_providers` (empty:
    its defaults). ``after_pass``: the front's hooks (the ledger's books).
    ``control_plane_url``: the server the agents talk to (server mode: each instance gets
    its own token, revoked once its attempt ended and its instance has been gone
    ``$SPOTHOP_AGENT_TOKEN_GRACE_S``, default 120 s), and ``distribution`` the wheel it
    serves (the instances install spothop from it). ``on_ready``
    gets the :class:`Controller` once the first claim is made. Leases are
    released on the way out (module docstring, 4).
    """
    from spothop.jobs.controller.config import config_from_env
    from spothop.jobs.controller.loop import Controller, Loop
    from spothop.paths import spothop_home
    from spothop.providers.registry import default_providers
    from spothop.state.wake import Waker

    home = home or spothop_home()
    owner = owner or default_replica_id()
    # A replica paused mid-transaction has its session ended after half a lease (module
    # docstring, 2): its row locks go with it, so the job is free to claim when its lease lapses.
    store = JobStore(store_url, idle_transaction_timeout_s=lease_s / 2)
    held = HeldJobs(store, owner, lease_s, claim_limit=claim_limit, max_jobs=max_jobs)
    address = replica_wake_address(home, owner)
    waker = Waker(address)
    controller = Controller(
        store,
        providers if isinstance(providers, Mapping) else default_providers(tuple(providers)),
        store_url=store_url,
        queue_url=queue_url,
        home=home,
        config=config if config is not None else config_from_env(os.environ),
        wake_address=address,
        after_pass=after_pass,
        leases=held,
        control_plane_url=control_plane_url,
        token_grace_s=token_grace_from_env(os.environ),
        distribution=distribution,
    )
    loop = Loop(controller.run_pass, waker, period_s)

    keeper = _lease_keeper(owner, held, stop_event, address, loop)
    released = 0
    try:
        try:
            held.tick()
        except Exception as exc:
            log.warning("replica %s: first claim failed: %s", owner, exc)
        keeper.start()
        log.info(
            "replica %s: store %s, lease %.1f s, %d jobs held",
            owner,
            _redacted(store_url),
            lease_s,
            len(held.held()),
        )
        if on_ready is not None:
            on_ready(controller)
        if not stop_event.is_set():
            loop.run()
    finally:
        stop_event.set()
        if keeper.is_alive():
            keeper.join()
        released = _shut_down(owner, store, controller, held, waker)
    return ReplicaStats(
        owner,
        loop.stats.passes,
        loop.stats.failed_passes,
        held.gained_total,
        held.lost_total,
        released,
    )


def _lease_keeper(
    owner: str, held: HeldJobs, stop_event: threading.Event, address: str, loop: Loop
) -> threading.Thread:
    """The thread (not started) that renews ``held``'s leases until ``stop_event``, pokes the loop
    when it gained a job, and stops the loop on the way out."""
    from spothop.state.wake import poke

    def keep() -> None:
        while not stop_event.wait(held.next_tick_s()):
            try:
                gained, _ = held.tick()
            except Exception as exc:  # the database is down: the leases lapse, writes stop
                log.warning("replica %s: renewing leases failed: %s", owner, exc)
                continue
            if gained:
                poke(address)
        loop.stop()

    return threading.Thread(target=keep, name=f"replica-leases-{owner}", daemon=True)


def _shut_down(
    owner: str, store: JobStore, controller: Controller, held: HeldJobs, waker: Waker
) -> int:
    """A stopped replica's way out: its launches finish, its leases go, its cursor is removed; how
    many leases it released."""
    controller.close()  # the launches in flight finish (their writes fenced) first
    released = held.release_all()
    try:
        store.delete_cursor(controller.observer.cursor.name)
    except Exception as exc:
        log.warning("replica %s: its event cursor was not removed: %s", owner, exc)
    waker.close()
    store.close()
    log.info("replica %s: stopped, %d leases released", owner, released)
    return released


def _redacted(url: str) -> str:
    """``url`` without its password (never logged)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<store url>"
