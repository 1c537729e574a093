"""A task's live view shows its training step: the worker's ``sdk.heartbeat(step=)`` reaches the
store through its agent's heartbeat, and ``status --json`` carries it as ``progress``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from spothop.cli.jobs import _progress
from tests.jobs.e2e import numpy_train
from tests.jobs.e2e.conftest import Harness, script_job
from tests.waiting import wait_for

SCRIPT = Path(numpy_train.__file__)


def test_the_live_view_shows_the_training_step_of_a_task(harness: Harness) -> None:
    h = harness
    spec: dict[str, Any] = {
        "name": "steps",
        "market": "spot",
        "checkpoint": {"url": str(h.tmp / "ckpt")},
        # Long enough never to finish here: the test cancels it once a step is seen.
        **script_job(SCRIPT, 10000000, h.tmp / "final.bin", "--step-sleep", 0.01),
    }
    job_id = h.launch(spec)

    def stepped() -> dict[str, Any] | None:
        data = h.status(job_id)
        step = (data.get("progress") or {}).get("step")
        return data if isinstance(step, int) and step > 0 else None

    data = wait_for(stepped, 60, what="a training step in status --json", interval_s=0.5)
    assert data["state"] == "running"
    assert "shards_done" not in data["progress"]  # a task has no shards
    console = Console(record=True, width=120)
    console.print(_progress(data))
    assert f"training step: {data['progress']['step']}" in console.export_text()
    code, _ = h.cli("cancel", job_id, "--store", h.store_url)
    assert code == 0
    h.wait_state(job_id, {"cancelled"}, 60, what="the task to be cancelled")
