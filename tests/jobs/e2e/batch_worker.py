"""A batch job's worker, as a user would write it: pull shards, write each one's output exactly once.

Run by the job's ``run`` line on every worker instance; the agent gives it
``SPOTHOP_QUEUE_URL``, ``SPOTHOP_JOB_ID`` and ``SPOTHOP_WORKER_ID``. Each
output names the shard and the records it covered, so a test can check that
every record was processed once and no output was written twice. A SIGTERM
(the agent's stop at a notice) ends it at once; the agent hands its leases back.
"""

from __future__ import annotations

import json
import os
import sys
import time

from spothop.queue import open_queue
from spothop.queue.errors import LeaseLost
from spothop.queue.outputs import OutputStore

CLAIM = 8
LEASE_S = 120.0
WORK_S = float(
    os.environ.get("WORK_S_PER_SHARD", "0")
)  # a job whose shards take time (the spec's envs)


def main() -> int:
    output = sys.argv[1]
    queue = open_queue(os.environ["SPOTHOP_QUEUE_URL"], os.environ["SPOTHOP_JOB_ID"])
    worker = os.environ["SPOTHOP_WORKER_ID"]
    store = OutputStore(output)
    done = 0
    while True:
        leases = queue.claim(worker, CLAIM, LEASE_S)
        if not leases:
            stats = queue.stats()
            if stats.pending == 0 and stats.leased == 0:
                print(f"{worker}: drained after {done} shards", flush=True)
                return 0
            time.sleep(0.2)
            continue
        for lease in leases:
            time.sleep(WORK_S)
            payload = lease.payload
            data = json.dumps(
                {
                    "shard": lease.shard_id,
                    "first": payload["first"],
                    "count": payload["count"],
                    "worker": worker,
                    "token": lease.token,
                }
            ).encode()
            try:
                store.commit(queue, lease, data)
            except LeaseLost:
                continue
            done += 1
        print(f"{worker}: {done} shards", flush=True)


if __name__ == "__main__":
    sys.exit(main())
