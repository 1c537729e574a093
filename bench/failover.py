"""Failover: the first 5 candidates have no capacity; time to a running instance, parallel vs serial.

The controller's executor launches against a provider whose every call takes
``--api-s`` (a cloud API round trip that ends in a capacity refusal, or in an
instance that then boots for ``--boot-s``). The best 5 candidates refuse with
the cloud's capacity code; the 6th and later have room.

- ``serial``: one candidate after another (what a region-by-region failover
  does): ``Launch(parallel=False)`` with every candidate, tried in order.
- ``spothop k=3``: what ``decide`` asks: the best candidate first; after a
  failure, the next ``k`` at once (``Launch(parallel=True)``), keeping the first
  that runs and terminating the rest; again until one runs.
- ``spothop k=5``: the same with ``failover_k`` 5.

Each failure is recorded with the cloud's own code (checked). Prints seconds to
a running instance (median of ``--repeat``) and the ratio to serial (target ≤ 0.40).

    .venv/bin/python -P bench/failover.py [--api-s 1.0] [--boot-s 0.5] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spothop.errors import CapacityUnavailable
from spothop.jobs.controller import Launch
from spothop.jobs.controller.executor import Executor
from spothop.jobs.lifecycle import EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import WallClock
from spothop.providers.base import Instance, InstanceState, LaunchRequest
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate
from spothop.testing import FakeProvider, make_market, make_offering

REFUSING = 5
CANDIDATES = 9
TARGET_RATIO = 0.40
CODE = "InsufficientInstanceCapacity"


class SlowCloud(FakeProvider):
    """The fake provider on the wall clock, each launch call taking ``api_s``; the first
    ``REFUSING`` zones have no capacity (the refusal comes after the round trip too)."""

    def __init__(self, api_s: float, boot_s: float) -> None:
        offerings = [make_offering(zone=f"fake-1{chr(97 + i)}") for i in range(CANDIDATES)]
        super().__init__(
            markets=[make_market(o, capacity=100) for o in offerings],
            clock=WallClock(),
            launch_delay_s=boot_s,
        )
        self.api_s = api_s
        self.full = {o.zone for o in offerings[:REFUSING]}

    def launch(self, request: LaunchRequest) -> Instance:
        time.sleep(self.api_s)
        if request.zone in self.full:
            raise CapacityUnavailable(self.name, CODE, f"no capacity in {request.zone}")
        return super().launch(request)


def _candidate(offering: Any) -> Candidate:
    return Candidate(offering, MarketKind.SPOT, 1.0, 0.1, 100.0, 0.9, 0.0, 0.01)


def run(api_s: float, boot_s: float, k: int | None, home: Path) -> tuple[float, int]:
    """Seconds until an instance runs, and how many failures were recorded (k None: serial)."""
    store_url = f"sqlite:///{home / 'store.db'}"
    store = JobStore(store_url)
    cloud = SlowCloud(api_s, boot_s)
    executor = Executor(store, {cloud.name: cloud}, store_url=store_url, home=home)
    job_id = store.create_job(load_job({"name": "bench", "run": "true"}))
    candidates = [_candidate(o) for o in cloud.list_offerings()]
    started = time.monotonic()
    try:
        if k is None:
            executor.step(Launch(job_id, 0, tuple(candidates), "serial", "serial failover"))
            _wait(executor)
        else:
            tried, rounds = 0, 0
            while True:
                batch = candidates[tried : tried + (1 if rounds == 0 else k)]
                launch = Launch(
                    job_id, 0, tuple(batch), f"t{rounds}", "failover", parallel=rounds > 0
                )
                executor.step(launch)
                _wait(executor)
                tried, rounds = tried + len(batch), rounds + 1
                if executor.outcomes[-1].winner is not None:
                    break
        winner = executor.outcomes[-1].instance_id
        assert winner is not None
        while cloud.describe(winner).state is not InstanceState.RUNNING:
            time.sleep(0.01)
        elapsed = time.monotonic() - started
        failed = [a for a in store.attempts(job_id) if a.end_reason is EndReason.LAUNCH_FAILED]
        assert all(a.error_code == CODE for a in failed)  # the cloud's own code, every time
        return elapsed, len(failed)
    finally:
        executor.close()
        store.close()


def _wait(executor: Executor) -> None:
    while executor.launching():
        time.sleep(0.005)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--api-s", type=float, default=1.0, help="seconds per launch call")
    parser.add_argument("--boot-s", type=float, default=0.5, help="seconds from launch to running")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        serial_s = 0.0
        for label, k in (("serial", None), ("spothop k=3", 3), ("spothop k=5", 5)):
            times, failures = [], 0
            for i in range(args.repeat):
                home = Path(tmp) / f"{label.replace(' ', '-')}-{i}"
                home.mkdir()
                elapsed, failures = run(args.api_s, args.boot_s, k, home)
                times.append(elapsed)
            median = statistics.median(times)
            serial_s = serial_s or median
            rows.append((label, median, failures, median / serial_s))
    print(
        f"first {REFUSING} candidates refuse ({CODE}); launch call {args.api_s:g} s, "
        f"boot {args.boot_s:g} s; median of {args.repeat}"
    )
    print(f"{'strategy':<14} {'to running s':>13} {'failures':>9} {'vs serial':>10}")
    for label, median, failures, ratio in rows:
        print(f"{label:<14} {median:>13.2f} {failures:>9} {ratio:>10.2f}")
    best = min(r[3] for r in rows[1:])
    print(
        f"target: ≤ {TARGET_RATIO:.2f}× serial; best {best:.2f}× ({'met' if best <= TARGET_RATIO else 'not met'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
