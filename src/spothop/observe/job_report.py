"""A job's report read from the store: the job found (or the nearest ids named), its ledger
brought up to date, its event stream, its agents' beats, its catalog and bill sources, its
published outputs and its restores, handed to :func:`spothop.observe.report.build_report`."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping, Sequence

from spothop.checkpoint.replicas import RestoreRecord, read_restore_records
from spothop.errors import NotFoundError, SpothopError
from spothop.jobs.errors import JobNotFound
from spothop.jobs.records import JobRecord
from spothop.jobs.store import JobStore
from spothop.observe.events import EventStream
from spothop.observe.ledger import Ledger
from spothop.observe.reconcile import bill_sources
from spothop.observe.report import BATCH, REPORT_KINDS, JobReport, build_report
from spothop.observe.work import read_beats
from spothop.providers.base import Provider
from spothop.resources.offering import Offering

log = logging.getLogger("spothop.observe")


class UnknownJob(JobNotFound):
    """No job with that id: a :class:`JobNotFound` whose message lists the nearest ids (exit 3)."""

    def __init__(self, job_id: str, nearest: Sequence[str]) -> None:
        self.job_id = job_id
        self.nearest = tuple(nearest)
        hint = (
            f"; the nearest: {', '.join(self.nearest)}"
            if self.nearest
            else "; `spothop jobs` lists them"
        )
        NotFoundError.__init__(self, f"no job {job_id!r} in the store{hint}")


NEAREST_IDS = 5


def find_job(store: JobStore, job_id: str) -> JobRecord:
    """The job, or :class:`UnknownJob` naming the ids nearest ``job_id``."""
    try:
        return store.get_job(job_id)
    except JobNotFound:
        ids = [j.job_id for j in store.list_jobs()]
        near = difflib.get_close_matches(job_id, ids, n=NEAREST_IDS, cutoff=0.3)
        near += [i for i in ids if job_id and job_id in i and i not in near]
        raise UnknownJob(job_id, near[:NEAREST_IDS]) from None


def offerings_by_place(
    providers: Mapping[str, Provider],
) -> dict[tuple[str, str, str], Offering]:
    """Every provider's offerings by (provider, zone or region, instance type)."""
    out: dict[tuple[str, str, str], Offering] = {}
    for name, provider in providers.items():
        try:
            offerings = provider.list_offerings()
        except SpothopError:
            continue  # a provider that cannot list its catalog leaves its on-demand prices missing
        for o in offerings:
            out[(name, o.zone or o.region, o.instance_type)] = o
            out.setdefault((name, o.region, o.instance_type), o)
    return out


def job_report(store: JobStore, job_id: str, providers: Mapping[str, Provider]) -> JobReport:
    """``job_id``'s report: its ledger brought up to date with ``providers``, its event stream, its
    agents' heartbeats, their catalogs and bill sources. :class:`UnknownJob` if there is no such
    job."""
    job = find_job(store, job_id)
    attempts = store.attempts(job_id)  # read once: the ledger, the stream and the report share it
    records = Ledger(store, providers).update(job_id, attempts)
    events, _ = EventStream(store).read(job_id, kinds=REPORT_KINDS, attempts=attempts)
    return build_report(
        job,
        records,
        attempts,
        events,
        offerings_by_place(providers),
        job_restores(job),
        published_outputs(job),
        beats=read_beats(store, {a.instance_id for a in attempts if a.instance_id}),
        sources=bill_sources(providers),
        capabilities={name: p.capabilities for name, p in providers.items()},
    )


def published_outputs(job: JobRecord) -> int | None:
    """How many shard outputs ``job``'s output location holds; None for a job that is not a
    batch job, or whose location cannot be read now (the report is not refused for it)."""
    if job.kind != BATCH:
        return None
    try:
        import fsspec

        from spothop.queue.outputs import TEMP_DIR

        batch = job.spec().batch
        if batch is None:
            return None
        # Listed, not opened as an OutputStore: that makes the folder, and a report writes nothing.
        fs, root = fsspec.core.url_to_fs(str(batch.output))
        if not fs.exists(root):
            return 0
        names = (str(p).rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False))
        return sum(1 for n in names if n != TEMP_DIR)
    except Exception as exc:  # any store's failure (no credentials, no network): the report stands
        log.warning("outputs of %s not counted: %s", job.job_id, exc)
        return None


def job_restores(job: JobRecord) -> list[RestoreRecord]:
    """The restore records in ``job``'s checkpoint location; none when it has no checkpoint
    section, or the location cannot be read now (the report is not refused for it)."""
    try:
        checkpoint = job.spec().checkpoint
    except (SpothopError, ValueError):
        return []
    if checkpoint is None:
        return []
    try:
        return read_restore_records(checkpoint.url)
    except Exception as exc:  # any store's failure (no credentials, no network): the report stands
        log.warning("restore records of %s not read from %s: %s", job.job_id, checkpoint.url, exc)
        return []
