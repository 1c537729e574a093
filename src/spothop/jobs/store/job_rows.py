"""The job store's ``jobs`` and ``job_nodes`` rows: create, read and list jobs; change a job or a node.

Part of :class:`~spothop.jobs.store.JobStore` (the package's docstring holds the contract):

- :meth:`JobRows.create_job` draws a free id (``j-`` + 6 hex digits, drawn again
  on a collision, ``_ID_DRAWS`` times at most) and writes the job ``pending``,
  its nodes ``pending`` and event ``created`` in one transaction.
- :meth:`JobRows.transition` and :meth:`JobRows.update_job` write the row and its
  event in one transaction (:meth:`JobRows._write_job`): checked against the
  state read in that transaction, and conditional on the row's version or the
  job's lease (:class:`~spothop.jobs.errors.JobChanged`,
  :class:`~spothop.jobs.errors.JobLeaseLost`); the row's ``version`` goes up by
  one at every write.
- :meth:`JobRows.set_node_state` sets one node's state with its event, fenced.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, insert, select, update
from sqlalchemy.exc import IntegrityError

from spothop.errors import SpothopError
from spothop.jobs.errors import JobChanged, JobNotFound
from spothop.jobs.lifecycle import JobState, NodeState, check_transition
from spothop.jobs.records import JobLease, JobRecord, NodeRecord, StorableSpec, node_count
from spothop.jobs.store.base import _ID_DRAWS, StoreBase, _leases
from spothop.state.job_tables import job_nodes, jobs
from spothop.state.sealed import SecretBox, store_secrets

JOB_ID_PREFIX = "j-"
JOB_ID_HEX = 6  # 16.7 million ids: a collision is rare, and drawn again


class JobRows(StoreBase):
    """Jobs and their nodes (see the module)."""

    def create_job(
        self,
        spec: StorableSpec,
        *,
        nodes: int | None = None,
        code_sha256: str | None = None,
        mounts_json: str | None = None,
        secret_values: Mapping[str, str] | None = None,
        box: SecretBox | None = None,
    ) -> str:
        """Store a new job (PENDING, its nodes pending, event ``created``); returns its id (``j-3f9a2c``).

        ``nodes`` defaults to :func:`node_count` of the spec; ``code_sha256`` is
        its packed workdir's (:mod:`spothop.controlplane.archives`), the only
        archive its agents' tokens may fetch, with those ``mounts_json`` names
        (its ``file_mounts`` as planned: :mod:`spothop.controlplane.mounts`).
        ``secret_values`` (the spec's :attr:`~spothop.jobs.spec.JobSpec.secret_values`) are stored
        sealed with ``box`` (default: this home's key; :mod:`spothop.state.sealed`), in the
        job's own transaction: its agents never ask before they are there.
        """
        count = node_count(spec) if nodes is None else nodes
        if count < 1:
            raise ValueError(f"a job needs at least one node, got {count}")
        spec_json = spec.to_json()
        kind = str(getattr(spec, "kind", "task"))
        for _ in range(_ID_DRAWS):
            job_id = JOB_ID_PREFIX + secrets.token_hex(JOB_ID_HEX // 2)
            now = self._clock()
            try:
                with self._engine.begin() as conn:
                    if conn.execute(select(jobs.c.job_id).where(jobs.c.job_id == job_id)).first():
                        continue
                    conn.execute(
                        insert(jobs).values(
                            job_id=job_id,
                            name=spec.name,
                            kind=kind,
                            spec_json=spec_json,
                            state=JobState.PENDING.value,
                            created_unix_s=now,
                            updated_unix_s=now,
                            interruptions=0,
                            retries_used=0,
                            on_demand_forced=False,
                            reason="",
                            version=1,
                            lease_token=0,
                            code_sha256=code_sha256,
                            mounts_json=mounts_json,
                        )
                    )
                    conn.execute(
                        insert(job_nodes),
                        [
                            {
                                "job_id": job_id,
                                "node": n,
                                "state": NodeState.PENDING.value,
                                "updated_unix_s": now,
                            }
                            for n in range(count)
                        ],
                    )
                    if secret_values:
                        store_secrets(conn, job_id, secret_values, box or SecretBox.of_home())
                    self._event(conn, job_id, now, "created", {"name": spec.name, "nodes": count})
                return job_id
            except IntegrityError:
                continue  # another process drew the same id between the check and the insert
        raise SpothopError(f"no free job id after {_ID_DRAWS} draws")

    def get_job(self, job_id: str) -> JobRecord:
        """The job with its nodes; :class:`JobNotFound` if there is none."""
        with self._engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.job_id == job_id)).first()
            if row is None:
                raise JobNotFound(job_id)
            node_rows = conn.execute(
                select(job_nodes).where(job_nodes.c.job_id == job_id).order_by(job_nodes.c.node)
            ).all()
        return _job(row, node_rows)

    def list_jobs(
        self, states: Iterable[JobState] | None = None, *, limit: int | None = None
    ) -> list[JobRecord]:
        """Jobs (with their nodes), oldest first; only those in ``states`` if given."""
        query = select(jobs).order_by(jobs.c.created_unix_s, jobs.c.job_id)
        if states is not None:
            query = query.where(jobs.c.state.in_([JobState(s).value for s in states]))
        if limit is not None:
            query = query.limit(limit)
        with self._engine.connect() as conn:
            rows = conn.execute(query).all()
            ids = [r.job_id for r in rows]
            by_job: dict[str, list[Row[Any]]] = {i: [] for i in ids}
            if ids:
                for n in conn.execute(
                    select(job_nodes)
                    .where(job_nodes.c.job_id.in_(ids))
                    .order_by(job_nodes.c.job_id, job_nodes.c.node)
                ):
                    by_job[n.job_id].append(n)
        return [_job(r, by_job[r.job_id]) for r in rows]

    def transition(
        self,
        job_id: str,
        to: JobState,
        event_kind: str,
        data: Mapping[str, Any] | None = None,
        *,
        reason: str | None = None,
        add_interruptions: int = 0,
        add_retries: int = 0,
        on_demand_forced: bool | None = None,
        expected_version: int | None = None,
        lease: JobLease | None = None,
    ) -> JobRecord:
        """Move the job to ``to`` and record event ``event_kind`` (``data``) in one transaction.

        Refused (nothing changes) with :class:`IllegalTransition` if the job's
        state, read in this transaction, may not move to ``to``; with
        :class:`JobChanged` / :class:`JobLeaseLost` under ``expected_version`` /
        ``lease`` (module contract, 4). ``reason`` replaces the job's reason;
        the counters change with it. Returns the job as written.
        """
        target = JobState(to)
        change = _JobChange(target, reason, add_interruptions, add_retries, on_demand_forced)
        return self._write_job(job_id, event_kind, data, change, expected_version, lease)

    def update_job(
        self,
        job_id: str,
        event_kind: str,
        data: Mapping[str, Any] | None = None,
        *,
        reason: str | None = None,
        add_interruptions: int = 0,
        add_retries: int = 0,
        on_demand_forced: bool | None = None,
        expected_version: int | None = None,
        lease: JobLease | None = None,
    ) -> JobRecord:
        """Change a job's counters or reason without a state change, with its event; like :meth:`transition`."""
        change = _JobChange(None, reason, add_interruptions, add_retries, on_demand_forced)
        return self._write_job(job_id, event_kind, data, change, expected_version, lease)

    def set_node_state(
        self,
        job_id: str,
        node: int,
        state: NodeState,
        event_kind: str,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """Set one node's state and record the event, in one transaction (:class:`JobNotFound` if no such node)."""
        with self._engine.begin() as conn:
            now = self._clock()
            self._fence(conn, job_id, now)
            result = conn.execute(
                update(job_nodes)
                .where(job_nodes.c.job_id == job_id, job_nodes.c.node == node)
                .values(state=NodeState(state).value, updated_unix_s=now)
            )
            if result.rowcount == 0:
                raise self._no_node(conn, job_id, node)
            self._event(conn, job_id, now, event_kind, {"node": node, **(data or {})})

    def _write_job(
        self,
        job_id: str,
        event_kind: str,
        data: Mapping[str, Any] | None,
        change: _JobChange,
        expected_version: int | None,
        lease: JobLease | None,
    ) -> JobRecord:
        if lease is None and self._holder is not None:
            lease = self._held(job_id)
        with self._engine.begin() as conn:
            row = conn.execute(
                select(jobs).where(jobs.c.job_id == job_id).with_for_update()
            ).first()
            if row is None:
                raise JobNotFound(job_id)
            if expected_version is not None and row.version != expected_version:
                raise JobChanged(job_id, expected_version, row.version)
            current = JobState(row.state)
            if change.target is not None:
                check_transition(current, change.target, f"job {job_id}")
            now = self._clock()
            values = change.values(row, now)
            # Conditional on what was read: the lease if given, else the version (no write in between).
            if lease is not None:
                result = _leases.fenced_update(conn, (job_id,), lease.token, now, values)
                if result.rowcount == 0:
                    raise self._lost(job_id, lease.token)
            else:
                result = conn.execute(
                    update(jobs)
                    .where(jobs.c.job_id == job_id, jobs.c.version == row.version)
                    .values(values)
                )
                if result.rowcount == 0:
                    found = conn.execute(
                        select(jobs.c.version).where(jobs.c.job_id == job_id)
                    ).scalar_one()
                    raise JobChanged(job_id, row.version, found)
            self._event(conn, job_id, now, event_kind, change.event(current, data))
            written = conn.execute(select(jobs).where(jobs.c.job_id == job_id)).one()
            node_rows = conn.execute(
                select(job_nodes).where(job_nodes.c.job_id == job_id).order_by(job_nodes.c.node)
            ).all()
        return _job(written, node_rows)


@dataclass(frozen=True)
class _JobChange:
    """What one write of a jobs row changes: its state (None: stays), reason and counters."""

    target: JobState | None
    reason: str | None
    add_interruptions: int
    add_retries: int
    on_demand_forced: bool | None

    def values(self, row: Row[Any], now: float) -> dict[str, Any]:
        values: dict[str, Any] = {"updated_unix_s": now, "version": row.version + 1}
        if self.target is not None:
            values["state"] = self.target.value
        if self.reason is not None:
            values["reason"] = self.reason
        if self.add_interruptions:
            values["interruptions"] = row.interruptions + self.add_interruptions
        if self.add_retries:
            values["retries_used"] = row.retries_used + self.add_retries
        if self.on_demand_forced is not None:
            values["on_demand_forced"] = self.on_demand_forced
        return values

    def event(self, current: JobState, data: Mapping[str, Any] | None) -> dict[str, Any]:
        event = dict(data or {})
        if self.target is not None:
            event.setdefault("from", current.value)
            event.setdefault("to", self.target.value)
        if self.reason is not None:
            event.setdefault("reason", self.reason)
        return event


def _job(row: Row[Any], node_rows: Sequence[Row[Any]]) -> JobRecord:
    return JobRecord(
        job_id=row.job_id,
        name=row.name,
        kind=row.kind,
        spec_json=row.spec_json,
        state=JobState(row.state),
        created_unix_s=row.created_unix_s,
        updated_unix_s=row.updated_unix_s,
        interruptions=row.interruptions,
        retries_used=row.retries_used,
        on_demand_forced=bool(row.on_demand_forced),
        reason=row.reason,
        version=row.version,
        lease_owner=row.lease_owner,
        code_sha256=row.code_sha256,
        mounts_json=row.mounts_json,
        nodes=tuple(
            NodeRecord(n.job_id, n.node, NodeState(n.state), n.updated_unix_s) for n in node_rows
        ),
    )
