"""The job store's controller leases: which controller runs which job (``docs/controller.md``, "Replicas").

Part of :class:`~spothop.jobs.store.JobStore`. A lease is the jobs row's
``lease_owner``, ``lease_token`` and ``lease_expires_unix_s``, claimed through
:mod:`spothop.state.leases` (``FOR UPDATE SKIP LOCKED`` on PostgreSQL):

- :meth:`ControllerLeases.claim_jobs` leases the jobs that need a controller
  (``_NEEDS_CONTROLLER``: live ones, and finished ones with a live attempt) and
  that no other controller holds, each with a new token;
- :meth:`ControllerLeases.renew_jobs` extends leases that still hold (same
  token) and releases those of jobs that need no controller any more;
- :meth:`ControllerLeases.expire_jobs`, :meth:`ControllerLeases.release_job`
  give leases up; :meth:`ControllerLeases.lease_census` counts the others'.

A write fenced by a lease (the package's contract, 4) checks it with
``StoreBase._fence``; each change of a lease adds one to the row's ``version``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from sqlalchemy import func, select, tuple_, update

from spothop.jobs.lifecycle import AttemptState, JobState
from spothop.jobs.records import JobLease, LeaseCensus
from spothop.jobs.store.base import StoreBase, _leases
from spothop.state.job_tables import job_attempts, jobs

# The jobs a controller must run: live ones, and finished ones whose instance is still to end.
_NEEDS_CONTROLLER = jobs.c.state.in_([s.value for s in JobState if not s.final]) | (
    select(job_attempts.c.job_id)
    .where(
        job_attempts.c.job_id == jobs.c.job_id,
        job_attempts.c.state != AttemptState.ENDED.value,
    )
    .exists()
)


class ControllerLeases(StoreBase):
    """Controller leases on jobs (see the module)."""

    def claim_jobs(
        self,
        owner: str,
        lease_s: float,
        *,
        limit: int = 1000,
        exclude: Collection[str] = (),
    ) -> list[JobLease]:
        """Lease up to ``limit`` jobs no other controller holds (free or expired), oldest first.

        The jobs a controller runs: every live job, and a finished one that
        still has a live attempt (its instance must still be ended). On
        PostgreSQL, jobs another claimer is taking are skipped, not waited on.
        A job already leased by ``owner`` is granted again (a new token: a
        restarted controller of the same name takes its jobs back at once)
        unless ``exclude`` names it; :meth:`renew_jobs` extends leases without
        changing their tokens.
        """
        now = self._clock()
        expires = now + lease_s
        free = (
            jobs.c.lease_owner.is_(None)
            | (jobs.c.lease_expires_unix_s <= now)
            | (jobs.c.lease_owner == owner)
        )
        where = _NEEDS_CONTROLLER & free
        if exclude:
            where = where & jobs.c.job_id.not_in(list(exclude))
        with self._engine.begin() as conn:
            rows = _leases.lock(
                conn,
                [jobs.c.job_id],
                where=where,
                order_by=[jobs.c.created_unix_s, jobs.c.job_id],
                limit=limit,
            )
            tokens = _leases.grant(
                conn, rows, expires, {"lease_owner": owner, "version": jobs.c.version + 1}
            )
        return [
            JobLease(r.job_id, token, owner, expires) for r, token in zip(rows, tokens, strict=True)
        ]

    def renew_jobs(
        self, leases: Iterable[JobLease], lease_s: float
    ) -> tuple[list[JobLease], list[str]]:
        """Extend each lease that still holds to now + ``lease_s`` (same token): (renewed, finished).

        A job that needs no controller any more (final, no live attempt) is
        released instead and listed as finished. A lease in neither list is
        lost (it expired, or another controller claimed the job): its holder
        must drop the job.
        """
        now = self._clock()
        expires = now + lease_s
        by_id = {lease.job_id: lease for lease in leases}
        if not by_id:
            return [], []
        held = (
            tuple_(jobs.c.job_id, jobs.c.lease_token).in_(
                [(lease.job_id, lease.token) for lease in by_id.values()]
            )
            & jobs.c.lease_owner.is_not(None)
            & (jobs.c.lease_expires_unix_s > now)
        )
        with self._engine.begin() as conn:  # two statements, whatever the number of jobs
            kept = conn.execute(
                update(jobs)
                .where(held & _NEEDS_CONTROLLER)
                .values(lease_expires_unix_s=expires)
                .returning(jobs.c.job_id)
            ).scalars()
            renewed_ids = set(kept)
            rest = [(j, lease.token) for j, lease in by_id.items() if j not in renewed_ids]
            finished: list[str] = []
            if rest:
                finished = sorted(
                    conn.execute(
                        update(jobs)
                        .where(
                            tuple_(jobs.c.job_id, jobs.c.lease_token).in_(rest)
                            & jobs.c.lease_owner.is_not(None)
                            & (jobs.c.lease_expires_unix_s > now)
                        )
                        .values(
                            lease_owner=None,
                            lease_expires_unix_s=None,
                            version=jobs.c.version + 1,
                        )
                        .returning(jobs.c.job_id)
                    ).scalars()
                )
        renewed = [
            JobLease(j, by_id[j].token, by_id[j].owner, expires) for j in sorted(renewed_ids)
        ]
        return renewed, finished

    def expire_jobs(self, leases: Iterable[JobLease]) -> int:
        """End each lease that still holds now (a clean stop); how many ended.

        A job that still needs a controller keeps its holder's name with an
        expiry of now, so the others claim it at once and share it out as a dead
        holder's (:meth:`lease_census`); one that needs none any more (final, no
        live attempt) is released outright, as :meth:`renew_jobs` does.
        """
        now = self._clock()
        pairs = [(lease.job_id, lease.token) for lease in leases]
        if not pairs:
            return 0
        held = (
            tuple_(jobs.c.job_id, jobs.c.lease_token).in_(pairs)
            & jobs.c.lease_owner.is_not(None)
            & (jobs.c.lease_expires_unix_s > now)
        )
        with self._engine.begin() as conn:
            done = conn.execute(
                update(jobs)
                .where(held & ~_NEEDS_CONTROLLER)
                .values(lease_owner=None, lease_expires_unix_s=None, version=jobs.c.version + 1)
            )
            live = conn.execute(
                update(jobs).where(held & _NEEDS_CONTROLLER).values(lease_expires_unix_s=now)
            )
        return int(done.rowcount) + int(live.rowcount)

    def lease_census(self, owner: str) -> LeaseCensus:
        """Other holders' leases as ``owner`` sees them (:class:`LeaseCensus`).

        What a replica's fair share of a dead (or stopped) replica's jobs is computed from,
        and when it has to look again to take a lapsing lease at once.
        """
        now = self._clock()
        others = _NEEDS_CONTROLLER & jobs.c.lease_owner.is_not(None) & (jobs.c.lease_owner != owner)
        with self._engine.connect() as conn:
            lapsed = conn.execute(
                select(func.count()).where(others & (jobs.c.lease_expires_unix_s <= now))
            ).scalar_one()
            holders, next_lapse = conn.execute(
                select(
                    func.count(func.distinct(jobs.c.lease_owner)),
                    func.min(jobs.c.lease_expires_unix_s),
                ).where(others & (jobs.c.lease_expires_unix_s > now))
            ).one()
        return LeaseCensus(
            int(lapsed), int(holders), None if next_lapse is None else float(next_lapse)
        )

    def release_job(self, lease: JobLease) -> bool:
        """Give a lease up (False: it no longer held anyway)."""
        with self._engine.begin() as conn:
            result = _leases.fenced_update(
                conn,
                (lease.job_id,),
                lease.token,
                self._clock(),
                {"lease_owner": None, "lease_expires_unix_s": None, "version": jobs.c.version + 1},
            )
        return bool(result.rowcount)
