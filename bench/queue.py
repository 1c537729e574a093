"""Queue throughput and claim latency, per backend, with 1, 4 and 16 worker processes.

Each run enqueues SHARDS shards; W worker processes (spawned) claim one
shard at a time and complete it with no work between, until the queue is
empty. Printed: shards claimed and completed per second, claim latency
p50/p99, the throughput ratio to SQLite, and for Redis the server commands
per shard (round trips), the raw pipelined PING rate on the same server and
the queue's share of it, and memory per million pending shards.

Servers: SPOTHOP_TEST_POSTGRES_URL and SPOTHOP_TEST_REDIS_URL (the tests'
defaults); an unreachable one is left out of the table.
"""

# ruff: noqa: E402  (the path fix below must run before any import that pulls in ``queue``)
from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder leads sys.path and its name hides the
# stdlib ``queue`` (used by multiprocessing, SQLAlchemy, redis): take it off.
# Spawned workers inherit the fixed path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import multiprocessing as mp
import os
import statistics
import tempfile
import time
import uuid
from typing import Any

from rich.console import Console
from rich.table import Table

from spothop.queue import Shard, ShardQueue

POSTGRES_URL = os.environ.get(
    "SPOTHOP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("SPOTHOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
SHARDS = 2000
WORKER_COUNTS = (1, 4, 16)
PING_PIPELINE = 1000
PING_ROUNDS = 50
MEMORY_SAMPLE_SHARDS = 50_000
LEASE_S = 60.0


def open_bench_queue(backend: str, where: str, job: str) -> ShardQueue:
    if backend == "redis":
        from spothop.queue.redis_backend import RedisQueue

        return RedisQueue(job, REDIS_URL, prefix=where)
    from spothop.queue.sql_backend import SqlQueue

    if backend == "postgresql":
        return SqlQueue(job, POSTGRES_URL, schema=where)
    return SqlQueue(job, where)


def worker(backend: str, where: str, job: str, name: str, barrier: Any, results: Any) -> None:
    queue = open_bench_queue(backend, where, job)
    latencies: list[float] = []
    barrier.wait()
    while True:
        start = time.perf_counter()
        leases = queue.claim(name, 1, LEASE_S)
        latencies.append(time.perf_counter() - start)
        if not leases:
            break
        queue.complete(leases[0], "ref")
    results.put(latencies[:-1])
    queue.close()


def run(backend: str, where: str, workers: int) -> dict[str, float]:
    job = f"bench-{uuid.uuid4().hex[:8]}"
    queue = open_bench_queue(backend, where, job)
    queue.enqueue(Shard(f"s{i:06d}", {"i": i}) for i in range(SHARDS))
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(workers + 1), ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(backend, where, job, f"w{i}", barrier, results))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    commands_before = _redis_commands() if backend == "redis" else 0
    barrier.wait()
    start = time.perf_counter()
    latencies = [x for _ in procs for x in results.get()]
    wall = time.perf_counter() - start
    for p in procs:
        p.join()
    commands = (_redis_commands() - commands_before) if backend == "redis" else 0
    assert queue.stats().done == SHARDS
    queue.drop()
    queue.close()
    latencies.sort()
    return {
        "rate": SHARDS / wall,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "rt_per_shard": commands / SHARDS,
    }


def _redis_commands() -> int:
    import redis

    # Client round trips only: commands run inside a script are counted apart, under their own names.
    stats = redis.Redis.from_url(REDIS_URL).info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval")
    )


def redis_ping_rate() -> float:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    start = time.perf_counter()
    for _ in range(PING_ROUNDS):
        pipe = client.pipeline(transaction=False)
        for _ in range(PING_PIPELINE):
            pipe.ping()
        pipe.execute()
    return PING_ROUNDS * PING_PIPELINE / (time.perf_counter() - start)


def redis_bytes_per_million(prefix: str) -> float:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    queue = open_bench_queue("redis", prefix, "memory")
    before = int(client.info("memory")["used_memory"])
    queue.enqueue(
        Shard(f"s{i:08d}", {"uri": f"s3://bucket/input/part-{i:08d}.jsonl"})
        for i in range(MEMORY_SAMPLE_SHARDS)
    )
    used = int(client.info("memory")["used_memory"]) - before
    queue.drop()
    queue.close()
    return used * 1_000_000 / MEMORY_SAMPLE_SHARDS


def backends(tmp: Path, wanted: list[str]) -> list[tuple[str, str]]:
    """Usage: ``bench/queue.py [sqlite] [postgresql] [redis]`` (default: all three)."""
    found = [("sqlite", f"sqlite:///{tmp / 'bench.db'}")]
    try:
        if wanted and "postgresql" not in wanted:
            raise LookupError("not asked for")
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        found.append(("postgresql", schema))
    except Exception as exc:
        print(f"PostgreSQL left out: {exc}", file=sys.stderr)
    try:
        if wanted and "redis" not in wanted:
            raise LookupError("not asked for")
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
        found.append(("redis", f"spothop-bench-{uuid.uuid4().hex[:8]}:"))
    except Exception as exc:
        print(f"Redis left out: {exc}", file=sys.stderr)
    return found


def main() -> int:
    console = Console()
    with tempfile.TemporaryDirectory(prefix="spothop-bench-") as folder:
        found = backends(Path(folder), sys.argv[1:])
        rows = {(b, w): run(b, where, w) for b, where in found for w in WORKER_COUNTS}
        for backend, where in found:
            if backend == "postgresql":
                import psycopg

                with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA "{where}" CASCADE')
    table = Table(
        title=f"shard queue: {SHARDS} shards, claim 1 + complete, no work ({os.cpu_count()} CPUs)"
    )
    for name in (
        "backend",
        "workers",
        "shards/s",
        "× SQLite",
        "claim p50 ms",
        "claim p99 ms",
        "round trips/shard",
    ):
        table.add_column(name, justify="left" if name == "backend" else "right")
    for (backend, workers), r in rows.items():
        ratio = r["rate"] / rows[("sqlite", workers)]["rate"]
        table.add_row(
            backend,
            str(workers),
            f"{r['rate']:,.0f}",
            f"{ratio:.2f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['rt_per_shard']:.2f}" if backend == "redis" else "—",
        )
    console.print(table)
    if any(b == "redis" for b, _ in found):
        ping = redis_ping_rate()
        best = max(r["rate"] for (b, _), r in rows.items() if b == "redis")
        console.print(
            f"Redis raw pipelined PING: {ping:,.0f}/s; best queue rate {best:,.0f} shards/s "
            f"= {best * 2 / ping:.1%} of it in round trips (2 per shard)"
        )
        prefix = next(w for b, w in found if b == "redis")
        console.print(
            f"Redis memory per million pending shards: {redis_bytes_per_million(prefix) / 2**20:,.0f} MiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
