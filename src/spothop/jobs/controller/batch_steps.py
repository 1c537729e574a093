"""A batch job's two steps that are not launches: its shards into the queue, its outputs published."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spothop.jobs.spec import BatchJobSpec, JobSpec
    from spothop.queue import Shard


def enqueue_shards(spec: JobSpec, job_id: str, queue_url: str | None) -> int:
    """Split the batch job's inputs (every file its globs match, in name order) into shards and
    enqueue them in the job's queue (named by the job id); how many were new (again: none).

    Shard ids are ``f<file index>-shard-<n>`` so that files of one job never collide.
    """
    import glob

    from spothop.batch import BatchInput, plan_shards
    from spothop.queue import Shard, open_queue

    batch = _batch_of(spec)
    files: list[str] = []
    for pattern in batch.inputs:
        pattern = str(pattern)
        matched = sorted(glob.glob(pattern)) if "://" not in pattern else [pattern]
        files.extend(m for m in matched if m not in files)
    shards: list[Shard] = []
    for index, path in enumerate(files):
        if path.endswith((".jsonl", ".parquet")):
            planned = plan_shards(
                BatchInput(records=path, records_per_shard=int(batch.records_per_shard))
            )
        else:
            planned = plan_shards(BatchInput(files=[path]))
        shards.extend(Shard(f"f{index}-{s.id}", s.payload) for s in planned)
    with open_queue(queue_url, job_id) as queue:
        return queue.enqueue(shards)


def publish_outputs(spec: JobSpec, job_id: str, queue_url: str | None) -> dict[str, int]:
    """Publish every done shard's winning output (idempotent); the counts."""
    from spothop.queue import open_queue
    from spothop.queue.outputs import OutputStore, finalize_outputs

    with open_queue(queue_url, job_id) as queue:
        report = finalize_outputs(queue, OutputStore(str(_batch_of(spec).output)))
    return {"published": report.published, "losers_removed": report.losers_removed}


def _batch_of(spec: JobSpec) -> BatchJobSpec:
    """The spec's ``batch`` section (``decide`` asks these steps of batch jobs only)."""
    if spec.batch is None:
        raise ValueError(f"job {spec.name!r} is not a batch job: it has no batch section")
    return spec.batch
