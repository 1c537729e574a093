"""A job store in the test's own home, with a task job that ran once and was preempted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore

PLACE = {"provider": "p1", "region": "r1", "zone": "z1", "instance_type": "t1"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JobStore]:
    with JobStore(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        yield opened


def preempted_job(store: JobStore, name: str = "svc") -> str:
    """A task job whose one attempt ran 3000 s at 0.5 USD/h, then was preempted."""
    job_id = store.create_job(load_job({"name": name, "run": "true"}))
    attempt = store.add_attempt(job_id, 0, **PLACE, market_kind="spot", price_usd_per_hour=0.5)
    store.update_attempt(
        attempt.attempt_id, instance_id="i-1", state=AttemptState.RUNNING, running_unix_s=1000.0
    )
    store.update_attempt(
        attempt.attempt_id,
        state=AttemptState.ENDED,
        end_reason=EndReason.PREEMPTED,
        ended_unix_s=4000.0,
    )
    return job_id
