"""The control plane in spothop's store: the store and the queue, written directly, in this process.

What the embedded control plane's store process runs
(:mod:`spothop.controlplane.host`; the agent itself talks to it through
:class:`~spothop.controlplane.embedded.EmbeddedControlPlane`), and what
a server can serve the agent API with. The tables are those of
:mod:`spothop.state.agent_tables`:

- ``register`` and ``heartbeat`` upsert the instance's ``agent_heartbeats`` row
  (``register`` with state ``registered``; the identity itself is in the
  ``self_check`` event the agent records next);
- ``record`` inserts into ``agent_events`` keyed by ``event_id`` (a resent
  event is stored once); an ``interruption`` event also goes to the market
  store's preemption history (:mod:`spothop.market.interruptions`), once;
- the schema is brought up to date by the state package's migrations
  (:func:`spothop.state.ensure_schema`) when the store is first opened;
- ``release_leases`` goes to the job's queue (:mod:`spothop.queue`) when
  the queue and the job are known, else there is nothing to release (0);
- ``requests`` reads the instance's unacknowledged ``agent_requests`` rows;
- ``rendezvous`` reads the job's attempts (``job_attempts``), their agents' registered
  addresses (``agent_heartbeats.private_address``) and what says a node is going (a stop asked,
  an agent's final notice or exit): :func:`group_rendezvous`;
- ``secrets`` reads the job's sealed secrets (``job_secrets``) for the live attempt the instance
  runs, and opens them with the key in this process's home (:mod:`spothop.state.sealed`);
- ``ship_log`` appends a chunk of an attempt's output to ``job_log_chunks``
  in order (:func:`spothop.state.worker_logs.append_chunk`: a resent part is
  skipped, a gap raises :class:`~spothop.wire.errors.LogOffsetGap`).

SQLAlchemy, the store and the queue are imported on first use or by
:meth:`StoreControlPlane.warm`; importing this module loads only the
standard library.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from spothop.controlplane.queue_leases import QueueLeases
from spothop.wire.contract import CONTROL_PLANE_PROTOCOL, ControlRequest, Heartbeat, Registration
from spothop.wire.errors import ControlPlaneError
from spothop.wire.events import AgentEvent, Interruption
from spothop.wire.group import Rendezvous, group_port
from spothop.wire.logs import LogChunk

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    from spothop.market.interruptions import InterruptionStore
    from spothop.state.sealed import SecretBox

log = logging.getLogger(__name__)


def ensure_agent_schema(engine: Engine) -> None:
    """Bring the store's schema up to date (the state package's migrations create the agent tables)."""
    from spothop.state import ensure_schema

    ensure_schema(engine)


class StoreControlPlane:
    """spothop's store at ``url`` (default: the default database), for the instance ``instance_id``."""

    def __init__(
        self,
        url: str | None,
        instance_id: str,
        *,
        queue: QueueLeases | None = None,
        box: SecretBox | None = None,
    ) -> None:
        self.url = url
        self.instance_id = instance_id
        self.queue = queue
        self.box = box  # the key the job's secrets are opened with (default: this home's)
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self._history: InterruptionStore | None = None  # the preemption history, opened once

    # -- the store, opened on first use ------------------------------------------

    @property
    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                from spothop.db import default_database_url, shared_engine

                try:
                    engine = shared_engine(self.url or default_database_url())
                    ensure_agent_schema(engine)
                except Exception as exc:
                    raise ControlPlaneError(
                        f"the embedded store {self.url or 'default'} cannot be opened: "
                        f"{exc}; check --control-plane"
                    ) from exc
                self._engine = engine
            return self._engine

    @property
    def history(self) -> InterruptionStore:
        """The market store's preemption history in this store (its tables made sure of once)."""
        engine = self.engine
        with self._lock:
            if self._history is None:
                from spothop.market.interruptions import InterruptionStore

                self._history = InterruptionStore(engine=engine)
            return self._history

    def prepare(self) -> None:
        """Open the store and import the preemption history and the queue, in a thread."""
        threading.Thread(target=self.warm, name="control-plane-prepare", daemon=True).start()

    def warm(self) -> None:
        """Open the store, the preemption history and the queue once, now, so that the emergency protocol's
        record and release pay none of their first-use cost; logs a failure, never raises."""
        try:
            _ = (
                self.history
            )  # the store and the preemption history, so the interruption's record is fast
        except Exception as exc:  # the steps that need it will report the failure themselves
            log.warning("opening the embedded control plane's store failed: %s", exc)
        try:
            if self.queue is not None:  # apart: a store that is down must not leave the queue cold
                self.queue.warm()
        except Exception as exc:
            log.warning("opening the job's queue failed: %s", exc)

    # -- the contract ------------------------------------------------------------

    def register(self, registration: Registration) -> None:
        self._upsert_heartbeat(registration_row(registration))

    def heartbeat(self, beat: Heartbeat) -> None:
        self._upsert_heartbeat(beat.to_dict())

    def _upsert_heartbeat(self, row: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            upsert_heartbeat(conn, row)

    def record(self, event: AgentEvent) -> None:
        """Store ``event`` once; an interruption also reaches the preemption history once."""
        self.record_many([event])

    def record_many(self, events: Sequence[AgentEvent]) -> int:
        """Store each of ``events`` once, in one transaction (a batch the server received); an
        interruption among them also reaches the preemption history once. How many were new."""
        from sqlalchemy import delete

        from spothop.state.agent_tables import agent_events

        if not events:
            return 0
        engine = self.engine
        now = time.time()
        rows = {
            e.event_id: {
                "event_id": e.event_id,
                "schema_version": e.schema_version,
                "kind": e.kind,
                "instance_id": e.instance_id,
                "job_id": e.job_id,
                "provider": e.provider,
                "region": e.region,
                "zone": e.zone,
                "instance_type": e.instance_type,
                "time_unix_s": e.time_unix_s,
                "received_unix_s": now,
                "payload": json.dumps(e.to_dict(), default=str),
            }
            for e in events
        }
        with _one_statement(engine) as conn:
            # One cached statement, its rows sent as parameters (insertmanyvalues: one round trip
            # a batch of rows, up to 1000: a batch is at most EVENTS_BATCH); RETURNING, not
            # rowcount: psycopg reports -1 for it.
            result = conn.execute(_events_statement(conn.dialect.name), list(rows.values()))
            inserted = {str(r[0]) for r in result}
        if inserted:
            _wake_controller()
        done: set[str] = set()
        for event in events:
            if event.event_id not in inserted or event.event_id in done:
                continue
            done.add(event.event_id)  # a duplicate later in the batch is not recorded again
            if not isinstance(event, Interruption) or event.protocol == CONTROL_PLANE_PROTOCOL:
                continue  # the controller's own stop (a group's other nodes, a handover): no market took it
            try:
                _record_interruption(self.history, event)
            except Exception:
                # Undo the event row, so that resending the event writes both again (never half).
                with engine.begin() as conn:
                    conn.execute(
                        delete(agent_events).where(agent_events.c.event_id == event.event_id)
                    )
                raise
        return len(inserted)

    def release_leases(self, worker_id: str) -> int:
        """The worker's leases back to the job's queue; 0 when no queue is known (nothing was leased)."""
        return self.queue.release_worker(worker_id) if self.queue is not None else 0

    def requests(self) -> list[ControlRequest]:
        from sqlalchemy import select

        from spothop.state.agent_tables import agent_requests as t

        query = (
            select(t)
            .where(t.c.instance_id == self.instance_id, t.c.acknowledged_unix_s.is_(None))
            .order_by(t.c.id)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            ControlRequest(
                request_id=str(r["id"]),
                kind=r["kind"],
                reason=r["reason"],
                created_unix_s=r["created_unix_s"],
                deadline_unix_s=r["deadline_unix_s"],
            )
            for r in rows
        ]

    def acknowledge(self, request_id: str) -> None:
        from sqlalchemy import update

        from spothop.state.agent_tables import agent_requests as t

        with self.engine.begin() as conn:
            conn.execute(
                update(t)
                .where(t.c.id == int(request_id), t.c.instance_id == self.instance_id)
                .values(acknowledged_unix_s=time.time())
            )

    def ship_log(self, chunk: LogChunk) -> None:
        self.store_log(chunk)

    def rendezvous(self) -> Rendezvous | None:
        with self.engine.connect() as conn:
            return group_rendezvous(conn, self.instance_id)

    def secrets(self) -> dict[str, str]:
        from spothop.state.sealed import SecretBox

        with self.engine.connect() as conn:
            return attempt_secrets(conn, self.instance_id, self.box or SecretBox.of_home())

    def store_log(self, chunk: LogChunk) -> int:
        """Append ``chunk`` in order (:func:`~spothop.state.worker_logs.append_chunk`); the
        attempt's stored end after it. ValueError for data that is not base64 of a chunk."""
        from spothop.state.worker_logs import append_chunk

        raw = chunk.raw()
        with self.engine.begin() as conn:
            return append_chunk(
                conn,
                job_id=chunk.job_id,
                attempt_id=chunk.attempt_id,
                offset_bytes=chunk.offset_bytes,
                raw=raw,
                node=chunk.node,
                instance_id=chunk.instance_id,
            )

    def flush(self, timeout_s: float) -> int:
        del timeout_s
        return 0  # nothing is ever spooled: every call reaches the store or raises

    def close(self) -> None:
        """Nothing to close: the engine is shared per URL within the process."""


def registration_row(registration: Registration) -> dict[str, Any]:
    """The ``agent_heartbeats`` row a registration writes (state ``registered``)."""
    return {
        "instance_id": registration.instance_id,
        "worker_id": registration.worker_id,
        "job_id": registration.job_id,
        "provider": registration.provider,
        "time_unix_s": registration.time_unix_s,
        "state": "registered",
        "worker_pid": None,
        "worker_restarts": 0,
        "worker_heartbeat_unix_s": None,
        "notice_blind": registration.notice_blind,
        "private_address": registration.private_address,
    }


def _live_attempt(conn: Connection, instance_id: str) -> Any:
    """The newest attempt ``instance_id`` runs (by its instance id, or by its launch token: what
    an agent is known by before the launch returned), or None."""
    from sqlalchemy import or_, select

    from spothop.state.job_tables import job_attempts as t

    return (
        conn.execute(
            select(t)
            .where(or_(t.c.instance_id == instance_id, t.c.launch_token == instance_id))
            .order_by(t.c.launched_unix_s.desc())
            .limit(1)
        )
        .mappings()
        .first()
    )


def attempt_secrets(conn: Connection, instance_id: str, box: SecretBox) -> dict[str, str]:
    """The secrets of the job whose live attempt ``instance_id`` runs, opened with ``box``;
    empty when it runs none (an ended attempt's instance gets nothing)."""
    from spothop.state.sealed import open_secrets

    mine = _live_attempt(conn, instance_id)
    if mine is None or mine["ended_unix_s"] is not None:
        return {}
    return open_secrets(conn, str(mine["job_id"]), box)


def group_rendezvous(conn: Connection, instance_id: str) -> Rendezvous | None:
    """The rendezvous of the grouped attempt ``instance_id`` runs (by its instance id, or by its
    launch token: what an agent is known by before the launch returned), or None while there is
    none to give.

    The attempt's generation must be its job's newest, and the attempt live. A generation meets
    only among nodes that are there (docs/multinode.md, "The rendezvous"): each node is its
    newest attempt of the generation (a node replaced within its generation is its successor),
    and it takes its place once its agent registered an address, while the attempt is live and
    its agent has not said it is leaving (:func:`_leaving`); a node whose worker already
    finished (its attempt ended ``succeeded``, or its agent exited 0) keeps its place, so its
    peers are not stranded. A node that registered and was then lost (preempted, its agent
    lost, stopped) is never handed to its peers: the controller breaks the generation and the
    next one meets. The port is the generation's (:func:`~spothop.wire.group.group_port`).
    """
    from sqlalchemy import func, select

    from spothop.state.agent_tables import agent_heartbeats as beats
    from spothop.state.job_tables import job_attempts as t

    mine = _live_attempt(conn, instance_id)
    if mine is None or mine["group_nnodes"] is None or mine["ended_unix_s"] is not None:
        return None
    job_id, generation = mine["job_id"], int(mine["generation"])
    newest = conn.execute(select(func.max(t.c.generation)).where(t.c.job_id == job_id)).scalar_one()
    if newest != generation:
        return None
    rows = conn.execute(
        select(
            t.c.node,
            t.c.instance_id,
            t.c.state,
            t.c.ended_unix_s,
            t.c.end_reason,
            beats.c.private_address,
            beats.c.state.label("agent_state"),
        )
        .select_from(t.outerjoin(beats, beats.c.instance_id == t.c.instance_id))
        .where(t.c.job_id == job_id, t.c.generation == generation)
        .order_by(t.c.node, t.c.launched_unix_s, t.c.attempt_id)
    ).all()
    current = {int(r.node): r for r in rows}  # the newest attempt of each node
    nnodes = int(mine["group_nnodes"])
    if sorted(current) != list(range(nnodes)) or not all(
        r.private_address for r in current.values()
    ):
        return None
    going = _going(conn, [str(r.instance_id) for r in current.values()])
    for r in current.values():
        finished = (
            r.end_reason == "succeeded"
            or r.agent_state == "done"
            or going.get(str(r.instance_id)) == 0
        )
        if not finished and (r.ended_unix_s is not None or _leaving(r, going)):
            return None
    addresses = tuple(str(current[n].private_address) for n in range(nnodes))
    return Rendezvous(
        master_addr=addresses[0],
        master_port=group_port(job_id, generation),
        node_rank=int(mine["node"]),
        nnodes=nnodes,
        nproc_per_node=int(mine["group_nproc_per_node"] or 1),
        generation=generation,
        node_addrs=addresses,
    )


# The agent events that say its node is going: a notice (the controller breaks the generation on
# an advance notice too), an interruption, its own exit.
_GOING_EVENTS = ("advance_notice", "final_notice", "interruption", "exited")
# An agent's heartbeat states that say it is going: a stop or a notice acted on, a failed worker.
_LEAVING_STATES = frozenset({"preempting", "preempted", "failed"})


def _leaving(row: Any, going: dict[str, int | None]) -> bool:
    """Whether a live attempt's node is on its way out, by what its agent and the controller
    recorded before the controller ended it: its agent exited or got a notice, or it was asked
    to stop (``going``); its beat says it is going; or its instance is noticed."""
    return (
        str(row.instance_id) in going
        or (row.agent_state or "") in _LEAVING_STATES
        or row.state == "noticed"
    )


def _going(conn: Connection, instance_ids: Sequence[str]) -> dict[str, int | None]:
    """Instance id → its agent's exit code (None where it did not exit), for each of
    ``instance_ids`` on its way out: asked to stop (the controller's ``agent_requests``), or
    whose agent got a notice, was interrupted or exited (its ``agent_events``)."""
    from sqlalchemy import select

    from spothop.state.agent_tables import agent_events as e
    from spothop.state.agent_tables import agent_requests as asked

    found: dict[str, int | None] = {}
    stops = select(asked.c.instance_id).where(
        asked.c.instance_id.in_(list(instance_ids)), asked.c.kind == "stop"
    )
    for (stopped,) in conn.execute(stops):
        found[str(stopped)] = None
    rows = conn.execute(
        select(e.c.instance_id, e.c.kind, e.c.payload).where(
            e.c.instance_id.in_(list(instance_ids)), e.c.kind.in_(_GOING_EVENTS)
        )
    ).all()
    for r in rows:
        code: int | None = None
        if r.kind == "exited":
            try:
                code = int(json.loads(r.payload).get("code"))
            except (ValueError, TypeError, AttributeError):
                code = None
        if r.kind == "exited" or str(r.instance_id) not in found:
            found[str(r.instance_id)] = code
    return found


def upsert_heartbeat(conn: Connection, row: dict[str, Any]) -> None:
    """The instance's one ``agent_heartbeats`` row, inserted or replaced, in the caller's transaction
    (the server runs it in the transaction that read the agent's token: one per heartbeat)."""
    upsert_heartbeats(conn, [row])


def upsert_heartbeats(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Each instance's one ``agent_heartbeats`` row, inserted or replaced, in the caller's
    transaction; ``rows`` all have the same columns (one statement, the rows as its parameters)."""
    if rows:
        conn.execute(_upsert_statement(conn.dialect.name, tuple(sorted(rows[0]))), list(rows))


@functools.cache
def _upsert_statement(dialect: str, columns: tuple[str, ...]) -> Any:
    """The upsert of those columns, built once per dialect and column set (500 beats a second
    should not build a statement each): the values come as parameters."""
    from spothop.db import dialect_insert
    from spothop.state.agent_tables import agent_heartbeats

    insert = dialect_insert(dialect)(agent_heartbeats)
    return insert.on_conflict_do_update(
        index_elements=["instance_id"],
        set_={c: insert.excluded[c] for c in columns if c != "instance_id"},
    )


@functools.cache
def _events_statement(dialect: str) -> Any:
    """The events' insert, built once per dialect: a resent event id is skipped, the new ids
    returned (rows sent as its parameters, executemany: insertmanyvalues batches them)."""
    from spothop.db import dialect_insert
    from spothop.state.agent_tables import agent_events

    return (
        dialect_insert(dialect)(agent_events)
        .on_conflict_do_nothing(index_elements=["event_id"])
        .returning(agent_events.c.event_id)
    )


def _one_statement(engine: Engine) -> AbstractContextManager[Connection]:
    """A connection for one statement that is atomic by itself. On PostgreSQL it runs in
    autocommit: one round trip, not three (BEGIN, the statement, COMMIT), which cost the server
    about a quarter of an event batch's CPU. On SQLite a transaction, as every write there: its
    ``BEGIN IMMEDIATE`` (:func:`spothop.db.make_engine`) is how writers of the file queue."""
    if engine.dialect.name == "postgresql":
        return engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    return engine.begin()


def _wake_controller() -> None:
    """Poke the home's controller (:mod:`spothop.state.wake`): best effort, never raises."""
    try:
        from spothop.state.wake import poke

        poke()
    except Exception:  # a controller that cannot be woken runs its periodic pass instead
        pass


def _record_interruption(history: InterruptionStore, event: Interruption) -> None:
    """The one call into the market store's preemption history."""
    from spothop.market.interruptions import Interruption as Preemption
    from spothop.resources.market_id import MarketId

    market = MarketId(event.provider, event.region, event.zone, event.instance_type)
    history.record_interruption(
        Preemption(
            market,
            event.cause,
            event.lead_time_s,
            event.notice_time_unix_s,
            cause=f"{event.protocol}:{event.cause}",
            instance_id=event.instance_id,
        )
    )
