"""``setup`` and ``run`` on a real instance: each in ``bash``, each with its own exit status.

A job succeeds only when its ``run`` ran: an ``exit 0`` ending ``setup`` used
to end the one joined ``sh`` script before ``run`` started, and the job was
reported succeeded. A failing ``setup`` fails the attempt, and its log says so.
"""

from __future__ import annotations

import json

import yaml

from spothop.jobs.launcher import SETUP_FAILED_MARK
from tests.jobs.e2e.conftest import Harness

SKYPILOT_TASK = {
    "name": "bash-task",
    "resources": {"use_spot": True},  # a SkyPilot task file, as its authors write them
    "setup": 'echo "setting up"\n[[ -d / ]] && echo "setup in bash"\nexit 0\n',
    "run": (
        'if [[ "$SPOTHOP_NODE_RANK" == 0 ]]; then\n'
        '  source /dev/null\n  echo "run ran" > "$MARK"\nfi\n'
    ),
}


def test_an_exit_0_ending_setup_still_runs_a_bash_only_run(harness: Harness) -> None:
    h = harness
    mark = h.tmp / "ran.txt"
    path = h.tmp / "task.yaml"
    path.write_text(yaml.safe_dump({**SKYPILOT_TASK, "envs": {"MARK": str(mark)}}))
    code, out = h.cli("launch", str(path), "--json", *h.launch_args())
    assert code == 0, out
    done = json.loads(out)
    assert done["state"] == "succeeded"
    assert mark.read_text() == "run ran\n"  # the job succeeded because its run ran
    code, text = h.cli("logs", done["job_id"], "--store", h.store_url)
    assert code == 0 and "setting up\nsetup in bash\n" in text


def test_a_failing_setup_fails_the_attempt_and_run_never_starts(harness: Harness) -> None:
    h = harness
    mark = h.tmp / "ran.txt"
    path = h.tmp / "broken.yaml"
    spec = {
        "name": "broken-setup",
        "setup": "echo installing; exit 9",
        "run": f"touch {mark}",
        "max_retries": 0,
    }
    path.write_text(yaml.safe_dump(spec))
    code, out = h.cli("launch", str(path), "--json", *h.launch_args())
    assert code == 1, out
    failed = json.loads(out)
    assert failed["state"] == "failed"
    assert [i["end_reason"] for i in failed["instances"]] == ["worker_failed"]
    assert [i["end_detail"] for i in failed["instances"]] == ["setup failed (exit 9)"]
    assert not mark.exists()
    code, text = h.cli("logs", failed["job_id"], "--store", h.store_url)
    assert f"{SETUP_FAILED_MARK} 9; run was not started" in text
    code, shown = h.cli("status", failed["job_id"], "--store", h.store_url)
    assert "setup failed (exit 9)" in " ".join(shown.split())
