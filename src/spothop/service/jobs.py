"""Jobs as both fronts list them, show them and cancel them: ``jobs``, ``status``, ``cancel``.

:func:`list_jobs` answers ``spothop jobs`` and ``GET /v1/jobs``; :func:`job_status` answers
``spothop status JOB`` and ``GET /v1/jobs/{id}`` (and the instances of ``GET /v1/instances``);
:func:`request_cancel` answers ``spothop cancel JOB`` and ``POST /v1/jobs/{id}/cancel``. Each
returns a frozen type whose ``to_dict()`` is the JSON that ``--json`` prints and the server
answers, key for key.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spothop.jobs.records import AttemptRecord, JobEvent, JobRecord
    from spothop.jobs.store import JobStore

CANCEL_EVENT = "cancel_requested"


# -- jobs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobQuery:
    """Which jobs :func:`list_jobs` lists: those in ``states`` (none: every state), of
    ``job_ids`` when given (the server passes what the caller may see), at most the
    ``newest`` of them."""

    states: tuple[str, ...] = ()
    job_ids: Collection[str] | None = None
    newest: int | None = None


@dataclass(frozen=True)
class JobList:
    """Jobs, oldest first: ``to_dict()`` is ``GET /v1/jobs``' ``{"jobs": …}``, :meth:`to_list`
    what ``spothop jobs --json`` prints (the same list, unwrapped)."""

    jobs: tuple[JobRecord, ...]

    def to_list(self) -> list[dict[str, Any]]:
        return [j.to_dict() for j in self.jobs]

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": self.to_list()}


def list_jobs(store: JobStore, query: JobQuery = JobQuery()) -> JobList:
    """Every job (oldest first) that ``query`` keeps, each the store's own record with its
    interruptions and node states from its attempts (:mod:`spothop.observe.figures`).

    :class:`ValueError` for a state that is not a :class:`~spothop.jobs.lifecycle.JobState`."""
    from spothop.jobs.lifecycle import JobState
    from spothop.observe.figures import with_figures

    wanted = None if not query.states else [JobState(s) for s in query.states]
    found = store.list_jobs(wanted)
    if query.job_ids is not None:
        found = [j for j in found if j.job_id in query.job_ids]
    if query.newest is not None:
        found = found[-query.newest :]
    by_job: dict[str, list[AttemptRecord]] = {j.job_id: [] for j in found}
    for a in store.attempts():
        if a.job_id in by_job:
            by_job[a.job_id].append(a)
    # Interruptions and node states as every surface shows them (observe/figures.py).
    return JobList(tuple(with_figures(j, by_job[j.job_id]) for j in found))


# -- status -----------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceView:
    """One instance of a job (an attempt that got one, or is getting one) as ``status`` lists it."""

    instance_id: str | None
    attempt_id: str
    node: int
    provider: str
    region: str
    zone: str
    instance_type: str
    market: str
    state: str
    end_reason: str | None
    # Why it ended, in words ("its instance is failed: boot script failed: <the console's
    # last line>"); None while it lives.
    end_detail: str | None
    price_usd_per_hour: float
    exit_code: int | None
    # A multi-node task's group generation and its node count (docs/multinode.md).
    generation: int
    group_nnodes: int | None

    @classmethod
    def of(cls, a: AttemptRecord) -> InstanceView:
        return cls(
            instance_id=a.instance_id,
            attempt_id=a.attempt_id,
            node=a.node,
            provider=a.provider,
            region=a.region,
            zone=a.zone,
            instance_type=a.instance_type,
            market=str(a.market_kind),
            state=str(a.state),
            end_reason=None if a.end_reason is None else str(a.end_reason),
            end_detail=(
                a.error_message
                if str(a.end_reason) in ("failed", "agent_lost", "worker_failed")
                else None
            ),
            price_usd_per_hour=a.price_usd_per_hour,
            exit_code=a.exit_code,
            generation=a.generation,
            group_nnodes=a.group_nnodes,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# A launch refused for good: by the provider, or by the provider in one region.
_REFUSED = ("launch_refused", "region_refused")


@dataclass(frozen=True)
class LaunchFailure:
    """An attempt whose launch the cloud refused, with the cloud's own code and message.

    ``refused``: the error repeats on every launch of that provider (configuration, credentials,
    an invalid request: the attempt ended ``launch_refused``), so the job stopped trying it; the
    message is then the error's whole text, the fix it names included."""

    attempt_id: str
    provider: str
    region: str
    zone: str
    instance_type: str
    error_code: str | None
    error_message: str | None
    refused: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QueueCounts:
    """A batch job's shards by state."""

    pending: int
    leased: int
    done: int
    dead: int

    @property
    def total(self) -> int:
        return self.pending + self.leased + self.done + self.dead

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class JobProgress:
    """``progress`` of ``status``: ``step``, the training step the job's workers last reported
    through their agents' heartbeats (None when no worker reported one); for a batch job whose
    queue answered, ``shards_done`` and ``shards_total``."""

    step: int | None
    shards_done: int | None = None
    shards_total: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step}
        if self.shards_total is not None:
            out["shards_done"] = self.shards_done
            out["shards_total"] = self.shards_total
        return out


@dataclass(frozen=True)
class JobStatus:
    """A job as ``status`` shows it: state, interruptions, instances, launch failures, spend so
    far, shards, progress and (unless left out) its events."""

    job: JobRecord
    interruptions: int
    instances: tuple[InstanceView, ...]
    launch_failures: tuple[LaunchFailure, ...]
    spend_usd: float
    queue: QueueCounts | None
    progress: JobProgress
    events: tuple[JobEvent, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        job = self.job
        out: dict[str, Any] = {
            "job_id": job.job_id,
            "name": job.name,
            "kind": job.kind,
            "state": str(job.state),
            "reason": job.reason,
            "interruptions": self.interruptions,
            "on_demand_forced": job.on_demand_forced,
            "created_unix_s": job.created_unix_s,
            "updated_unix_s": job.updated_unix_s,
            "nodes": [n.to_dict() for n in job.nodes],
            "instances": [i.to_dict() for i in self.instances],
            "launch_failures": [f.to_dict() for f in self.launch_failures],
            "spend_usd": self.spend_usd,
            "queue": None if self.queue is None else self.queue.to_dict(),
            "progress": self.progress.to_dict(),
        }
        names = secret_names(job.spec_json)
        if names:  # each name, its value masked: the store never had it (jobs/spec_secrets.py)
            from spothop.jobs.spec_secrets import masked

            out["secrets"] = masked(names)
        if self.events is not None:
            out["events"] = [e.to_dict() for e in self.events]
        return out


def secret_names(spec_json: str) -> list[str]:
    """The names of a stored spec's secrets (read without validating the whole spec)."""
    try:
        names = json.loads(spec_json).get("secrets") or []
    except (ValueError, AttributeError):
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def job_status(
    store: JobStore, job_id: str, *, events: bool = True, queue_url: str | None = None
) -> JobStatus:
    """A job's status: state, interruptions, instances, events, spend.

    A batch job's shard counts come from ``queue_url`` (the server passes its own queue), else
    from the queue of this home's running controller, else from the store.
    :class:`~spothop.jobs.errors.JobNotFound` for a job that does not exist."""
    from spothop.observe.figures import spend_usd, with_figures

    attempts = store.attempts(job_id)
    # Interruptions and node states as every surface shows them (observe/figures.py).
    job = with_figures(store.get_job(job_id), attempts)
    queue = _queue(job, queue_url)
    return JobStatus(
        job=job,
        interruptions=job.interruptions,
        instances=tuple(
            InstanceView.of(a)
            for a in attempts
            # a launch that failed: in the events, not an instance
            if not (a.instance_id is None and a.end_reason is not None)
        ),
        launch_failures=tuple(
            LaunchFailure(
                a.attempt_id,
                a.provider,
                a.region,
                a.zone,
                a.instance_type,
                a.error_code,
                a.error_message,
                refused=str(a.end_reason) in _REFUSED,
            )
            for a in attempts
            if a.end_reason is not None and str(a.end_reason) in ("launch_failed", *_REFUSED)
        ),
        spend_usd=round(spend_usd(attempts), 6),
        queue=queue,
        progress=_job_progress(store, job.job_id, queue),
        events=tuple(store.events(job_id)) if events else None,
    )


def _job_progress(store: JobStore, job_id: str, queue: QueueCounts | None) -> JobProgress:
    """The newest training step a heartbeat carried, and the shards done of the total."""
    from sqlalchemy import select

    from spothop.state.agent_tables import agent_heartbeats

    t = agent_heartbeats
    with store.engine.connect() as conn:
        row = conn.execute(
            select(t.c.worker_step)
            .where(t.c.job_id == job_id, t.c.worker_step.is_not(None))
            .order_by(t.c.time_unix_s.desc())
            .limit(1)
        ).first()
    step = None if row is None else int(row[0])
    if queue is None:
        return JobProgress(step)
    return JobProgress(step, shards_done=queue.done, shards_total=queue.total)


def _queue(job: JobRecord, url: str | None) -> QueueCounts | None:
    if job.kind != "batch":
        return None
    from spothop.jobs.controller.daemon import status as controller_status
    from spothop.jobs.controller.observe import queue_stats

    if url is None:
        info = controller_status()
        url = None if info is None else _controller_queue(info)
    stats = queue_stats(url, job.job_id)
    if stats is None:
        return None
    return QueueCounts(pending=stats.pending, leased=stats.leased, done=stats.done, dead=stats.dead)


def _controller_queue(info: Any) -> str | None:
    url = info.queue_url or info.store_url
    return None if url is None else str(url)


def instances_of(store: JobStore, job_ids: Collection[str]) -> list[dict[str, Any]]:
    """The instances of ``job_ids`` (``GET /v1/instances``), each ``status``' own with its
    ``job_id`` first; a job that is gone (an agent's) lists none."""
    from spothop.jobs.errors import JobNotFound

    out: list[dict[str, Any]] = []
    for job_id in sorted(job_ids):
        try:
            found = job_status(store, job_id, events=False).instances
        except JobNotFound:  # an agent's job that is gone: nothing to list
            continue
        out.extend({"job_id": job_id, **instance.to_dict()} for instance in found)
    return out


@dataclass(frozen=True)
class JobStorage:
    """Where a job's checkpoints and outputs go (its spec's URLs; None: it has none)."""

    job_id: str
    checkpoint_url: str | None
    output_url: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def job_storage(store: JobStore, job_id: str) -> JobStorage:
    """``GET /v1/jobs/{id}/checkpoints``: the job's checkpoint URL and (a batch job) output URL.
    :class:`~spothop.jobs.errors.JobNotFound` for a job that does not exist."""
    spec = store.get_job(job_id).spec()
    checkpoint = getattr(spec, "checkpoint", None)
    batch = getattr(spec, "batch", None)
    return JobStorage(
        job_id,
        None if checkpoint is None else checkpoint.url,
        None if batch is None else batch.output,
    )


# -- cancel -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CancelRequested:
    """What ``cancel`` answers: the controller was asked to end the job."""

    job_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "cancel_requested": True}


def request_cancel(store: JobStore, job_id: str, *, by: str = "spothop cancel") -> CancelRequested:
    """Ask the controller to end ``job_id`` (an event it acts on, naming who asked ``by``).

    :class:`~spothop.jobs.errors.JobFinished` (exit 1) for a job in a final state.
    """
    from spothop.jobs.errors import JobFinished

    job = store.get_job(job_id)
    if job.state.final:
        raise JobFinished(
            f"job {job_id} is already {job.state}; there is nothing to cancel "
            f"(spothop status {job_id} shows how it ended)"
        )
    store.record_event(job_id, CANCEL_EVENT, {"by": by})
    return CancelRequested(job_id)
