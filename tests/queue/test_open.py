"""``open_queue`` imports only the backend its URL names."""

from __future__ import annotations

import subprocess
import sys


def test_a_redis_queues_worker_loads_no_sqlalchemy() -> None:
    # A batch worker on Redis starts once per instance, again after every preemption: SQLAlchemy
    # would be most of its start-up (about 0.3 s of 0.4 s on an idle machine), for nothing.
    code = (
        "import sys\n"
        "from spothop.queue import OutputStore, open_queue\n"
        "open_queue('redis://127.0.0.1:6379/0', 'j-open')\n"  # connects at the first call only
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"
