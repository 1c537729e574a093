"""Observe: everything one controller pass decides on, read in one place.

:func:`observe` reads, and writes nothing but the attempts' *facts*:

- the live jobs and their attempts (:class:`~spothop.jobs.store.JobStore`);
- the instances every provider has that carry spothop's tags
  (``spothop-job``; ``list_instances``), so an instance whose launch call
  never returned (the controller died in it) is still found by its token;
- the agents' events stored since the cursor (:class:`~.events.EventCursor`),
  oldest first;
- each batch job's queue counts (pending, leased, done, dead);
- the persisted market cooldowns;
- every provider's reserved pools (``list_reservations``, with ``in_use``), for
  the providers that hold some (:class:`~spothop.providers.reservations.ReservedCapacity`);
- the market (:func:`spothop.scheduler.market_view.gather_market_view`),
  at most every ``market_ttl_s`` (it is the slowest read; a pass woken by a
  notice reuses the last one);
- each spot market's availability runs (:class:`~.spot_runs.SpotLog`): every
  view read is recorded, on the controller's clock, so the snapshot says how
  long spot has been up or down (what a deadline policy plans on). The log is
  kept in the store as it changes (``market_spot_runs``) and read back when an
  observer is made, so a controller that restarts goes on with the episode.

Facts, not decisions, are brought up to date here (:mod:`.attempt_facts`), so
that ``decide`` reads a store that agrees with the clouds; ending an attempt is
a decision (``EndAttempt``), never made here. The agents' events are read
through a cursor that moves only once the pass's actions are carried out
(:mod:`.events`); :mod:`.views` turns the observation into the snapshot.

A controller **replica** (:mod:`spothop.jobs.controller.replica`) observes
through a :class:`JobScope`: only the jobs it holds a lease on (their
attempts, and the instances tagged with them: another replica's instances are
not this one's orphans), its own cursor (``agent_events@<owner>``, starting at
its start: what came before is another's, or replayed), and, for each job it
has just taken over, every stored event about the job's live instances again
(of the kinds ``fold`` reads), so an event the replica that held the job
before never acted on is not lost with it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import select

from spothop.jobs.controller.attempt_facts import sync_attempt_facts
from spothop.jobs.controller.clock import provider_now
from spothop.jobs.controller.events import CURSOR_NAME, EventCursor, replayed_events
from spothop.jobs.controller.spot_runs import SpotLog, SpotRunTable
from spothop.jobs.controller.views import Observation, queue_facts, to_snapshot
from spothop.jobs.lifecycle import AttemptState, JobState
from spothop.jobs.records import AttemptRecord
from spothop.jobs.store import JobStore
from spothop.market.clock import SimClock
from spothop.providers.base import Instance, Provider
from spothop.providers.extensions import ClockKeeper
from spothop.providers.reservations import Reservation, ReservedCapacity
from spothop.wire.events import AgentEvent

if TYPE_CHECKING:
    from spothop.jobs.controller.snapshot import Snapshot
    from spothop.market.interruptions import HistoryBook
    from spothop.queue.base import ShardQueue
    from spothop.queue.model import QueueStats
    from spothop.scheduler.market_view import MarketView, ViewCache

log = logging.getLogger(__name__)

TAG_JOB = "spothop-job"
TAG_NODE = "spothop-node"
TAG_TOKEN = "spothop-token"
TAG_ATTEMPT = "spothop-attempt"
TAG_STORE = (
    "spothop-store"  # which job store launched it: a reconciler ends only its own store's orphans
)

LIVE_JOB_STATES = tuple(s for s in JobState if not s.final)


class JobScope(Protocol):
    """The jobs one controller replica holds: job id → since when (unix s, the controller's clock)."""

    def held(self) -> Mapping[str, float]: ...


def clock_rate(provider: Provider | None) -> float:
    """``provider``'s clock seconds per wall second: a simulated clock's ``speed`` (positive,
    finite), else 1."""
    if isinstance(provider, ClockKeeper):
        clock = provider.clock
        if isinstance(clock, SimClock) and 0 < clock.speed < float("inf"):
            return float(clock.speed)
    return 1.0


def boot_deadlines(providers: Mapping[str, Provider]) -> dict[str, float]:
    """Provider → its declared boot deadline (``Capabilities.boot_deadline_s``, its own clock's
    seconds) on the controller's clock: over its clock rate; one that declares none is left out."""
    out: dict[str, float] = {}
    for name, provider in providers.items():
        capabilities = getattr(provider, "capabilities", None)
        declared = getattr(capabilities, "boot_deadline_s", None)
        if declared is not None:
            out[name] = float(declared) / clock_rate(provider)
    return out


def store_tag(store_url: str) -> str:
    """A short, stable name of a job store (its URL hashed; no secret in a tag)."""
    import hashlib

    from spothop.db import normalise_url

    return hashlib.sha256(normalise_url(store_url).encode()).hexdigest()[:16]


def tagged_instances(
    providers: Mapping[str, Provider],
) -> tuple[dict[str, Instance], dict[str, str]]:
    """Every spothop-tagged instance of every provider; and the providers that could not be read."""
    found: dict[str, Instance] = {}
    errors: dict[str, str] = {}
    for name, provider in providers.items():
        try:
            for instance in provider.list_instances():
                if TAG_JOB in instance.tags:
                    found[instance.instance_id] = instance
        except Exception as exc:  # one cloud down must not blind the controller to the others
            errors[name] = f"{type(exc).__name__}: {exc}"
    return found, errors


def reserved_pools(providers: Mapping[str, Provider]) -> tuple[Reservation, ...]:
    """Every reserved pool of the providers that hold some, sorted; a provider that fails is left out."""
    found: list[Reservation] = []
    for name, provider in providers.items():
        if not isinstance(provider, ReservedCapacity):
            continue
        try:
            found.extend(provider.list_reservations())
        except Exception as exc:  # its pools are unusable this pass, nothing else is
            log.warning("provider %s: no reserved pools this pass: %s", name, exc)
    return tuple(sorted(found, key=lambda r: (r.provider, r.reservation_id)))


def queue_stats(queue_url: str | None, job_id: str) -> QueueStats | None:
    """The batch job's queue counts (:class:`~spothop.queue.model.QueueStats`), ``None`` before its shards exist.

    The queue is opened once per process, URL and job, and kept for the next calls (the last
    :data:`QUEUES_KEPT` jobs'): ``status``, the dashboard and ``/metrics`` ask on every call,
    and opening one (an engine and its schema check, or a Redis client and its scripts) cost
    5.2 ms of CPU on SQLite and 1.8 ms on Redis, against 0.8 and 0.13 ms for the counts."""
    from spothop.db import default_database_url
    from spothop.queue.errors import UnknownJobError

    try:
        return _kept_queue(queue_url or default_database_url(), job_id).stats()
    except UnknownJobError:
        return None


QUEUES_KEPT = 32


@functools.lru_cache(maxsize=QUEUES_KEPT)
def _kept_queue(url: str, job_id: str) -> ShardQueue:
    """``job_id``'s queue at ``url``, opened once. One dropped from the cache is closed by the
    garbage collector, never under a caller still counting its shards."""
    from spothop.queue import open_queue

    return open_queue(url, job_id)


class Observer:
    """Builds each pass's :class:`~spothop.jobs.controller.snapshot.Snapshot` (module docstring)."""

    def __init__(
        self,
        store: JobStore,
        providers: Mapping[str, Provider],
        *,
        queue_url: str | None = None,
        market_ttl_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        scope: JobScope | None = None,
        cursor_name: str = CURSOR_NAME,
    ) -> None:
        self.store = store
        self.providers = providers
        self.queue_url = queue_url
        self.market_ttl_s = market_ttl_s
        self.clock = clock
        self.started_at = clock()  # before any launch of this controller (Snapshot contract)
        self.scope = scope
        # A replica's own cursor starts at its start (module docstring); the daemon's at 0.
        start = self.started_at if scope is not None else 0.0
        self.cursor = EventCursor(store, cursor_name, start)
        self._replayed: set[str] = set()  # held jobs whose past events were read again
        self._replaying: set[str] = set()  # ... by the pass in progress (done at commit)
        self._held: Mapping[str, float] = {}
        self._market: MarketView | None = None
        self._market_at = float("-inf")
        self._cache: ViewCache | None = None  # the offerings' columns, kept between passes
        self._history: HistoryBook | None = None  # the store's interruption history as λ
        # each spot market's availability runs, pass after pass, kept in the store across restarts
        self._spot_log = SpotLog(table=SpotRunTable(store.engine))
        self._logged: MarketView | None = None  # the last view recorded in it
        self.last: Observation | None = None

    def market(self) -> MarketView:
        """The market view, read again when older than ``market_ttl_s`` (wall seconds).

        λ comes from the store's interruption history (priors where it has none);
        the offerings' columns are kept while the providers list the same ones.
        """
        from spothop.scheduler.market_view import ViewCache, gather_market_view

        if self._cache is None:
            self._cache = ViewCache()
        if self._market is None or time.monotonic() - self._market_at > self.market_ttl_s:

            def skipped(provider: Provider, exc: Exception) -> None:
                log.warning("provider %s: no market this pass: %s", provider.name, exc)

            if self._history is None:
                from spothop.market.interruptions import HistoryBook

                # λ from the agents' own interruption records in this store (priors where none).
                self._history = HistoryBook(engine=self.store.engine)
            self._market = gather_market_view(
                list(self.providers.values()),
                self._history,
                cache=self._cache,
                on_error=skipped,
            )
            self._market_at = time.monotonic()
        return self._market

    def observe(self) -> Observation:
        now = self.clock()
        held = None if self.scope is None else dict(self.scope.held())
        self._held = held or {}
        jobs = {
            j.job_id: j
            for j in self.store.list_jobs(LIVE_JOB_STATES)
            if held is None or j.job_id in held
        }
        for job_id in live_attempt_jobs(self.store):
            if job_id not in jobs and (held is None or job_id in held):
                jobs[job_id] = self.store.get_job(job_id)  # a final job that still owns an instance
        listed, errors = tagged_instances(self.providers)
        instances = listed
        if held is not None:  # another replica's instances are its own, never orphans here
            instances = self._in_scope(listed, held)
        reservations = reserved_pools(self.providers)
        events = self.cursor.read()
        stored_attempts = {job_id: self.store.attempts(job_id) for job_id in jobs}
        if held is not None:
            self._replayed &= set(held)
            self._replaying = set(jobs) - self._replayed
            events = self._with_replay(events, stored_attempts)
        attempts: dict[str, tuple[AttemptRecord, ...]] = {}
        for job_id in jobs:
            stored = stored_attempts[job_id]
            attempts[job_id] = tuple(
                sync_attempt_facts(self.store, stored, instances, events, self.providers)
            )
        cooldowns = {m: c.until_unix_s for m, c in self.store.cooldowns(now).items()}
        offsets = {name: provider_now(p) - now for name, p in self.providers.items()}
        observation = Observation(
            now=now,
            jobs=tuple(jobs.values()),
            attempts=attempts,
            instances=instances,
            events=tuple(events),
            cooldowns=cooldowns,
            market=self.market(),
            listed_providers=frozenset(self.providers) - frozenset(errors),
            provider_errors=errors,
            reservations=reservations,
            clock_offsets_s=offsets,
            clock_rates={name: clock_rate(p) for name, p in self.providers.items()},
            all_instances=None if held is None else listed,
            boot_deadlines_s=boot_deadlines(self.providers),
        )
        self.last = observation
        return observation

    def _in_scope(
        self, listed: Mapping[str, Instance], held: Mapping[str, float]
    ) -> dict[str, Instance]:
        """The instances a replica decides on: its jobs', and those of jobs no one will hold again.

        A finished job with no live attempt is claimed by no one, so an instance of
        it still up is anyone's to end (``decide``'s orphan rule, idempotent); an
        instance of a live job this replica does not hold is left alone, even while
        that job's lease lapses (its next holder adopts it).
        """
        from spothop.state.job_tables import jobs as jobs_table

        out = {k: i for k, i in listed.items() if i.tags.get(TAG_JOB) in held}
        others = {
            str(i.tags.get(TAG_JOB))
            for i in listed.values()
            if i.state.is_alive and i.tags.get(TAG_JOB) not in held
        }
        if not others:
            return out
        finals = [s.value for s in JobState if s.final]
        with self.store.engine.connect() as conn:
            finished = {
                r[0]
                for r in conn.execute(
                    select(jobs_table.c.job_id).where(
                        jobs_table.c.job_id.in_(sorted(others)), jobs_table.c.state.in_(finals)
                    )
                )
            }
        finished -= set(live_attempt_jobs(self.store))
        out.update({k: i for k, i in listed.items() if i.tags.get(TAG_JOB) in finished})
        return out

    def _with_replay(
        self, events: list[AgentEvent], attempts: Mapping[str, Sequence[AttemptRecord]]
    ) -> list[AgentEvent]:
        """The taken-over jobs' past events (live attempts' instances), then the cursor's, each once."""
        ids = [
            a.instance_id
            for job_id in sorted(self._replaying)
            for a in attempts.get(job_id, ())
            if a.live and a.instance_id
        ]
        past = replayed_events(self.store, ids)
        if not past:
            return events
        seen = {e.event_id for e in past}
        return past + [e for e in events if e.event_id not in seen]

    def commit(self) -> None:
        """The pass's actions are carried out: move the cursor; the replayed jobs are done."""
        self.cursor.commit()
        self._replayed |= self._replaying
        self._replaying = set()

    def snapshot(self) -> Snapshot:
        observation = self.observe()
        gone = frozenset(i for i, inst in observation.instances.items() if not inst.state.is_alive)
        queues = {
            j.job_id: queue_facts(self.queue_url, j.job_id, gone)
            for j in observation.jobs
            if j.kind == "batch"
        }
        if observation.market is not self._logged:  # a view read again: record what it says
            self._spot_log.record(observation.now, observation.market)
            self._logged = observation.market
        return replace(
            to_snapshot(observation, self.store, queues),
            controller_started_at=self.started_at,
            held_since=dict(self._held),
            spot_runs=self._spot_log.runs(),
        )


def live_attempt_jobs(store: JobStore) -> list[str]:
    """Jobs with an attempt not yet ended (whatever the job's state)."""
    from spothop.state.job_tables import job_attempts

    query = (
        select(job_attempts.c.job_id)
        .where(job_attempts.c.state != AttemptState.ENDED.value)
        .distinct()
    )
    with store.engine.connect() as conn:
        return sorted(r[0] for r in conn.execute(query))
