"""The embedding example against the real queue: a worker under the agent, preempted; outputs verified.

The worker runs as the agent's worker on a local-cloud instance, exactly as a
launched job's would: it claims under the agent's worker id, and a final
notice makes it give the shard in hand back between batches and exit. A
second worker finishes the job; ``verify.py`` then proves every passage has
exactly one embedding, equal to a run without preemptions. The instance shares
nothing with the test but the network and a bucket: the corpus, the script and
the outputs are in the bucket, the queue is reached through the control plane.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("pyarrow")

from examples.embed import embed, verify

from spothop.batch.inputs import plan_shards
from spothop.batch.spec import BatchInput
from spothop.providers.base import InstanceState
from spothop.queue import OutputStore, ShardState, open_queue
from tests.agent.shared_nothing import STATE_ROOT, shared_nothing
from tests.examples.conftest import EXAMPLES, RECORDS_PER_SHARD, SMALL_CORPUS, write_job
from tests.waiting import wait_for

WORKER = EXAMPLES / "embed" / "embed.py"
JOB = "embed-test"


def submit(job_file: Path, url: str) -> int:
    records = next((job_file.parent / "data").glob("*.jsonl"))
    shards = plan_shards(BatchInput(records=str(records), records_per_shard=RECORDS_PER_SHARD))
    with open_queue(url, JOB) as queue:
        return queue.enqueue(shards)


def test_a_preempted_worker_gives_its_shard_back_and_the_job_ends_exact(
    tmp_path: Path, embed_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    with shared_nothing(tmp_path, queue_url=url) as cloud:
        # The corpus, the job file, the worker's script and its output: in the world's bucket.
        job_file = write_job(cloud.bucket)
        assert submit(job_file, url) == SMALL_CORPUS // RECORDS_PER_SHARD
        code = cloud.ship(WORKER)
        output = str(cloud.bucket / "out")
        command = cloud.agent(
            "--poll-interval", "0.2", "--safety-margin", "1",
            "--state-dir", f"{STATE_ROOT}/embed", "--queue-url", cloud.url, "--job-id", JOB,
            worker=[
                "python", str(code / WORKER.name), "--output", output, "--batch-size", "8",
            ],
        )  # fmt: skip
        instance = cloud.launch(
            "aws-sim",
            ("g5.xlarge", "us-east-1", "us-east-1a"),
            JOB,
            command,
            env={"EMBED_THREADS": "1", "EMBED_DEVICE": "cpu"},
        )
        provider = cloud.provider("aws-sim")
        store = OutputStore(output)
        # The model loaded once, the first shard is published: the worker is between shards or batches.
        published = wait_for(lambda: store.published(), 120, what="the first shard published")
        assert published, cloud.console(instance)
        provider.preempt(instance.instance_id, lead_time_s=5)
        ended = provider.wait(instance.instance_id, [InstanceState.PREEMPTED], 60)
        assert ended.state is InstanceState.PREEMPTED, cloud.console(instance)
        row = provider.store.instance(instance.instance_id)
        assert row is not None and row["exit_code"] == 75, cloud.console(instance)
    with open_queue(url, JOB) as queue:
        stats = queue.stats()
        assert stats.leased == 0 and stats.done >= 1 and stats.pending >= 1
        # The shard in hand went back refunded: no attempt is counted against a preemption.
        assert all(r.attempts == 0 for r in queue.records(ShardState.PENDING))
    first_done = set(store.published())

    # A second worker (another instance) loads the model and drains the queue.
    with caplog.at_level("INFO", logger="embed"):
        code = embed.run(url, JOB, output, worker="worker-2", batch_size=8, model=embed_model)
    assert code == 0
    # What it paid before its first shard and each shard's time: bench/main_job.py's breakdown.
    lines = [r.getMessage() for r in caplog.records if r.name == "embed"]
    assert any(line.startswith("model ready: ") for line in lines), lines
    assert any(" s encode, " in line and " s publish)" in line for line in lines), lines
    with open_queue(url, JOB) as queue:
        stats = queue.stats()
        assert (stats.done, stats.pending, stats.leased, stats.dead) == (8, 0, 0, 0)
    assert first_done < set(store.published())

    report = verify.verify(verify.read_job(job_file), output_url=output, model=embed_model)
    assert report.ok, report.to_dict()
    assert (report.inputs, report.outputs, report.reference_shards) == (
        SMALL_CORPUS,
        SMALL_CORPUS,
        8,
    )
    assert report.max_abs_diff == 0.0  # bit-identical to an uninterrupted run
