"""The job store's instance attempts: one ``job_attempts`` row per instance launched for a node.

Part of :class:`~spothop.jobs.store.JobStore`:

- :meth:`AttemptRows.add_attempt` stores the attempt (state ``launching``, id
  ``a-`` + 8 hex digits, a unique launch token) and its event *before* the
  provider's launch call (the package's contract, 3).
- :meth:`AttemptRows.update_attempt` sets the fields of :data:`ATTEMPT_FIELDS`
  with their event in one transaction; a state change is checked against
  :data:`~spothop.jobs.lifecycle.ATTEMPT_TRANSITIONS` read in that transaction
  and stamps its time column (``_STAMP``) unless given.
- :meth:`AttemptRows.attempts`, :meth:`AttemptRows.attempt` and
  :meth:`AttemptRows.attempt_by_token` read them.

Every write is fenced by the job's lease on a fenced view.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Row, func, insert, select, update

from spothop.errors import SpothopError
from spothop.jobs.errors import AttemptNotFound
from spothop.jobs.lifecycle import AttemptState, EndReason, check_attempt_transition
from spothop.jobs.records import AttemptRecord
from spothop.jobs.store.base import _ID_DRAWS, StoreBase, _jsonable
from spothop.state.job_tables import job_attempts, job_nodes

ATTEMPT_ID_PREFIX = "a-"
ATTEMPT_ID_HEX = 8

# The attempt columns update_attempt may set (the rest are fixed at add_attempt).
ATTEMPT_FIELDS = frozenset(
    {
        "instance_id",
        "state",
        "running_unix_s",
        "noticed_unix_s",
        "notice_final",
        "ended_unix_s",
        "end_reason",
        "error_code",
        "error_message",
        "exit_code",
        "zone",
        "region",
    }
)
# The time column an attempt state stamps (with the clock) unless the caller gives it.
_STAMP = {
    AttemptState.RUNNING: "running_unix_s",
    AttemptState.NOTICED: "noticed_unix_s",
    AttemptState.ENDED: "ended_unix_s",
}


class AttemptRows(StoreBase):
    """Instance attempts (see the module)."""

    def add_attempt(
        self,
        job_id: str,
        node: int,
        *,
        provider: str,
        region: str,
        zone: str,
        instance_type: str,
        market_kind: str,
        price_usd_per_hour: float,
        launch_token: str | None = None,
        data: Mapping[str, Any] | None = None,
        launched_unix_s: float | None = None,
        generation: int = 0,
        group_nnodes: int | None = None,
        group_nproc_per_node: int | None = None,
    ) -> AttemptRecord:
        """Store a new attempt (state ``launching``) BEFORE the launch call, with event ``attempt_launching``.

        ``launched_unix_s`` (default: the store's clock) is the launch time on
        the provider's clock, which the controller keeps every attempt time in.

        ``launch_token`` (default: 16 random hex digits) goes into the
        instance's tags; it is unique. ``generation``, ``group_nnodes`` and
        ``group_nproc_per_node``: a grouped task's group generation, its node count and
        processes per node (docs/multinode.md). :class:`JobNotFound` if the job has no
        such node.
        """
        token = launch_token or secrets.token_hex(8)
        with self._engine.begin() as conn:
            if (
                conn.execute(
                    select(job_nodes.c.node).where(
                        job_nodes.c.job_id == job_id, job_nodes.c.node == node
                    )
                ).first()
                is None
            ):
                raise self._no_node(conn, job_id, node)
            now = self._clock()
            self._fence(conn, job_id, now)
            attempt_id = self._new_attempt_id(conn)
            values = {
                "attempt_id": attempt_id,
                "job_id": job_id,
                "node": node,
                "launch_token": token,
                "provider": provider,
                "region": region,
                "zone": zone,
                "instance_type": instance_type,
                "market_kind": str(market_kind),
                "price_usd_per_hour": float(price_usd_per_hour),
                "state": AttemptState.LAUNCHING.value,
                "launched_unix_s": now if launched_unix_s is None else float(launched_unix_s),
                "generation": int(generation),
                "group_nnodes": None if group_nnodes is None else int(group_nnodes),
                "group_nproc_per_node": (
                    None if group_nproc_per_node is None else int(group_nproc_per_node)
                ),
            }
            conn.execute(insert(job_attempts).values(values))
            self._event(
                conn,
                job_id,
                now,
                "attempt_launching",
                {
                    "attempt_id": attempt_id,
                    "node": node,
                    "launch_token": token,
                    "provider": provider,
                    "region": region,
                    "zone": zone,
                    "instance_type": instance_type,
                    "market_kind": str(market_kind),
                    "price_usd_per_hour": float(price_usd_per_hour),
                    **({"generation": int(generation)} if group_nnodes is not None else {}),
                    **(data or {}),
                },
            )
            row = conn.execute(
                select(job_attempts).where(job_attempts.c.attempt_id == attempt_id)
            ).one()
        return _attempt(row)

    def update_attempt(
        self,
        attempt_id: str,
        *,
        event: str | None = None,
        data: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> AttemptRecord:
        """Set an attempt's ``fields`` (of :data:`ATTEMPT_FIELDS`) and record ``event``, in one transaction.

        A ``state`` change is checked against
        :data:`~spothop.jobs.lifecycle.ATTEMPT_TRANSITIONS` (read in this
        transaction; :class:`IllegalTransition`, nothing changed) and stamps
        its time column (``running_unix_s``, ``noticed_unix_s``,
        ``ended_unix_s``) unless given. The event (default
        ``attempt_<state>`` on a state change, none otherwise) carries the
        attempt id and the fields set, plus ``data``.
        """
        unknown = set(fields) - ATTEMPT_FIELDS
        if unknown:
            raise TypeError(
                f"update_attempt: no settable field {sorted(unknown)} (settable: {sorted(ATTEMPT_FIELDS)})"
            )
        values = dict(fields)
        with self._engine.begin() as conn:
            row = conn.execute(
                select(job_attempts.c.job_id, job_attempts.c.state).where(
                    job_attempts.c.attempt_id == attempt_id
                )
            ).first()
            if row is None:
                raise AttemptNotFound(attempt_id)
            now = self._clock()
            self._fence(conn, row.job_id, now)
            if "state" in values:
                target = AttemptState(values["state"])
                check_attempt_transition(
                    AttemptState(row.state), target, f"attempt {attempt_id} of job {row.job_id}"
                )
                values["state"] = target.value
                stamp = _STAMP.get(target)
                if stamp is not None and values.get(stamp) is None:
                    values[stamp] = now
                event = event or f"attempt_{target.value}"
            if "end_reason" in values and values["end_reason"] is not None:
                values["end_reason"] = EndReason(values["end_reason"]).value
            if values:
                # The state read above must still be the state written over (no lost update on PostgreSQL).
                result = conn.execute(
                    update(job_attempts)
                    .where(
                        job_attempts.c.attempt_id == attempt_id,
                        job_attempts.c.state == row.state,
                    )
                    .values(values)
                )
                if result.rowcount == 0:
                    current = conn.execute(
                        select(job_attempts.c.state).where(job_attempts.c.attempt_id == attempt_id)
                    ).scalar_one()
                    check_attempt_transition(
                        AttemptState(current),
                        AttemptState(values.get("state", current)),
                        f"attempt {attempt_id} of job {row.job_id}",
                    )
                    raise SpothopError(f"attempt {attempt_id}: changed while being written")
            if event:
                self._event(
                    conn,
                    row.job_id,
                    now,
                    event,
                    {"attempt_id": attempt_id, **_jsonable(values), **(data or {})},
                )
            written = conn.execute(
                select(job_attempts).where(job_attempts.c.attempt_id == attempt_id)
            ).one()
        return _attempt(written)

    def attempts(
        self, job_id: str | None = None, *, live_only: bool = False
    ) -> list[AttemptRecord]:
        """A job's attempts (every job's if ``job_id`` is None), in launch order."""
        query = select(job_attempts).order_by(
            job_attempts.c.launched_unix_s, job_attempts.c.attempt_id
        )
        if job_id is not None:
            query = query.where(job_attempts.c.job_id == job_id)
        if live_only:
            query = query.where(job_attempts.c.state != AttemptState.ENDED.value)
        with self._engine.connect() as conn:
            return [_attempt(r) for r in conn.execute(query)]

    def attempt(self, attempt_id: str) -> AttemptRecord:
        """One attempt by id (:class:`AttemptNotFound` if none)."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(job_attempts).where(job_attempts.c.attempt_id == attempt_id)
            ).first()
        if row is None:
            raise AttemptNotFound(attempt_id)
        return _attempt(row)

    def attempt_by_token(self, launch_token: str) -> AttemptRecord | None:
        """The attempt a launch token belongs to (an instance's tag), or None: an orphan's token."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(job_attempts).where(job_attempts.c.launch_token == launch_token)
            ).first()
        return None if row is None else _attempt(row)

    @staticmethod
    def _new_attempt_id(conn: Connection) -> str:
        for _ in range(_ID_DRAWS):
            attempt_id = ATTEMPT_ID_PREFIX + secrets.token_hex(ATTEMPT_ID_HEX // 2)
            taken = conn.execute(
                select(func.count())
                .select_from(job_attempts)
                .where(job_attempts.c.attempt_id == attempt_id)
            ).scalar_one()
            if not taken:
                return attempt_id
        raise SpothopError(f"no free attempt id after {_ID_DRAWS} draws")


def _attempt(row: Row[Any]) -> AttemptRecord:
    values = dict(row._mapping)
    values["state"] = AttemptState(values["state"])
    values["notice_final"] = bool(values.get("notice_final"))
    if values["end_reason"] is not None:
        values["end_reason"] = EndReason(values["end_reason"])
    return AttemptRecord(**values)
