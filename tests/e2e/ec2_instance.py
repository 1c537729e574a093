"""One EC2 instance of the rehearsal, played on this machine: ``python -m tests.e2e.ec2_instance DIR``.

What EC2 and the instance's own OS do, for the instance named in
``DIR/instance.json`` (written by :class:`tests.e2e.ec2_rehearsal.Ec2Rehearsal`):

1. cloud-init: the user-data EC2 was given, read back through
   ``DescribeInstanceAttribute`` (base64, as EC2 returns it);
2. IMDS: spothop's AWS metadata endpoint for this instance id
   (:class:`~spothop.providers.local.metadata.MetadataServer`), on this
   machine's loopback. EC2 routes the link-local address
   ``169.254.169.254`` to the instance's own IMDS; no such route exists here,
   so that address in the user-data is rewritten to this endpoint's URL (the
   only change made to what EC2 was given);
3. the VM: the user-data booted isolated (:class:`~spothop.providers.local.vm.Vm`:
   its own root, the image's Python as the AMI's, its console in
   ``DIR/console.log``), this process the subreaper of all it starts;
4. until the instance ends, every tick:
   - a spot interruption (``DIR/preempt``: ``{"notice_at", "terminate_at"}``,
     written by the rehearsal beside EC2's marking of the spot request): the
     endpoint shows ``spot/instance-action`` at once; at ``terminate_at``
     every process is killed and the instance terminated in moto (as EC2
     reclaims it: no grace beyond the notice);
   - the instance terminated in moto (spothop's cancel, the controller): a
     shutdown, SIGTERM to every process, then SIGKILL after a short grace;
   - the agent unit exiting: the OS shuts down, and EC2 terminates the
     instance (``InstanceInitiatedShutdownBehavior: terminate``), after any
     pending notice's deadline;
   - the boot script ending without starting the agent unit: nothing (a VM
     whose cloud-init failed stays up, billed, its console the only clue).

The outcome goes to ``DIR/outcome`` (one line), this process's log to ``DIR/host.log``.
"""

from __future__ import annotations

import base64
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from spothop.providers.aws.userdata import IMDS_URL
from spothop.providers.local.metadata import InstanceMetadata, MetadataServer, NoticeState
from spothop.providers.local.processes import become_subreaper
from spothop.providers.local.vm import Vm

TICK_S = 0.1
CLOUD_POLL_S = 0.5  # how often the instance looks at moto for its own state
SHUTDOWN_GRACE_S = 2.0  # SIGTERM to SIGKILL on a shutdown (EC2 gives the OS a little time)
ENDED_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


class Instance:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.spec: dict[str, Any] = json.loads((directory / "instance.json").read_text())
        self.id: str = self.spec["instance_id"]
        self.vm = Vm(directory)
        self.notices = NoticeState()
        self.terminate_at: float | None = None
        self.stop = False
        import boto3

        self.ec2 = boto3.client(
            "ec2", region_name=self.spec["region"], endpoint_url=self.spec["endpoint_url"]
        )

    def say(self, line: str) -> None:
        with (self.directory / "host.log").open("a") as log:
            log.write(f"{time.time():.3f} {line}\n")

    def user_data(self) -> str:
        answer = self.ec2.describe_instance_attribute(InstanceId=self.id, Attribute="userData")
        return base64.b64decode(answer["UserData"]["Value"]).decode("utf-8")

    def cloud_state(self) -> str:
        answer = self.ec2.describe_instances(InstanceIds=[self.id])
        return str(answer["Reservations"][0]["Instances"][0]["State"]["Name"])

    def run(self) -> str:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stop", True))
        become_subreaper()
        server = MetadataServer(
            "aws",
            InstanceMetadata(
                instance_id=self.id,
                instance_type=self.spec["instance_type"],
                region=self.spec["region"],
                zone=self.spec["zone"],
                provider="aws",
                launch_time=float(self.spec["launch_time"]),
                spot=bool(self.spec["spot"]),
            ),
            self.notices,
        )
        server.start()
        try:
            # The link-local route EC2 gives every instance, played by a rewrite (docstring, 2).
            user_data = self.user_data().replace(IMDS_URL, server.url)
            self.vm.boot(
                user_data,
                isolated=bool(self.spec["isolated"]),
                image=[Path(p) for p in self.spec["image_paths"]],
                buckets=[Path(p) for p in self.spec["buckets"]],
            )
            self.say(f"booted; IMDS at {server.url}")
            return self._watch()
        finally:
            self.vm.kill(signal.SIGKILL)
            server.stop()

    def _watch(self) -> str:
        looked = 0.0
        boot_over = False
        while True:
            now = time.time()
            if self.stop:
                self.vm.kill(signal.SIGTERM, SHUTDOWN_GRACE_S)
                return "stopped by the rehearsal"
            self._notice()
            if self.terminate_at is not None and now >= self.terminate_at:
                self.vm.kill(signal.SIGKILL)
                self.ec2.terminate_instances(InstanceIds=[self.id])
                return "preempted: spot capacity reclaimed at the notice's deadline"
            if now - looked >= CLOUD_POLL_S:
                looked = now
                state = self.cloud_state()
                if state in ENDED_STATES:
                    self.vm.kill(signal.SIGTERM, SHUTDOWN_GRACE_S)
                    return f"{state} by the cloud's API"
            if not boot_over and self.terminate_at is None:
                ended = self.vm.ended()
                if ended is not None and self.vm.unit_pid is None:
                    boot_over = True  # cloud-init ended without the agent: the VM stays up
                    self.say(ended.reason)
                elif ended is not None:
                    self.say(f"{ended.reason}: the OS shuts down")
                    self.vm.kill(signal.SIGTERM, SHUTDOWN_GRACE_S)
                    self.ec2.terminate_instances(InstanceIds=[self.id])
                    return "shut down: " + ended.reason
            time.sleep(TICK_S)

    def _notice(self) -> None:
        if self.terminate_at is not None:
            return
        path = self.directory / "preempt"
        if not path.exists():
            return
        try:
            notice = json.loads(path.read_text())
        except ValueError:  # being written: next tick
            return
        self.notices.schedule_termination(notice["notice_at"], notice["terminate_at"])
        self.terminate_at = float(notice["terminate_at"])
        self.say(f"spot interruption notice; terminated at {self.terminate_at:.3f}")


def main(argv: list[str]) -> int:
    directory = Path(argv[0])
    instance = Instance(directory)
    try:
        outcome = instance.run()
    except Exception as exc:
        outcome = f"the rehearsal's instance failed: {type(exc).__name__}: {exc}"
        instance.say(outcome)
        (directory / "outcome").write_text(outcome + "\n")
        raise
    instance.say(outcome)
    (directory / "outcome").write_text(outcome + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
