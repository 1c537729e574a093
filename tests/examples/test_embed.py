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

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("pyarrow")

from examples.embed import embed, verify

from spothop.batch.inputs import plan_shards
from spothop.batch.spec import BatchInput
from spothop.providers.base import InstanceState
from spothop.queue import OutputStore, ShardState, open_queue
from tests.agent.shared_nothing import STATE_ROOT, shared_nothing
from tests.conftest import PROJECT_ROOT
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


def test_a_stop_between_batches_returns_nothing_and_embeds_nothing_more(embed_model: Any) -> None:
    texts = [f"passage number {i} about spot markets" for i in range(20)]
    calls: list[int] = []

    def stop_after_two() -> bool:
        calls.append(1)
        return len(calls) > 2

    assert embed.embed_records(embed_model, texts, 8, stop_after_two) is None
    assert len(calls) == 3  # checked before each batch: two ran, the third was refused


def test_embeddings_do_not_depend_on_how_the_shard_is_ordered_in_batches(embed_model: Any) -> None:
    texts = ["short", "a somewhat longer passage of text", "mid length one", "x" * 50]
    whole = embed.embed_records(embed_model, texts, 4)
    again = embed.embed_records(embed_model, texts, 4)
    assert whole is not None and again is not None
    assert whole.dtype == np.float32 and whole.shape == (4, embed.EMBEDDING_DIM)
    assert whole.tobytes() == again.tobytes()
    ids, back = embed.read_parquet(embed.to_parquet(["a", "b", "c", "d"], whole))
    assert ids == ["a", "b", "c", "d"] and back.tobytes() == whole.tobytes()


def test_verify_names_missing_duplicated_and_altered_embeddings(
    tmp_path: Path, embed_model: Any
) -> None:
    job_file = write_job(tmp_path)
    job = verify.read_job(job_file)
    records = list(verify.input_records(job.inputs))
    out = tmp_path / "out"
    out.mkdir()
    shards = [records[i : i + RECORDS_PER_SHARD] for i in range(0, len(records), RECORDS_PER_SHARD)]
    for index, shard in enumerate(shards[:-1]):  # the last shard is missing
        vectors = embed.embed_records(embed_model, [r["text"] for r in shard], 8)
        assert vectors is not None
        if index == 1:
            vectors[0, 0] += 1e-3  # a number that an uninterrupted run would not write
        (out / f"shard-{index:06d}").write_bytes(
            embed.to_parquet([r["id"] for r in shard], vectors)
        )
    first = (out / "shard-000000").read_bytes()
    (out / "shard-000099").write_bytes(first)  # the same ids a second time
    report = verify.verify(job, model=embed_model)
    assert not report.ok
    assert report.missing == RECORDS_PER_SHARD and report.duplicated == RECORDS_PER_SHARD
    assert [m.split(":")[0] for m in report.reference_mismatches] == ["shard-000001"]
    assert verify.main([str(job_file), "--reference-shards", "0", "--json"]) == 1


def test_the_worker_reads_its_shards_without_loading_the_spec_validation() -> None:
    # What run() imports from spothop: the queue and the shard reader, not pydantic (the job
    # spec's validation, the launcher's business): a worker's memory is the model's.
    code = (
        "import sys\n"
        "from examples.embed import embed\n"
        "from spothop.batch.inputs import BatchShard\n"
        "from spothop.batch.shards import iter_shards\n"
        "from spothop.queue import LeaseLost, OutputStore, open_queue\n"
        "from spothop.worker import sdk\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
