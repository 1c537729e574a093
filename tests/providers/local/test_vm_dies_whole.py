"""A local instance whose host process alone is SIGKILLed dies whole, as a VM does: its agent, the
worker the agent started (in a session of its own, deaf to SIGTERM) and the daemon that worker
double-forked (``setsid``) all end, without the cloud reading the instance; another instance's
processes and the test's own are untouched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import spothop
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local import isolation
from spothop.providers.local.processes import descendants
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.waiting import process_running, scaled, wait_for

WORLD = """\
isolation: "{mode}"
buckets: [{folder}, {source}]
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    launch_delay_s: 0
    locations: [us-east-1a]
    instance_types: [g5.xlarge]
    market:
      synthetic: {{mean_time_between_preemptions_s: 100000000, mean_outage_s: 600}}
"""

# The bootstrap command: an agent that starts the worker through spothop's own supervisor (a
# session of its own, PR_SET_PDEATHSIG), then waits.
AGENT = """\
import os, sys, time
from pathlib import Path
sys.path.insert(0, {source!r})
from spothop.agent.supervisor import Supervisor
out = Path(sys.argv[1])
worker = Supervisor([sys.executable, {worker!r}, str(out)], dict(os.environ), out / "worker.log")
worker.start()
(out / "agent.pid").write_text(str(os.getpid()))
while True:
    time.sleep(1)
"""

# The worker: deaf to SIGTERM; double-forks a daemon that calls setsid, deaf to SIGTERM too.
WORKER = """\
import os, signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
signal.signal(signal.SIGTERM, signal.SIG_IGN)
(out / "worker.pid").write_text(str(os.getpid()))
if os.fork() == 0:
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    (out / "daemon.pid.tmp").write_text(str(os.getpid()))
    os.rename(out / "daemon.pid.tmp", out / "daemon.pid")
while True:
    time.sleep(1)
"""


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _boot(provider: LocalProvider, out: Path) -> tuple[str, dict[str, int]]:
    """Launch an instance running the agent and its worker; the pids of its processes."""
    out.mkdir()
    (out / "worker.py").write_text(WORKER)
    source = str(Path(spothop.__file__).parent.parent)
    (out / "agent.py").write_text(AGENT.format(source=source, worker=str(out / "worker.py")))
    launched = provider.launch(
        LaunchRequest(
            instance_type="g5.xlarge",
            region="us-east-1",
            zone="us-east-1a",
            bootstrap_command=[sys.executable, str(out / "agent.py"), str(out)],
        )
    )
    instance_id = launched.instance_id
    names = ("agent", "worker", "daemon")

    def started() -> dict[str, int] | None:
        pids = {n: _pid(out / f"{n}.pid") for n in names}
        return {n: p for n, p in pids.items() if p} if all(pids.values()) else None

    pids = wait_for(started, scaled(30), what="the agent, its worker and the worker's daemon")
    row = provider.store.instance(instance_id)
    assert row is not None and row["host_pid"], row
    host = int(row["host_pid"])
    watchdog = int(Path(f"/proc/{host}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert watchdog != os.getpid()  # the host's parent is its watchdog, not the provider
    # Every process of the instance is below its watchdog, the daemon too (adopted by the host).
    below = set(descendants(watchdog))
    assert {host, *pids.values()} <= below, (pids, below)
    rest = {f"pid {pid}": pid for pid in below - {host, *pids.values()}}
    return instance_id, {"watchdog": watchdog, "host": host, **pids, **rest}


def _victim_and_bystander(
    mode: str, tmp_path: Path, world_file: Any, providers: list[LocalProvider]
) -> tuple[LocalProvider, tuple[str, dict[str, int]], tuple[str, dict[str, int]]]:
    """Two instances booted in a world of ``mode`` isolation (skipped where it cannot be): the
    one a test kills, and one that must not notice."""
    if mode == "required" and isolation.unavailable() is not None:
        pytest.skip(f"no isolation here: {isolation.unavailable()}")
    source = Path(spothop.__file__).parent.parent
    path = world_file(WORLD.format(mode=mode, folder=tmp_path, source=source))
    provider = LocalProvider("aws-sim", world=load_world(path), world_path=path)
    providers.append(provider)
    return provider, _boot(provider, tmp_path / "victim"), _boot(provider, tmp_path / "bystander")


def _all_end_and_the_bystander_lives(
    gone: dict[str, int], bystander: dict[str, int], what: str
) -> None:
    """Wait until every process of ``gone`` has ended; then every one of ``bystander`` runs."""
    wait_for(
        lambda: not any(process_running(pid) for pid in gone.values()),
        scaled(20),
        what=f"{what} to end ({gone})",
    )
    alive = {name: process_running(pid) for name, pid in bystander.items()}
    assert all(alive.values()), alive


@pytest.mark.parametrize("mode", ["off", "required"])
def test_killing_the_host_alone_ends_every_process_of_its_instance_and_nothing_else(
    mode: str, tmp_path: Path, world_file, providers: list[LocalProvider]
) -> None:
    provider, (victim_id, victim), (bystander_id, bystander) = _victim_and_bystander(
        mode, tmp_path, world_file, providers
    )
    loner = subprocess.Popen(["sleep", "600"], start_new_session=True)  # this machine's, no VM's
    try:
        os.kill(victim["host"], signal.SIGKILL)
        # Nothing reads the instance from here on: only the processes are watched.
        _all_end_and_the_bystander_lives(
            victim, bystander, "every process of the killed host's instance"
        )
        assert loner.poll() is None
    finally:
        loner.kill()
        loner.wait()
    row = provider.store.instance(bystander_id)
    assert row is not None and row["state"] == InstanceState.RUNNING.value
    # The cloud, when it next reads the killed instance, finds it failed: its host died.
    assert provider.describe(victim_id).state is InstanceState.FAILED


@pytest.mark.parametrize("mode", ["off", "required"])
def test_without_its_watchdog_the_clouds_next_read_ends_what_the_dead_host_left(
    mode: str, tmp_path: Path, world_file, providers: list[LocalProvider]
) -> None:
    """The watchdog SIGKILLed first (the host then dies of it): nothing powers the machine off, as
    for a host of an older spothop; the cloud's next read finds the host gone, fails the instance
    and kills every process left of it, the worker's setsid daemon too."""
    provider, (victim_id, victim), (bystander_id, bystander) = _victim_and_bystander(
        mode, tmp_path, world_file, providers
    )
    os.kill(victim["watchdog"], signal.SIGKILL)
    wait_for(lambda: not process_running(victim["host"]), scaled(20), what="the host to die")
    left = {name: pid for name, pid in victim.items() if process_running(pid)}
    assert left.keys() >= {"agent", "worker", "daemon"}, left  # orphans, until the cloud looks
    assert provider.describe(victim_id).state is InstanceState.FAILED
    _all_end_and_the_bystander_lives(left, bystander, "what the dead host left")
    assert provider.describe(bystander_id).state is InstanceState.RUNNING
