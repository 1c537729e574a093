"""`spothop server run` freezes its start-up heap once serving needs nothing more: the request
paths import no module after it, and a slow full collection later freezes its survivors.

Each check runs in a process of its own (a frozen heap is the whole process's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVE_AFTER_SETTLING = """
import gc, json, os, sys
from fastapi.testclient import TestClient
from spothop.server.app import create_app, settle_heap
from spothop.server.settings import Settings

app = create_app(Settings(db_url="sqlite:///" + sys.argv[1], controller=False))
settle_heap(app)
before = set(sys.modules)
_, user = app.state.tokens.create_user("ada", "vision")
with TestClient(app) as client:
    headers = {"Authorization": "Bearer " + user}
    spec = "name: x\\nrun: sleep 1\\nresources: {accelerators: T4}\\n"
    job = client.post("/v1/jobs", json={"spec": spec}, headers=headers).json()["job_id"]
    agent = {"Authorization": "Bearer " + app.state.tokens.issue_agent_token(job, "i-1")}
    beat = {"instance_id": "i-1", "time_unix_s": 1.0, "state": "running"}
    codes = [
        client.post("/v1/agents/i-1/heartbeat", json=beat, headers=agent).status_code,
        client.get("/v1/agents/i-1/requests", headers=agent).status_code,
        *(
            client.get(path, headers=headers).status_code
            for path in (
                "/v1/jobs", f"/v1/jobs/{job}", f"/v1/jobs/{job}/report",
                f"/v1/jobs/{job}/events", "/v1/costs", "/metrics",
                "/dashboard/api/jobs", "/dashboard/api/markets",
            )
        ),
    ]
new = sorted(m for m in set(sys.modules) - before if m.startswith(("spothop", "numpy")))
print(json.dumps({"codes": codes, "imported": new}))
"""

FREEZE_ON_SLOW = """
import gc, json
from spothop.server import app as server_app

server_app.SLOW_FULL_COLLECTION_S = 0.0  # every full collection counts as slow
clock = [1000.0]
settler = server_app._FreezeSlowCollections(clock=lambda: clock[0])
gc.callbacks.append(settler.__call__)
frozen = gc.get_freeze_count()
kept = [[n] for n in range(1000)]  # long-lived, made after any freeze
gc.collect(2)
once = gc.get_freeze_count()
gc.collect(2)  # within SETTLE_EVERY_S: not again
clock[0] += server_app.SETTLE_EVERY_S
gc.collect(1)  # not a full collection: nothing
again = settler.freezes
gc.collect(2)
print(json.dumps({"frozen_before": frozen, "frozen_after": once, "freezes": [again, settler.freezes]}))
"""


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_serving_imports_nothing_after_the_heap_is_settled(tmp_path: Path) -> None:
    import json

    answer = json.loads(_run(SERVE_AFTER_SETTLING, str(tmp_path / "store.db")))
    assert all(200 <= code < 300 for code in answer["codes"]), answer["codes"]
    # A module named here is imported by a request path after the freeze: add it (or what
    # imports it) to spothop.server.app.WARM_MODULES.
    assert answer["imported"] == [], " ".join(answer["imported"])


def test_a_slow_full_collection_freezes_its_survivors_at_most_once_a_period() -> None:
    import json

    answer = json.loads(_run(FREEZE_ON_SLOW))
    assert answer["frozen_after"] >= answer["frozen_before"] + 1000  # the survivors, frozen
    assert answer["freezes"] == [1, 2]  # once, not again within the period, then again
