"""``status`` and ``jobs`` show a refused launch's whole message (the fix included), not its code only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore

FIX = "set SPOTHOP_AWS_IMAGE_ID to an AMI with NVIDIA drivers and Python 3.11+"
MESSAGE = f"aws: no AMI to launch in us-east-1: the public parameter could not be read; {FIX}"
REASON = f"no allowed provider can launch this job: aws refused: {MESSAGE}"


def _refused_job(url: str) -> str:
    with JobStore(url) as store:
        job_id = store.create_job(load_job({"name": "no-ami", "run": "true"}))
        attempt = store.add_attempt(
            job_id,
            0,
            provider="aws",
            region="us-east-1",
            zone="us-east-1a",
            instance_type="g5.xlarge",
            market_kind="spot",
            price_usd_per_hour=0.5,
        )
        store.update_attempt(
            attempt.attempt_id,
            state=AttemptState.ENDED,
            end_reason=EndReason.LAUNCH_REFUSED,
            error_code="ConfigError",
            error_message=MESSAGE,
        )
        store.transition(job_id, JobState.FAILED, "job_failed", reason=REASON)
        store.create_job(load_job({"name": "waiting", "run": "true"}))
    return job_id


def test_status_and_jobs_show_the_refusal_and_its_fix(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    job_id = _refused_job(url)
    shown = cli("status", job_id, "--store", url)
    flat = " ".join(shown.out.split())
    assert shown.code == 0 and FIX in flat
    assert "launch refused in aws/us-east-1a g5.xlarge" in flat
    data = cli("status", job_id, "--store", url, "--json").json()
    (failure,) = data["launch_failures"]
    assert failure["refused"] and failure["error_message"] == MESSAGE
    listed = cli("jobs", "--store", url)
    flat = " ".join(listed.out.split())
    assert listed.code == 0 and f"{job_id} failed: {REASON}" in flat
    assert flat.count(" failed: ") == 1  # only the failed job's reason is noted in full
