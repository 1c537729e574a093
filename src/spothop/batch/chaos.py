"""The chaos harness: worker processes SIGKILLed at random and restarted, then an audit.

Used by ``tests/batch/test_chaos.py`` (reduced size) and ``bench/chaos.py``
(10,000 shards, 8 workers). The audit checks what exactly-once means:
every shard done, none dead; no shard committed twice (each worker logs
the completes that reported ``first``); one published output per shard,
byte-identical to the same work done without kills; no temporary left.

Run a worker by hand: ``python -m spothop.batch.chaos worker URL JOB OUT NAME LEASE_S WORK_S LOG``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spothop.batch.shards import iter_shards
from spothop.queue.errors import LeaseLost
from spothop.queue.model import QueuePolicy, Shard
from spothop.queue.open import open_queue
from spothop.queue.outputs import OutputStore, finalize_outputs

# Kills expire leases, and an expired lease consumes an attempt: allow plenty,
# so that only a lost shard, never bad luck, fails the audit.
CHAOS_MAX_ATTEMPTS = 1000
POLL_S = 0.1
OUTPUT_ROUNDS = 200


def chaos_output(payload: Any, work_s: float) -> bytes:
    """The shard's work: a deterministic digest chain (the same bytes on every attempt), plus a pause
    standing in for real work so that kills land mid-shard."""
    if work_s > 0:
        time.sleep(work_s)
    digest = json.dumps(payload, sort_keys=True).encode()
    for _ in range(OUTPUT_ROUNDS):
        digest = hashlib.sha256(digest).digest()
    return json.dumps({"payload": payload, "digest": digest.hex()}, sort_keys=True).encode() + b"\n"


def worker_main(
    url: str, job: str, out: str, name: str, lease_s: float, work_s: float, log: str
) -> None:
    queue = open_queue(url, job)
    store = OutputStore(out)
    with open(log, "a", encoding="utf-8") as commits:
        for item in iter_shards(queue, name, store=store, lease_s=lease_s, poll_s=POLL_S):
            data = chaos_output(item.payload, work_s)
            try:
                done = item.commit(data)
            except LeaseLost:
                continue
            if done.first:
                commits.write(f"{item.shard_id} {done.token}\n")
                commits.flush()


@dataclass
class ChaosReport:
    shards: int
    workers: int
    kills: int
    seconds: float
    done: int
    dead: int
    committed_twice: int
    missing_outputs: int
    wrong_outputs: int
    temporaries_left: int
    attempts: int
    reclaims: int

    @property
    def exact(self) -> bool:
        return (
            self.done == self.shards
            and self.dead == 0
            and self.committed_twice == 0
            and self.missing_outputs == 0
            and self.wrong_outputs == 0
            and self.temporaries_left == 0
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exact": self.exact}


@dataclass
class _Fleet:
    argv: list[str]
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]]
    started: int = 0

    def start(self) -> None:
        self.started += 1
        name = f"w{self.started:04d}"
        log = str(self.logs / f"{name}.log")
        self.procs[name] = subprocess.Popen([*self.argv, name, log])

    def kill_one(self, rng: random.Random) -> bool:
        alive = [n for n, p in self.procs.items() if p.poll() is None]
        if not alive:
            return False
        victim = rng.choice(alive)
        os.kill(self.procs[victim].pid, signal.SIGKILL)
        self.procs.pop(victim).wait()
        return True


def run_chaos(
    url: str,
    root: Path,
    *,
    shards: int,
    workers: int,
    kill_every_s: tuple[float, float],
    lease_s: float,
    work_s: float,
    seed: int = 0,
    timeout_s: float = 600.0,
    job: str = "chaos",
) -> ChaosReport:
    """Run ``shards`` shards on ``workers`` processes, SIGKILLing one every ``kill_every_s`` (a
    uniform range) and starting a replacement, until the queue drains; then audit."""
    rng = random.Random(seed)
    out, logs = root / "out", root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    queue = open_queue(url, job)
    queue.enqueue(
        [Shard(f"s{i:06d}", {"i": i}) for i in range(shards)],
        QueuePolicy(max_attempts=CHAOS_MAX_ATTEMPTS),
    )
    argv = [
        sys.executable,
        "-m",
        "spothop.batch.chaos",
        "worker",
        url,
        job,
        str(out),
        str(lease_s),
        str(work_s),
    ]
    fleet = _Fleet(argv, logs, {})
    for _ in range(workers):
        fleet.start()
    kills, start = 0, time.monotonic()
    next_kill = start + rng.uniform(*kill_every_s)
    try:
        while time.monotonic() - start < timeout_s:
            stats = queue.stats()
            if stats.pending == 0 and stats.leased == 0:
                break
            if time.monotonic() >= next_kill:
                kills += fleet.kill_one(rng)
                fleet.start()
                next_kill = time.monotonic() + rng.uniform(*kill_every_s)
            time.sleep(POLL_S)
    finally:
        for proc in fleet.procs.values():
            proc.terminate()
        for proc in fleet.procs.values():
            proc.wait()
    seconds = time.monotonic() - start
    finalize_outputs(queue, OutputStore(str(out)))
    report = _audit(queue, OutputStore(str(out)), logs, shards, workers, kills, seconds, work_s)
    queue.close()
    return report


def _audit(
    queue: Any,
    store: OutputStore,
    logs: Path,
    shards: int,
    workers: int,
    kills: int,
    seconds: float,
    work_s: float,
) -> ChaosReport:
    stats = queue.stats()
    lines = [
        line.split()[0]
        for log in logs.glob("*.log")
        for line in log.read_text().splitlines()
        if line
    ]
    published = set(store.published())
    missing = wrong = 0
    for i in range(shards):
        shard_id = f"s{i:06d}"
        if shard_id not in published:
            missing += 1
        elif store.read(shard_id) != chaos_output({"i": i}, 0):
            wrong += 1
    return ChaosReport(
        shards,
        workers,
        kills,
        round(seconds, 1),
        stats.done,
        stats.dead,
        len(lines) - len(set(lines)),
        missing,
        wrong,
        len(store.temporaries()),
        stats.attempts,
        stats.reclaims,
    )


if __name__ == "__main__":
    if len(sys.argv) != 9 or sys.argv[1] != "worker":
        sys.exit(__doc__)
    _, _, url_, job_, out_, lease_, work_, name_, log_ = sys.argv
    worker_main(url_, job_, out_, name_, float(lease_), float(work_), log_)
