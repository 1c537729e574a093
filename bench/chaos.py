"""Full-size chaos run: 10,000 shards, 8 worker processes SIGKILLed every 1-3 s and restarted.

Prints the audit: shards done, dead, committed twice, missing or wrong
outputs, temporaries left, kills, attempts and reclaims. Exit status 1 unless exact.
Options: --shards N --workers N --url QUEUE_URL (default: a fresh SQLite file).
On a shared PostgreSQL or Redis the job gets a fresh name (``chaos-<pid>-<time>``)
so an earlier run's shards cannot count, and the job is dropped afterwards.
"""

# ruff: noqa: E402  (the path fix below must run before any import that pulls in ``queue``)
from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder leads sys.path and bench/queue.py hides
# the stdlib ``queue`` (used by concurrent.futures, fsspec, SQLAlchemy): take it off.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import argparse
import os
import tempfile
import time

from rich.console import Console
from rich.table import Table

from spothop.batch.chaos import run_chaos
from spothop.queue.open import open_queue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--url", default=None)
    parser.add_argument("--job", default=f"chaos-{os.getpid()}-{int(time.time())}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spothop-chaos-") as folder:
        root = Path(folder)
        url = args.url or f"sqlite:///{root / 'queue.db'}"
        try:
            report = run_chaos(
                url,
                root,
                shards=args.shards,
                workers=args.workers,
                kill_every_s=(1.0, 3.0),
                lease_s=2.0,
                work_s=0.01,
                seed=10,
                timeout_s=1800,
                job=args.job,
            )
        finally:
            with open_queue(url, args.job) as queue:
                queue.drop()
    backend = url.split(":", 1)[0]
    table = Table(
        title=f"chaos on {backend}: {args.shards} shards, {args.workers} workers, SIGKILL every 1-3 s"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in report.as_dict().items():
        table.add_row(key, str(value))
    Console().print(table)
    return 0 if report.exact else 1


if __name__ == "__main__":
    sys.exit(main())
