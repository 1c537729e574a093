"""The embedding example's worker in this process: batches, stops, ordering, ``verify.py``'s
findings, what the worker imports. The end-to-end run under the agent is tests/examples/test_embed.py."""

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

from tests.conftest import PROJECT_ROOT
from tests.examples.conftest import RECORDS_PER_SHARD, write_job


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
    # Four shards are every case: one intact, one altered, one missing, one published twice
    # (verify recomputes each published shard, so each one more costs seconds on a loaded CPU).
    job_file = write_job(tmp_path, passages=4 * RECORDS_PER_SHARD)
    job = verify.read_job(job_file)
    records = list(verify.input_records(job.inputs))
    assert len(records) == 4 * RECORDS_PER_SHARD
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
