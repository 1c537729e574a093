"""``status`` shows why an instance's agent was lost: the rule's line and the console's tail."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore

DETAIL = (
    "its agent did not register within the boot deadline (600 s; launched 601 s ago);"
    " console: spothop: installing | curl: (7) Failed to connect to the control plane"
)


def test_status_shows_a_lost_agents_detail(cli: Callable[..., Any], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with JobStore(url) as store:
        job_id = store.create_job(load_job({"name": "silent", "run": "true"}))
        attempt = store.add_attempt(
            job_id,
            0,
            provider="fake",
            region="fake-1",
            zone="fake-1a",
            instance_type="gpu.a100x1",
            market_kind="spot",
            price_usd_per_hour=0.5,
        )
        store.update_attempt(attempt.attempt_id, instance_id="i-silent")
        store.update_attempt(
            attempt.attempt_id,
            state=AttemptState.ENDED,
            end_reason=EndReason.AGENT_LOST,
            error_message=DETAIL,
        )
    shown = cli("status", job_id, "--store", url)
    flat = " ".join(shown.out.split())
    assert shown.code == 0 and "instance i-silent lost its agent:" in flat
    assert "curl: (7) Failed to connect to the control plane" in flat
