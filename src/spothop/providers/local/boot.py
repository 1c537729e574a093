"""Starting one local instance: the file its host reads, the cloud's record of it, its host process.

:meth:`~spothop.providers.local.provider.LocalProvider.launch` decides an
instance (its place, market, rate, pool) as a :class:`NewInstance`, writes
its directory and its record, and starts its host here.

- :meth:`NewInstance.host_spec` is what the host (:mod:`.host`) reads from
  ``instance.json`` in the instance's directory: the cloud and its protocol,
  the place, the market (spot or not, the rate at launch), the cloud's
  notice lead, advance notice and launch delay, the bootstrap command and
  its environment, the world file and the cloud's root, whether it runs
  isolated and what its root shows of this machine (the world's image and
  buckets). Nothing else of the launching process reaches the instance; what
  it runs is its ``user-data``, the boot script the provider writes there
  once the host serves the metadata endpoint (:mod:`.userdata`).
- :meth:`NewInstance.row` is the cloud's record of it
  (:class:`~.store.CloudStore`): ``pending``, nothing billed yet, its name,
  tags and reserved pool.
- :func:`start_host` starts ``python -m spothop.providers.local.host DIR`` in a
  session of its own, under its watchdog (:mod:`.watchdog`: whatever ends the
  host, a SIGKILL included, ends every process of the instance, as a VM dies
  whole), its output in ``host.log`` there, and returns once the
  host serves the metadata endpoint (the record has a ``metadata_url``). A
  host that exits first, or does not serve within
  :data:`HOST_READY_TIMEOUT_S` (wall), is killed, the record reads
  ``failed`` ("host did not start") and a
  :class:`~spothop.errors.ProviderError` with the cloud's internal-error code
  carries the end of its log.
- :func:`host_never_started` tells a record whose host can no longer start:
  the launching process (``launcher_pid`` in ``instance.json``) died between
  writing the record and starting the host (a controller SIGKILLed mid-launch),
  or the host's time to start has long passed. Such an instance is failed when
  listed ("its host never started"), as a cloud fails a VM that cannot boot,
  so that whoever adopts it by its tags replaces it instead of waiting for a
  boot that will not come.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spothop.errors import ProviderError
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.metadata.codes import ErrorCodes
from spothop.providers.local.processes import pid_alive
from spothop.providers.local.store import CloudStore
from spothop.providers.local.world_spec import CloudSpec
from spothop.resources.offering import Offering

HOST_READY_TIMEOUT_S = 20.0  # a host must serve its metadata endpoint within this (wall) time


@dataclass(frozen=True)
class NewInstance:
    """One instance a launch decided on, before its host runs."""

    instance_id: str
    cloud: CloudSpec
    request: LaunchRequest
    offering: Offering
    price_usd_per_hour: float
    launched_at: float
    reservation: str | None  # the reserved pool's id; None: spot or on-demand

    def host_spec(
        self,
        world_path: Path | None,
        cloud_root: Path,
        *,
        isolated: bool = False,
        image_paths: tuple[Path, ...] = (),
        buckets: tuple[Path, ...] = (),
    ) -> dict[str, Any]:
        """What the host reads from ``instance.json`` (JSON-ready)."""
        cloud, offering, request = self.cloud, self.offering, self.request
        return {
            "instance_id": self.instance_id,
            "cloud": cloud.name,
            "protocol": cloud.protocol,
            "region": offering.region,
            "zone": offering.zone,
            "location": offering.location,
            "instance_type": offering.instance_type,
            "spot": request.spot,
            "price_usd_per_hour": self.price_usd_per_hour,
            "launched_at": self.launched_at,
            "notice_lead_time_s": cloud.notice_lead_time_s,
            "advance_notice_s": cloud.advance_notice_s,
            "launch_delay_s": cloud.launch_delay_s,
            "command": list(request.bootstrap_command),
            "env": dict(request.env),
            "world_path": str(world_path.resolve()) if world_path else None,
            "cloud_root": str(cloud_root),
            "reservation": self.reservation,
            "isolated": isolated,
            "image_paths": [str(p) for p in image_paths],
            "buckets": [str(p) for p in buckets],
            "launcher_pid": os.getpid(),  # the process that starts the host (host_never_started)
        }

    def row(self, directory: Path) -> dict[str, Any]:
        """The cloud's record of the instance as launched (``CloudStore.add_instance``)."""
        offering, request = self.offering, self.request
        return {
            "instance_id": self.instance_id,
            "cloud": self.cloud.name,
            "region": offering.region,
            "zone": offering.zone,
            "instance_type": offering.instance_type,
            "spot": request.spot,
            "state": InstanceState.PENDING.value,
            "launched_at": self.launched_at,
            "price_usd_per_hour": self.price_usd_per_hour,
            "billed_seconds": 0.0,
            "cost_micro_usd": 0,
            "directory": str(directory),
            "name": request.name,
            "tags": dict(request.tags),
            "terminate_requested": False,
            "reservation": self.reservation,
        }


def start_host(
    store: CloudStore, instance_id: str, directory: Path, cloud: str, codes: ErrorCodes
) -> None:
    """Start the instance's host; return once it serves its metadata endpoint (module docstring)."""
    log = open(directory / "host.log", "ab")  # noqa: SIM115 - the child keeps it
    process = subprocess.Popen(
        [sys.executable, "-m", "spothop.providers.local.watchdog", str(directory)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + HOST_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        row = store.instance(instance_id)
        if row and row["metadata_url"]:
            return
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    tail = (directory / "host.log").read_text(errors="replace")[-2000:]
    store.update_instance(
        instance_id, state=InstanceState.FAILED.value, end_reason="host did not start"
    )
    raise ProviderError(
        cloud,
        codes.internal_error,
        f"instance host did not start: {tail.strip() or 'no output'}",
    )


def host_never_started(directory: Path, *, now_wall_s: float | None = None) -> bool:
    """True when the host of the (live, hostless) instance in ``directory`` will never start.

    Its launching process is gone (a zombie counts as gone), or its ``instance.json`` was
    written more than twice :data:`HOST_READY_TIMEOUT_S` (wall) ago, after which the launcher
    has given up on it anyway. A directory without that file (the record came first) is not
    judged here.
    """
    spec_file = directory / "instance.json"
    try:
        written_s = spec_file.stat().st_mtime
        launcher = json.loads(spec_file.read_text()).get("launcher_pid")
    except (OSError, ValueError):
        return False
    now = time.time() if now_wall_s is None else now_wall_s
    if now - written_s > 2 * HOST_READY_TIMEOUT_S:
        return True
    return isinstance(launcher, int) and not pid_alive(launcher)
