"""The worker an instance runs: ``setup`` and ``run`` each in ``bash``, each with its own exit status.

Real processes (the worker's own argv, without an agent): an ``exit 0`` ending
``setup`` ends only ``setup``; bash-only syntax runs in both; a failing
``setup`` ends the worker with its status, says so in the log, and ``run``
never starts; the texts reach the shell whole, whatever quotes they hold.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from spothop.jobs.launcher import SETUP_FAILED_MARK, WorkerCommand, worker_command

BASH_ONLY_RUN = """\
if [[ -n "$GREETING" && "$GREETING" == hel* ]]; then
  source /dev/null
  declare -A seen=([run]=yes)
  echo "run ran: ${seen[run]} $GREETING" > ran.txt
fi
"""


def _run(work: WorkerCommand, log: Path, **env: str) -> int:
    full = {"PATH": "/usr/local/bin:/usr/bin:/bin", **env}
    return subprocess.run(worker_command(work, log), env=full, timeout=60).returncode


def test_an_exit_0_ending_setup_does_not_skip_a_bash_only_run(tmp_path: Path) -> None:
    log = tmp_path / "attempt.log"
    work = WorkerCommand(
        setup='echo "setting up"\n[[ 1 -eq 1 ]] && echo "setup is bash"\nexit 0\necho never',
        run=BASH_ONLY_RUN,
        workdir=str(tmp_path),
    )
    assert _run(work, log, GREETING="hello") == 0
    assert (tmp_path / "ran.txt").read_text() == "run ran: yes hello\n"
    text = log.read_text()
    assert "setting up\nsetup is bash\n" in text and "never" not in text


def test_a_failing_setup_fails_the_worker_with_its_status_and_run_never_starts(
    tmp_path: Path,
) -> None:
    log = tmp_path / "attempt.log"
    work = WorkerCommand(
        setup="echo installing; exit 7", run="touch ran.txt", workdir=str(tmp_path)
    )
    assert _run(work, log) == 7
    assert not (tmp_path / "ran.txt").exists()
    assert f"{SETUP_FAILED_MARK} 7; run was not started" in log.read_text()


def test_run_gets_its_own_status_and_starts_in_the_workdir_whatever_setup_did(
    tmp_path: Path,
) -> None:
    log = tmp_path / "attempt.log"
    work = WorkerCommand(
        setup="cd /; export FROM_SETUP=1",
        run='pwd > where.txt; echo "${FROM_SETUP:-unset}" >> where.txt; exit 3',
        workdir=str(tmp_path),
    )
    assert _run(work, log) == 3
    assert (tmp_path / "where.txt").read_text() == f"{tmp_path}\nunset\n"


def test_texts_with_quotes_and_dollars_reach_the_shell_whole(tmp_path: Path) -> None:
    log = tmp_path / "attempt.log"
    run = """echo 'single' "double $((1 + 2))" '$HOME' \\$x > out.txt"""
    work = WorkerCommand(run=run, workdir=str(tmp_path))
    assert _run(work, log) == 0
    assert (tmp_path / "out.txt").read_text() == "single double 3 $HOME $x\n"


def test_no_setup_runs_run_alone(tmp_path: Path) -> None:
    log = tmp_path / "attempt.log"
    assert _run(WorkerCommand(run="echo only run", setup="  \n"), log) == 0
    assert log.read_text() == "only run\n"
