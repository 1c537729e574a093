"""Job leases shared by controller replicas, on PostgreSQL: spread, takeover, and the fence's cost.

Store level (no cloud): ``--jobs`` live jobs in a fresh PostgreSQL schema and
``--replicas`` lease keepers (:class:`spothop.jobs.controller.replica.HeldJobs`,
one thread each, ticking every ``lease_s / 3`` as a replica does) measure:

- **spread**: seconds until every job is held, and how many each replica holds
  (a claim takes at most ``claim_limit`` jobs per tick);
- **takeover**: one replica stops ticking (as if SIGKILLed); seconds from then
  until each of its jobs is held by another (median and max; the bound is
  ``lease_s`` + one tick);
- **fence**: the latency of one job event written plain (``record_event``) and
  fenced (the same through ``JobStore.fenced``: the job's row locked under the
  lease in the same transaction), p50 and p99 over ``--writes``.

    .venv/bin/python -P bench/controller_replicas.py [--jobs 400] [--replicas 3] [--lease-s 3]
        [--writes 400] [--url postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from typing import Any

from sqlalchemy import select

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Keeper:
    """One replica's lease keeper: :meth:`HeldJobs.tick` every ``lease_s / 3`` until stopped."""

    def __init__(self, held: Any) -> None:
        self.held = held
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            try:
                self.held.tick()
            except Exception as exc:  # a bench: say so and go on
                print(f"{self.held.owner}: tick failed: {exc}", file=sys.stderr)
            if self.stop.wait(self.held.lease_s / 3):
                return


def owners(store: Any) -> dict[str, str | None]:
    from spothop.state.job_tables import jobs

    with store.engine.connect() as conn:
        return {r[0]: r[1] for r in conn.execute(select(jobs.c.job_id, jobs.c.lease_owner))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="PostgreSQL (a schema is made, dropped)")
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--lease-s", type=float, default=3.0)
    parser.add_argument("--writes", type=int, default=400)
    args = parser.parse_args(argv)

    import psycopg

    from spothop.jobs.controller.replica import HeldJobs
    from spothop.jobs.spec import load_job
    from spothop.jobs.store import JobStore

    schema = f"bench_replicas_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in args.url else "?"
    url = f"{args.url}{separator}options=-csearch_path%3D{schema}"
    try:
        store = JobStore(url)
        spec = load_job({"name": "bench", "run": "true"})
        for _ in range(args.jobs):
            store.create_job(spec)
        keepers = [
            Keeper(HeldJobs(store, f"replica-{i}", args.lease_s)) for i in range(args.replicas)
        ]
        started = time.monotonic()
        for k in keepers:
            k.thread.start()
        while any(o is None for o in owners(store).values()):
            time.sleep(0.01)
        spread_s = time.monotonic() - started
        held = {k.held.owner: len(k.held.held()) for k in keepers}

        victim = keepers[0]
        victim.stop.set()
        victim.thread.join()
        orphaned = set(victim.held.held())
        killed = time.monotonic()
        taken: dict[str, float] = {}
        while len(taken) < len(orphaned):
            now_owners = owners(store)
            for job_id in orphaned - set(taken):
                if now_owners[job_id] not in (None, victim.held.owner):
                    taken[job_id] = time.monotonic() - killed
            time.sleep(0.01)
        for k in keepers[1:]:
            k.stop.set()
            k.thread.join()

        # The fence's cost: one event per write, plain and fenced, alternating.
        for k in keepers[1:]:
            k.held.release_all()
        lease_holder = HeldJobs(store, "writer", 300, claim_limit=max(1, args.writes))
        lease_holder.tick()
        fenced = store.fenced(lease_holder.lease, on_lost=lease_holder.drop)
        targets = sorted(lease_holder.held())[: args.writes]
        plain_s, fenced_s = [], []
        for job_id in targets:
            t = time.perf_counter()
            store.record_event(job_id, "bench_plain")
            plain_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            fenced.record_event(job_id, "bench_fenced")
            fenced_s.append(time.perf_counter() - t)
        store.close()
    finally:
        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')

    waits = sorted(taken.values())
    print(
        f"jobs {args.jobs}, replicas {args.replicas}, lease {args.lease_s:g} s (tick {args.lease_s / 3:g} s)"
    )
    print(f"spread: every job held after {spread_s:.2f} s; per replica {held}")
    print(
        f"takeover of {len(orphaned)} jobs of a stopped replica: median {statistics.median(waits):.2f} s,"
        f" max {waits[-1]:.2f} s (bound: lease + tick = {args.lease_s * 4 / 3:.2f} s)"
    )
    print(
        f"event write, {len(targets)} each: plain p50 {1000 * _percentile(plain_s, 0.5):.1f} ms"
        f" p99 {1000 * _percentile(plain_s, 0.99):.1f} ms; fenced p50"
        f" {1000 * _percentile(fenced_s, 0.5):.1f} ms p99 {1000 * _percentile(fenced_s, 0.99):.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
