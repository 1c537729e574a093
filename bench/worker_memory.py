"""The embedding worker's memory shard after shard, with glibc's malloc as it comes and as the worker sets it.

``python -P bench/worker_memory.py [--shards N] [--records-per-shard R]``

Two child processes at once (side by side, so the same load falls on both), each
the worker's loop of ``examples/embed/embed.py`` without the queue: one thread
(``EMBED_THREADS``), the job's ``MALLOC_ARENA_MAX``, the model loaded once, then
for each shard of the example corpus ``embed_records`` and ``to_parquet``. One
child leaves glibc's malloc as it comes; the other calls ``tune_malloc`` before
the model's load and ``trim_malloc`` after each shard, as ``run`` does. Prints
each one's peak RSS after each shard and the CPU seconds (user, system) spent.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {"glibc as it comes": False, "the worker's settings": True}


def child(corpus: Path, shards: int, per_shard: int, tuned: bool) -> dict[str, object]:
    """The worker's loop in this process: peak RSS after each shard, and CPU seconds."""
    from examples.embed import embed

    records = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    if tuned:
        embed.tune_malloc()
    model = embed.load_model(device="cpu")
    peaks = []
    for s in range(shards):
        shard = records[s * per_shard : (s + 1) * per_shard]
        vectors = embed.embed_records(model, [r["text"] for r in shard], embed.DEFAULT_BATCH_SIZE)
        assert vectors is not None
        embed.to_parquet([r["id"] for r in shard], vectors)
        if tuned:
            embed.trim_malloc()
        peaks.append(round(embed.peak_rss_mib()))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"peaks": peaks, "user_s": usage.ru_utime, "sys_s": usage.ru_stime}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=12)
    parser.add_argument("--records-per-shard", type=int, default=500)  # examples/embed/job.yaml's
    parser.add_argument("--child", nargs=2, metavar=("CORPUS", "TUNED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.shards < 1 or args.records_per_shard < 1:
        parser.error("--shards and --records-per-shard must be at least 1")
    if args.child:
        result = child(
            Path(args.child[0]), args.shards, args.records_per_shard, args.child[1] == "1"
        )
        print(json.dumps(result))
        return 0
    from examples.embed.corpus import write_corpus

    env = {**os.environ, "EMBED_THREADS": "1", "MALLOC_ARENA_MAX": "2"}  # as in job.yaml
    with tempfile.TemporaryDirectory(prefix="spothop-worker-memory-") as scratch:
        corpus = write_corpus(Path(scratch) / "p.jsonl", args.shards * args.records_per_shard)
        started = time.perf_counter()
        sizes = ["--shards", str(args.shards), "--records-per-shard", str(args.records_per_shard)]
        children = {
            name: subprocess.Popen(
                [sys.executable, "-P", __file__, *sizes, "--child", str(corpus), str(int(tuned))],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for name, tuned in VARIANTS.items()
        }
        results = {
            name: json.loads(p.communicate()[0].splitlines()[-1]) for name, p in children.items()
        }
    print(f"{args.shards} shards of {args.records_per_shard} passages, both at once, "
          f"{time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    for name, r in results.items():
        print(f"{name:>22}: peak RSS MiB after each shard {r['peaks']}; "
              f"CPU {r['user_s']:.1f} s user, {r['sys_s']:.1f} s system")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
