"""The worker an instance runs: ``setup`` and ``run`` each in ``bash``, each with its own exit status.

Real processes (the worker's own argv, without an agent): an ``exit 0`` ending
``setup`` ends only ``setup``; bash-only syntax runs in both; a failing
``setup`` ends the worker with its status, says so in the log, and ``run``
never starts; the texts reach the shell whole, whatever quotes they hold;
SkyPilot's task variables carry spothop's meaning.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from spothop.jobs.launcher import (
    SETUP_FAILED_MARK,
    SKYPILOT_CLUSTER_INFO,
    SKYPILOT_NODE_IPS,
    SKYPILOT_NODE_RANK,
    SKYPILOT_NUM_GPUS_PER_NODE,
    SKYPILOT_NUM_NODES,
    SKYPILOT_SETUP_NODE_IPS,
    SKYPILOT_SETUP_NODE_RANK,
    SKYPILOT_TASK_ID,
    GroupEnv,
    WorkerCommand,
    bootstrap,
    worker_command,
)
from spothop.wire.group import Rendezvous
from spothop.wire.logs import read_worker_phase

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
    assert read_worker_phase(tmp_path) == "setup"  # what the agent reports the exit with


def test_a_restarted_worker_runs_setup_once_per_node_and_run_each_time(tmp_path: Path) -> None:
    log = tmp_path / "attempt.log"
    work = WorkerCommand(
        setup="echo s >> setups.txt", run="echo r >> runs.txt; exit 3", workdir=str(tmp_path)
    )
    assert [_run(work, log), _run(work, log)] == [3, 3]  # the agent restarting a failed worker
    assert (tmp_path / "setups.txt").read_text() == "s\n"
    assert (tmp_path / "runs.txt").read_text() == "r\nr\n"


def test_a_failed_setup_runs_again_on_the_next_start(tmp_path: Path) -> None:
    log = tmp_path / "attempt.log"
    work = WorkerCommand(
        setup="echo s >> setups.txt; exit 5", run="touch ran.txt", workdir=str(tmp_path)
    )
    assert [_run(work, log), _run(work, log)] == [5, 5]
    assert (tmp_path / "setups.txt").read_text() == "s\ns\n" and not (tmp_path / "ran.txt").exists()


def test_the_driver_writes_each_phase_it_starts_beside_the_log(tmp_path: Path) -> None:
    log = tmp_path / "attempt.log"
    work = WorkerCommand(setup="true", run="exit 4", workdir=str(tmp_path))
    assert _run(work, log) == 4
    assert read_worker_phase(tmp_path) == "run"


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


def test_a_group_node_gets_skypilot_variables_of_its_generation(tmp_path: Path) -> None:
    group = GroupEnv(nnodes=3, nproc_per_node=4, generation=2, master_port=12345)
    boot = bootstrap(
        WorkerCommand(run="true", envs={"SKYPILOT_NODE_RANK": "9"}),
        job_id="j-000001",
        node=2,
        attempt_id="a-00000001",
        provider="aws",
        store_url="sqlite:///x.db",
        home=tmp_path,
        group=group,
        region="us-east-1",
        zone="us-east-1a",
    )
    env = boot.env
    assert env[SKYPILOT_NODE_RANK] == env[SKYPILOT_SETUP_NODE_RANK] == "2"  # spothop's wins
    assert env[SKYPILOT_NUM_NODES] == "3" and env[SKYPILOT_NUM_GPUS_PER_NODE] == "4"
    # No node has an address at launch: the agent sets the addresses from the group's rendezvous.
    assert SKYPILOT_NODE_IPS not in env and SKYPILOT_SETUP_NODE_IPS not in env
    met = Rendezvous(
        master_addr="10.0.0.5",
        master_port=12345,
        node_rank=2,
        nnodes=3,
        nproc_per_node=4,
        generation=2,
        node_addrs=("10.0.0.5", "10.0.0.6", "10.0.0.7"),
    ).env()
    assert met[SKYPILOT_NODE_IPS] == met[SKYPILOT_SETUP_NODE_IPS] == "10.0.0.5\n10.0.0.6\n10.0.0.7"
    assert {k: met[k] for k in (SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES)} == {
        k: env[k] for k in (SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES)
    }
    assert env[SKYPILOT_TASK_ID] == "j-000001"
    assert json.loads(env[SKYPILOT_CLUSTER_INFO]) == {
        "cluster_name": "j-000001",
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
    }


def test_a_single_node_finds_its_address_and_gpus_on_the_node(tmp_path: Path) -> None:
    boot = bootstrap(
        WorkerCommand(run='printf "%s|%s" "$SKYPILOT_NODE_IPS" "$SKYPILOT_NUM_GPUS_PER_NODE"'),
        job_id="j-000002",
        node=0,
        attempt_id="a-00000002",
        provider="local",
        store_url="sqlite:///x.db",
        home=tmp_path,
    )
    assert SKYPILOT_NODE_IPS not in boot.env and SKYPILOT_NUM_GPUS_PER_NODE not in boot.env
    worker = boot.command[boot.command.index("--") + 1 :]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", **boot.env}
    boot.log_path.parent.mkdir(parents=True)  # the agent's --state-dir, which the agent makes
    assert subprocess.run(worker, env=env, timeout=60).returncode == 0
    ips, gpus = boot.log_path.read_text().split("|")
    assert ips and "\n" not in ips and int(gpus) >= 0
    counted = bootstrap(
        WorkerCommand(run="true"),
        job_id="j-000002",
        node=0,
        attempt_id="a-00000003",
        provider="local",
        store_url="sqlite:///x.db",
        home=tmp_path,
        gpu_count=8,
    )
    assert counted.env[SKYPILOT_NUM_GPUS_PER_NODE] == "8"
