"""Observe: everything one controller pass decides on, read in one place.

:func:`observe` reads, and writes nothing but the attempts' *facts*:

- the live jobs and their attempts (:class:`~spothop.jobs.store.JobStore`);
- the instances every provider has that carry spothop's tags
  (``spothop-job``; ``list_instances``), so an instance whose launch call
  never returned (the controller died in it) is still found by its token;
- the agents' events stored since the cursor (``agent_events``, typed by
  :func:`spothop.wire.events.event_from_dict`), oldest first;
- each batch job's queue counts (pending, leased, done, dead);
- the persisted market cooldowns;
- every provider's reserved pools (``list_reservations``, with ``in_use``), for
  the providers that hold some (:class:`~spothop.providers.reservations.ReservedCapacity`);
- the market (:func:`spothop.scheduler.market_view.gather_market_view`),
  at most every ``market_ttl_s`` (it is the slowest read; a pass woken by a
  notice reuses the last one).

Facts, not decisions, are brought up to date here, so that ``decide`` reads a
store that agrees with the clouds: an attempt ``launching`` whose instance
was found by its token gets its ``instance_id``; ``pending`` → ``running`` →
``noticed`` follow the instance (the noticed time from the agent's
``final_notice`` or the cloud's ``notice_time``). Ending an attempt is a
decision (``EndAttempt``), never made here.

The event cursor: agent events have no global sequence, so the cursor is a
time (``received_unix_s``) with the ids seen within :data:`CURSOR_OVERLAP_S`
before it (each with its received time: the window's, not every id ever read); a pass reads from ``time − overlap`` and skips those ids, so an
event committed late by a slow writer is still read once. The cursor moves
only after the pass's actions are carried out (:meth:`EventCursor.commit`):
a controller killed mid-pass reads the same events again, and none is lost.

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
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from sqlalchemy import select

from spothop.jobs.controller.clock import provider_now, stamp
from spothop.jobs.lifecycle import AttemptState, JobState
from spothop.jobs.store import AttemptRecord, JobRecord, JobStore
from spothop.providers.base import Instance, InstanceState, Provider
from spothop.providers.reservations import Reservation, ReservedCapacity
from spothop.state.agent_tables import agent_events
from spothop.wire.events import AgentEvent, event_from_dict

log = logging.getLogger(__name__)

TAG_JOB = "spothop-job"
TAG_NODE = "spothop-node"
TAG_TOKEN = "spothop-token"
TAG_ATTEMPT = "spothop-attempt"
TAG_STORE = (
    "spothop-store"  # which job store launched it: a reconciler ends only its own store's orphans
)
CURSOR_NAME = "agent_events"
CURSOR_OVERLAP_S = 30.0  # a writer's transaction commits well within this of its received time
MAX_EVENTS_PER_PASS = 5000

LIVE_JOB_STATES = tuple(s for s in JobState if not s.final)
# What fold reads (fold.py): the events a taken-over job's instances are read again for.
FOLD_EVENT_KINDS = (
    "self_check",
    "notice_blind",
    "worker_started",
    "advance_notice",
    "final_notice",
    "interruption",
    "exited",
)


class JobScope(Protocol):
    """The jobs one controller replica holds: job id → since when (unix s, the controller's clock)."""

    def held(self) -> Mapping[str, float]: ...


@dataclass
class Observation:
    """What one pass saw (see the module docstring); ``now`` is the controller's clock."""

    now: float
    jobs: tuple[JobRecord, ...]
    attempts: Mapping[str, tuple[AttemptRecord, ...]]  # job id → its attempts, oldest first
    instances: Mapping[str, Instance]  # instance id → instance, spothop-tagged only
    events: tuple[AgentEvent, ...]
    cooldowns: Mapping[Any, float]  # MarketId → until (unix s)
    market: Any  # scheduler.market_view.MarketView
    listed_providers: frozenset[str] = frozenset()
    provider_errors: Mapping[str, str] = field(default_factory=dict)  # provider → why not read
    reservations: tuple[Reservation, ...] = ()  # every provider's reserved pools, in use as read
    # provider → its clock minus ``now`` at this pass: attempt times are on the provider's clock
    # (clock.py); the snapshot shows them on the controller's (a simulated cloud runs ahead).
    clock_offsets_s: Mapping[str, float] = field(default_factory=dict)
    # provider → its clock's seconds per controller second (a simulated cloud's ``speed``; 1 if
    # it keeps none): spans read on the controller's clock are the provider's over this rate.
    clock_rates: Mapping[str, float] = field(default_factory=dict)
    # Every spothop-tagged instance listed (a replica's ``instances`` are its jobs' only):
    # the orphan reconciler's, which ends this store's instances that no attempt knows.
    all_instances: Mapping[str, Instance] | None = None

    @property
    def listed(self) -> Mapping[str, Instance]:
        return self.instances if self.all_instances is None else self.all_instances


def clock_rate(provider: Any) -> float:
    """``provider``'s clock seconds per wall second: its clock's ``speed`` (positive, finite), else 1."""
    speed = getattr(getattr(provider, "clock", None), "speed", None)
    if isinstance(speed, int | float) and 0 < speed < float("inf"):
        return float(speed)
    return 1.0


def store_tag(store_url: str) -> str:
    """A short, stable name of a job store (its URL hashed; no secret in a tag)."""
    import hashlib

    from spothop.db import normalise_url

    return hashlib.sha256(normalise_url(store_url).encode()).hexdigest()[:16]


class EventCursor:
    """Reads agent events after the persisted cursor; :meth:`commit` moves it (see the module docstring)."""

    def __init__(self, store: JobStore, name: str = CURSOR_NAME, start_unix_s: float = 0.0) -> None:
        self.store = store
        self.name = name
        self.start_unix_s = start_unix_s  # where a cursor never stored starts
        self._pending: tuple[float, dict[str, float]] | None = None

    def _load(self) -> tuple[float, dict[str, float]]:
        """The cursor's time and the ids read within the overlap before it, each with its
        received time (a cursor stored by an older spothop lists ids only: taken as at its
        time, so they leave the window an overlap later)."""
        raw = self.store.cursor(self.name)
        if not raw:
            return self.start_unix_s, {}
        try:
            data = json.loads(raw)
            at, ids = float(data["t"]), data.get("ids", ())
            if isinstance(ids, dict):
                return at, {str(i): float(r) for i, r in ids.items()}
            return at, dict.fromkeys(map(str, ids), at)
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("the agent-event cursor %r does not parse; reading from the start", raw)
            return 0.0, {}

    def read(self) -> list[AgentEvent]:
        since, seen = self._load()
        t = agent_events
        query = (
            select(t.c.event_id, t.c.received_unix_s, t.c.payload)
            .where(t.c.received_unix_s >= since - CURSOR_OVERLAP_S)
            .order_by(t.c.received_unix_s, t.c.event_id)
            .limit(MAX_EVENTS_PER_PASS + len(seen))
        )
        with self.store.engine.connect() as conn:
            rows = conn.execute(query).all()
        events: list[AgentEvent] = []
        window = dict(seen)
        newest = since
        for event_id, received, payload in rows:
            if event_id in seen:
                continue
            try:
                events.append(event_from_dict(json.loads(payload)))
            except Exception as exc:  # a bad row is skipped, once, and said so
                log.warning("agent event %s does not parse: %s", event_id, exc)
            window[event_id] = received
            newest = max(newest, received)
            if len(events) >= MAX_EVENTS_PER_PASS:
                break
        # Each id by its own received time: one older than the overlap can no longer be read
        # again (the next pass reads from newest − overlap), so it leaves the cursor.
        keep = {i: r for i, r in window.items() if r >= newest - CURSOR_OVERLAP_S}
        self._pending = (newest, keep)
        return events

    def commit(self) -> None:
        """Move the cursor past what the last :meth:`read` returned."""
        if self._pending is None:
            return
        newest, ids = self._pending
        self.store.set_cursor(
            self.name, json.dumps({"t": newest, "ids": dict(sorted(ids.items()))})
        )
        self._pending = None


def replayed_events(store: JobStore, instance_ids: Sequence[str]) -> list[AgentEvent]:
    """Every stored event of ``instance_ids`` that fold reads, oldest first (a taken-over job's)."""
    if not instance_ids:
        return []
    t = agent_events
    query = (
        select(t.c.event_id, t.c.payload)
        .where(t.c.instance_id.in_(list(instance_ids)), t.c.kind.in_(FOLD_EVENT_KINDS))
        .order_by(t.c.received_unix_s, t.c.event_id)
    )
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()
    out: list[AgentEvent] = []
    for event_id, payload in rows:
        try:
            out.append(event_from_dict(json.loads(payload)))
        except Exception as exc:
            log.warning("agent event %s does not parse: %s", event_id, exc)
    return out


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


def queue_stats(queue_url: str | None, job_id: str) -> Any:
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
def _kept_queue(url: str, job_id: str) -> Any:
    """``job_id``'s queue at ``url``, opened once. One dropped from the cache is closed by the
    garbage collector, never under a caller still counting its shards."""
    from spothop.queue import open_queue

    return open_queue(url, job_id)


def sync_attempt_facts(
    store: JobStore,
    attempts: Sequence[AttemptRecord],
    instances: Mapping[str, Instance],
    events: Sequence[AgentEvent],
    providers: Mapping[str, Any] | None = None,
) -> list[AttemptRecord]:
    """Bring live attempts' facts up to date with the clouds (module docstring); the attempts as now stored.

    Times written are on the attempt's provider's clock (:mod:`.clock`): the
    instance's own (``running_at``, ``notice_time``), else now on that clock
    (``providers``; the wall for one not given)."""
    providers = providers or {}
    by_token = {i.tags.get(TAG_TOKEN): i for i in instances.values() if i.tags.get(TAG_TOKEN)}
    from spothop.jobs.controller.snapshot import CONTROL_PLANE_PROTOCOL

    # The cloud's notices; an agent's report of the controller's own stop is left to decide's fold
    # (a grouped task's node stopped with its group is not noticed: docs/multinode.md).
    noticed = {
        e.instance_id
        for e in events
        if e.kind == "final_notice" and getattr(e, "protocol", "") != CONTROL_PLANE_PROTOCOL
    }
    out: list[AttemptRecord] = []
    for attempt in attempts:
        current = attempt
        if attempt.live:
            try:
                provider = providers.get(attempt.provider)
                current = _sync_one(store, attempt, instances, by_token, noticed, provider)
            except Exception as exc:  # a refused update leaves the attempt as it was: next pass
                log.warning("syncing attempt %s failed: %s", attempt.attempt_id, exc)
        out.append(current)
    return out


_FOLLOW = {
    InstanceState.PENDING: AttemptState.PENDING,
    InstanceState.RUNNING: AttemptState.RUNNING,
    InstanceState.NOTICED: AttemptState.NOTICED,
}
_ORDER = [AttemptState.LAUNCHING, AttemptState.PENDING, AttemptState.RUNNING, AttemptState.NOTICED]


def _sync_one(
    store: JobStore,
    attempt: AttemptRecord,
    instances: Mapping[str, Instance],
    by_token: Mapping[str | None, Instance],
    noticed: AbstractSet[str],
    provider: Any = None,
) -> AttemptRecord:
    instance = instances.get(attempt.instance_id or "") or by_token.get(attempt.launch_token)
    if instance is None:
        return attempt
    fields: dict[str, Any] = {}
    if attempt.instance_id != instance.instance_id:
        fields["instance_id"] = instance.instance_id
    target = _FOLLOW.get(instance.state)
    if instance.instance_id in noticed and attempt.state in _ORDER:
        target = AttemptState.NOTICED
    if target is not None and _ORDER.index(target) > _ORDER.index(attempt.state):
        if target is AttemptState.RUNNING:
            fields["running_unix_s"] = instance.running_at
        if target is AttemptState.NOTICED:
            fields["noticed_unix_s"] = instance.notice_time
            if attempt.running_unix_s is None and instance.running_at is not None:
                fields["running_unix_s"] = instance.running_at
        fields["state"] = target
        return store.update_attempt(attempt.attempt_id, **stamp(fields, provider))
    if fields:
        attempt = store.update_attempt(attempt.attempt_id, event="attempt_adopted", **fields)
    return attempt


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
        self._market: Any = None
        self._market_at = float("-inf")
        self._cache: Any = None  # the offerings' columns, kept between passes (ViewCache)
        self._history: Any = None  # the store's interruption history as λ (HistoryBook)
        self.last: Observation | None = None

    def market(self) -> Any:
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

    def snapshot(self) -> Any:
        observation = self.observe()
        gone = frozenset(i for i, inst in observation.instances.items() if not inst.state.is_alive)
        queues = {
            j.job_id: queue_facts(self.queue_url, j.job_id, gone)
            for j in observation.jobs
            if j.kind == "batch"
        }
        return replace(
            to_snapshot(observation, self.store, queues),
            controller_started_at=self.started_at,
            held_since=dict(self._held),
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


# -- the snapshot decide reads ----------------------------------------------------------

JOB_FLAG_EVENTS = {
    "cancel_requested": "cancel_requested",
    "shards_enqueued": "shards_enqueued",
    "outputs_published": "outputs_published",
}


@dataclass(frozen=True)
class AgentFacts:
    """What the agent on one instance said, folded from all its events (not only the new ones)."""

    noticed_at: float | None = None
    notice_final: bool = False
    notice_deadline_s: float | None = None
    notice_blind: bool = False
    exit_code: int | None = None
    notice_by_controller: bool = False  # the final notice was the control plane's stop request


def agent_facts(store: JobStore, instance_ids: Sequence[str]) -> dict[str, AgentFacts]:
    """Fold every stored event of each instance into its :class:`AgentFacts`.

    Read from all of the instance's events each pass (indexed by instance id),
    so that nothing about a live attempt depends on the cursor: a restarted
    controller sees the same facts.
    """
    if not instance_ids:
        return {}
    from spothop.jobs.controller.snapshot import CONTROL_PLANE_PROTOCOL

    t = agent_events
    kinds = ("advance_notice", "final_notice", "notice_blind", "worker_exited", "exited")
    query = (
        select(t.c.instance_id, t.c.kind, t.c.payload)
        .where(t.c.instance_id.in_(list(instance_ids)), t.c.kind.in_(kinds))
        .order_by(t.c.time_unix_s, t.c.event_id)
    )
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()
    facts: dict[str, dict[str, Any]] = {}
    for instance_id, kind, payload in rows:
        try:
            data = json.loads(payload)
        except ValueError:
            continue
        f = facts.setdefault(instance_id, {})
        if kind in ("advance_notice", "final_notice"):
            if f.get("notice_final") and kind == "advance_notice":
                continue
            f["noticed_at"] = f.get("noticed_at") or data.get("time_unix_s")
            if kind == "final_notice" and not f.get("notice_final"):
                f["noticed_at"] = data.get("time_unix_s")
                f["notice_final"] = True
                f["by_controller"] = data.get("protocol") == CONTROL_PLANE_PROTOCOL
            f["notice_deadline_s"] = data.get("deadline_unix_s")
        elif kind == "notice_blind":
            f["notice_blind"] = True
        elif kind == "worker_exited":
            f["worker_code"] = data.get("code")
        elif kind == "exited":
            f["agent_code"] = data.get("code")
    out: dict[str, AgentFacts] = {}
    for instance_id, f in facts.items():
        agent_code, worker_code = f.get("agent_code"), f.get("worker_code")
        if agent_code in (0, 75):
            code = agent_code
        else:
            code = worker_code if worker_code is not None else agent_code
        out[instance_id] = AgentFacts(
            noticed_at=f.get("noticed_at"),
            notice_final=bool(f.get("notice_final")),
            notice_deadline_s=f.get("notice_deadline_s"),
            notice_blind=bool(f.get("notice_blind")),
            exit_code=None if code is None else int(code),
            notice_by_controller=bool(f.get("by_controller")),
        )
    return out


def stop_requests(store: JobStore, instance_ids: Sequence[str]) -> dict[str, float]:
    """When a stop was first asked of each instance (``agent_requests``, kind ``stop``)."""
    from spothop.state.agent_tables import agent_requests as t

    if not instance_ids:
        return {}
    query = (
        select(t.c.instance_id, t.c.created_unix_s)
        .where(t.c.instance_id.in_(list(instance_ids)), t.c.kind == "stop")
        .order_by(t.c.created_unix_s)
    )
    out: dict[str, float] = {}
    with store.engine.connect() as conn:
        for instance_id, created in conn.execute(query):
            out.setdefault(instance_id, float(created))
    return out


@dataclass(frozen=True)
class QueueFacts:
    """A batch job's queue, as ``decide`` reads it."""

    stats: Any  # QueueStats
    dead_shards: tuple[str, ...] = ()
    busy_instances: frozenset[str] | None = None


def queue_facts(
    queue_url: str | None, job_id: str, gone: frozenset[str] = frozenset()
) -> QueueFacts | None:
    """Counts always; the dead shards' ids when there are some; the workers holding leases once
    nothing is pending (only then may idle workers be released), else ``None`` (unknown).

    A lease held by a worker whose instance is ``gone`` (ended: preempted, failed,
    terminated) goes back to the queue here, at once: its agent could not hand it
    back (killed before its emergency protocol ended), and waiting out the lease
    would idle the job. Fenced tokens keep this safe even if the worker still ran.
    """
    from spothop.queue import open_queue
    from spothop.queue.errors import UnknownJobError
    from spothop.queue.model import ShardState

    try:
        with open_queue(queue_url, job_id) as queue:
            stats = queue.stats()
            if stats.leased:
                holders = {r.worker for r in queue.records(ShardState.LEASED) if r.worker}
                stale = sorted(holders & gone)
                for worker in stale:
                    released = queue.release_worker(worker)
                    log.info("released %d leases of %s (its instance is gone)", released, worker)
                if stale:
                    stats = queue.stats()
            dead = tuple(sorted(r.id for r in queue.records(ShardState.DEAD))) if stats.dead else ()
            busy = (
                frozenset(r.worker for r in queue.records(ShardState.LEASED) if r.worker)
                if stats.pending == 0
                else None
            )
    except UnknownJobError:
        return None
    return QueueFacts(stats, dead, busy)


def attempt_view(
    record: AttemptRecord,
    facts: AgentFacts | None,
    stop_requested_at: float | None = None,
    clock_offset_s: float = 0.0,
    clock_rate: float = 1.0,
    now: float = 0.0,
) -> Any:
    """The decide view of one attempt; its stored times (the provider's clock) moved onto the
    snapshot's clock (``now``) like the agents' facts: a time ``x`` provider seconds before the
    provider's now (``now + clock_offset_s``) reads ``x / clock_rate`` seconds before ``now``, so
    spans (work done, boot, notice) are controller seconds, on an accelerated cloud too."""
    from spothop.jobs.controller import snapshot

    def moved(t: float) -> float:
        if clock_rate == 1.0:
            return t - clock_offset_s
        return now - (now + clock_offset_s - t) / clock_rate

    def shown(t: float | None) -> float | None:
        return None if t is None else moved(t)

    # The enums as the snapshot module names them (decide compares them with ``is``).
    market_kind, attempt_state, end_reason = (
        getattr(snapshot, n) for n in ("MarketKind", "AttemptState", "EndReason")
    )
    f = facts or AgentFacts()
    return snapshot.AttemptView(
        attempt_id=record.attempt_id,
        job_id=record.job_id,
        node=record.node,
        launch_token=record.launch_token,
        provider=record.provider,
        region=record.region,
        zone=record.zone or None,
        instance_type=record.instance_type,
        market_kind=market_kind(str(record.market_kind)),
        price_usd_per_hour=record.price_usd_per_hour,
        state=attempt_state(str(record.state)),
        launched_at=moved(record.launched_unix_s),
        instance_id=record.instance_id,
        running_at=shown(record.running_unix_s),
        noticed_at=shown(record.noticed_unix_s) or f.noticed_at,
        notice_final=f.notice_final,
        notice_deadline_s=f.notice_deadline_s,
        notice_blind=f.notice_blind,
        ended_at=shown(record.ended_unix_s),
        end_reason=None if record.end_reason is None else end_reason(str(record.end_reason)),
        exit_code=record.exit_code if record.exit_code is not None else f.exit_code,
        error_code=record.error_code,
        stop_requested_at=stop_requested_at,
        notice_by_controller=f.notice_by_controller,
        generation=record.generation,
        group_nnodes=record.group_nnodes,
    )


def job_flags(store: JobStore, job_id: str) -> dict[str, bool]:
    flags = dict.fromkeys(JOB_FLAG_EVENTS.values(), False)
    for event in store.events(job_id):
        name = JOB_FLAG_EVENTS.get(event.kind)
        if name:
            flags[name] = True
    return flags


def to_snapshot(
    observation: Observation, store: JobStore, queues: Mapping[str, QueueFacts | None]
) -> Any:
    """The :class:`~spothop.jobs.controller.snapshot.Snapshot` of one observation."""
    from spothop.jobs.controller import snapshot
    from spothop.jobs.controller.snapshot import JobView, Snapshot

    job_state = vars(snapshot)["JobState"]  # the enum decide compares with ``is``

    instance_ids = [
        a.instance_id for atts in observation.attempts.values() for a in atts if a.instance_id
    ]
    facts = agent_facts(store, instance_ids)
    stops = stop_requests(store, instance_ids)
    views = []
    for job in observation.jobs:
        attempts = tuple(
            attempt_view(
                a,
                facts.get(a.instance_id or ""),
                stops.get(a.instance_id or ""),
                observation.clock_offsets_s.get(a.provider, 0.0),
                observation.clock_rates.get(a.provider, 1.0),
                observation.now,
            )
            for a in observation.attempts.get(job.job_id, ())
        )
        flags = job_flags(store, job.job_id)
        queue = queues.get(job.job_id)
        views.append(
            JobView(
                job_id=job.job_id,
                spec=job.spec(),
                state=job_state(str(job.state)),
                attempts=attempts,
                created_at=job.created_unix_s,
                on_demand_forced=job.on_demand_forced,
                cancel_requested=flags["cancel_requested"],
                queue=None if queue is None else queue.stats,
                shards_enqueued=flags["shards_enqueued"],
                outputs_published=flags["outputs_published"],
                dead_shards=() if queue is None else queue.dead_shards,
                busy_instances=None if queue is None else queue.busy_instances,
                reason=job.reason,
            )
        )
    listed = frozenset(observation.listed_providers)
    return Snapshot(
        now=observation.now,
        jobs=tuple(views),
        market=observation.market,
        cooldowns=dict(observation.cooldowns),
        instances=dict(observation.instances),
        listed_providers=listed,
        events=tuple(observation.events),
        reservations=tuple(observation.reservations),
    )
