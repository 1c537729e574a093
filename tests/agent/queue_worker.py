"""A worker that claims shards from a real queue and then ignores SIGTERM.

``python queue_worker.py OUT_DIR QUEUE_URL JOB N``: claims N shards under its
worker id (from the agent), writes ``OUT_DIR/started``, and runs until killed,
so only the agent can give its leases back.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from spothop.queue import open_queue
from spothop.worker import sdk

out, url, job, n = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = sdk.worker_id() or "no-agent"
with open_queue(url, job) as queue:
    leases = queue.claim(worker, n, lease_s=600)
(out / "started").write_text(",".join(lease.shard_id for lease in leases))
while True:
    time.sleep(0.2)
