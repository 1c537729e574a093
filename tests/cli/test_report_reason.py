"""``spothop report JOB`` says why the job ended as it did (its budget reached, its deadline
missed), beside what it cost: the reason the controller recorded on the job."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from spothop.jobs.lifecycle import JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore

REASON = "budget_usd reached: $0.0021 spent of $0.002; its instances are stopped"


def test_the_report_says_the_budget_stopped_the_job(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with JobStore(url) as store:
        job_id = store.create_job(load_job({"name": "b", "run": "true", "budget_usd": 0.002}))
        store.transition(job_id, JobState.FAILED, "job_failed", reason=REASON)
    data = cli("report", job_id, "--store", url, "--json").json()
    assert data["state"] == "failed" and data["reason"] == REASON
    shown = cli("report", job_id, "--store", url)
    assert shown.code == 0 and f"reason: {REASON}" in " ".join(shown.out.split())
