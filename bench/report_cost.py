"""What a job's report and status cost the server per call, as the job's agent events grow.

``.venv/bin/python -P bench/report_cost.py [--events 100,1000,10000] [--calls 20] [--no-postgres]``

The user API's ``GET /v1/jobs/{id}/report`` and ``GET /v1/jobs/{id}`` run
:func:`~spothop.service.report.job_report` and :func:`~spothop.service.jobs.job_status`
in the server's threadpool, holding the GIL while they build their answer: a
heartbeat waits behind them. Here one job of the local world's clouds (in a
scratch ``SPOTHOP_HOME``) has two attempts, one interrupted (its final notice
and interruption among the agent events), and ``--events`` agent events of
the kinds ``bench/server.py``'s synthetic agents send (``probe``, from many
instances that name the job). For each count, on SQLite and on PostgreSQL
(``$SPOTHOP_TEST_POSTGRES_URL``, a fresh schema dropped at the end), it prints
this process's CPU milliseconds per call (``time.process_time``: what the
replica spends; PostgreSQL's own work is in its server process, not counted),
the median of ``--calls`` calls after one warm-up call. The target is a flat
row: a call's cost bounded whatever the number of irrelevant events.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.server import _schema  # noqa: E402  (a fresh PostgreSQL schema, dropped after)
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

AGENTS = 500  # bench/server.py's synthetic agents, each its own instance
BATCH = 1000  # events written per call


def _job(store: Any, url: str) -> str:
    """A task job with two attempts on a local cloud, the first interrupted, the second running."""
    from spothop.controlplane.store import StoreControlPlane
    from spothop.jobs.lifecycle import AttemptState, EndReason
    from spothop.jobs.spec import load_job
    from spothop.wire.events import FinalNotice, Interruption

    job_id = store.create_job(load_job({"name": "report-cost", "run": "true"}))
    now = time.time()
    place = {"provider": "aws-sim", "region": "us-east-1", "zone": "us-east-1a"}
    for instance, ended in (("i-first", True), ("i-second", False)):
        attempt = store.add_attempt(
            job_id, 0, **place, instance_type="g5.xlarge", market_kind="spot",
            price_usd_per_hour=0.5,
        )  # fmt: skip
        store.update_attempt(
            attempt.attempt_id,
            instance_id=instance,
            state=AttemptState.RUNNING,
            running_unix_s=now - 3600 if ended else now - 1790,
        )
        if ended:
            store.update_attempt(
                attempt.attempt_id, state=AttemptState.NOTICED, noticed_unix_s=now - 1830
            )
            store.update_attempt(
                attempt.attempt_id,
                state=AttemptState.ENDED,
                end_reason=EndReason.PREEMPTED,
                ended_unix_s=now - 1800,
            )
    plane = StoreControlPlane(url, "i-first")
    stamp = {**place, "instance_id": "i-first", "job_id": job_id, "instance_type": "g5.xlarge"}
    plane.record(FinalNotice(**stamp, cause="capacity", lead_time_s=30.0))
    plane.record(
        Interruption(
            **stamp, notice_time_unix_s=now - 1830, cause="capacity", lead_time_s=30.0,
            saved="saved", steps_s={"save": 1.5},
        )
    )  # fmt: skip
    return job_id


def _add_probes(url: str, job_id: str, count: int) -> None:
    """``count`` probe events from the synthetic agents, as bench/server.py's send them."""
    from spothop.controlplane.store import StoreControlPlane
    from spothop.wire.events import Probe

    plane = StoreControlPlane(url, "bench-0000")
    stamp = {"provider": "aws-sim", "job_id": job_id, "worker_id": "w0"}
    for start in range(0, count, BATCH):
        plane.record_many(
            [
                Probe(**stamp, instance_id=f"bench-{i % AGENTS:04d}", ran=False, reason="bench")
                for i in range(start, min(count, start + BATCH))
            ]
        )


def _settle(store: Any) -> None:
    """PostgreSQL's statistics brought up to date now, as its autovacuum would soon: measured
    while it runs on the same cores, a call pays for the inserts just made."""
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE agent_events")


def _cpu_ms(call: Callable[[], Any], calls: int) -> float:
    call()  # warm: imports, caches, the first statement's compile
    spent = []
    for _ in range(calls):
        start = time.process_time()
        call()
        spent.append((time.process_time() - start) * 1000)
    return statistics.median(spent)


def measure(url: str, counts: list[int], calls: int) -> list[tuple[int, float, float]]:
    from spothop.jobs.store import JobStore
    from spothop.providers.registry import default_providers
    from spothop.service.jobs import job_status
    from spothop.service.report import job_report

    providers = default_providers()
    rows = []
    with JobStore(url) as store:
        job_id = _job(store, url)
        have = 0
        for count in counts:
            _add_probes(url, job_id, count - have)
            have = count
            _settle(store)
            report = _cpu_ms(lambda: job_report(store, job_id, providers).to_dict(), calls)
            status = _cpu_ms(lambda: job_status(store, job_id).to_dict(), calls)
            rows.append((count, report, status))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="100,1000,10000")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    counts = sorted(int(c) for c in args.events.split(","))
    with tempfile.TemporaryDirectory(prefix="spothop-report-cost-") as home:
        os.environ["SPOTHOP_HOME"] = home
        results = {"sqlite": measure(f"sqlite:///{Path(home) / 'store.db'}", counts, args.calls)}
        if not args.no_postgres:
            with _schema() as url:
                results["postgresql"] = measure(url, counts, args.calls)
    table = Table(title=f"CPU ms per call (median of {args.calls}), by the job's agent events")
    table.add_column("store")
    table.add_column("call")  # job_report, job_status
    for count in counts:
        table.add_column(f"{count:,} events", justify="right")
    table.add_column(f"{counts[-1]:,} / {counts[0]:,}", justify="right")
    for store, rows in results.items():
        for index, call in ((1, "report"), (2, "status")):
            cells = [row[index] for row in rows]
            ratio = cells[-1] / cells[0] if cells[0] else float("nan")
            table.add_row(store, call, *(f"{c:.1f}" for c in cells), f"{ratio:.2f}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
