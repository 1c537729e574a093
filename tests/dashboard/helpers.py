"""Shared by the dashboard's and the metrics' e2e tests."""

from __future__ import annotations

from spothop.jobs.lifecycle import AttemptState
from spothop.providers.base import Instance
from tests.jobs.e2e.conftest import Harness
from tests.waiting import wait_for


def kept_instance(h: Harness, job_id: str, timeout_s: float = 60) -> Instance:
    """The job's one running instance that its store keeps (a parallel failover launches
    several and terminates all but the first to run: those are not the job's)."""
    h.wait_state(job_id, {"running"}, timeout_s, what="the job running")
    store = h.store()

    def kept() -> list[Instance] | None:
        ids = {a.instance_id for a in store.attempts(job_id) if a.state is AttemptState.RUNNING}
        found = [i for i in h.running(job_id) if i.instance_id in ids]
        return found if len(found) == 1 else None

    try:
        return wait_for(kept, timeout_s, what="the job's one kept instance", interval_s=0.1)[0]
    finally:
        store.close()
