"""A full rehearsal on EC2's API: the real AWS adapter against moto's server, its instances booted here.

moto keeps EC2's records but runs nothing. :class:`Ec2Rehearsal` plays the
rest, from outside spothop, with what the cloud itself gives:

- every instance moto reports started (``pending``/``running``, launched by
  spothop: it has the ``spothop-token`` tag) is booted by a process of its
  own (:mod:`tests.e2e.ec2_instance`): its user-data read back through
  ``DescribeInstanceAttribute``, run isolated as a local instance, with
  spothop's AWS metadata endpoint for that instance id (the link-local
  address in the user-data rewritten to it: the route EC2 gives);
- :meth:`Ec2Rehearsal.preempt`: a spot interruption as EC2 gives one — the
  spot request marked for termination (the API's view,
  :meth:`~tests.providers.aws.moto_cloud.Ec2Market.interrupt`), the
  endpoint's ``spot/instance-action`` (the instance's view) with a deadline of
  :data:`NOTICE_S` (EC2 gives 2 min; the endpoint shows the time it uses), and
  at the deadline the instance killed and terminated in moto, which then
  reports it ended by ``Server.SpotInstanceTermination`` (EC2's reason);
- an instance whose agent unit exits shuts down (terminated in moto: the
  launch's ``InstanceInitiatedShutdownBehavior``); one moto shows terminated
  (cancel, the controller) has its processes killed;
- ``GetConsoleOutput`` answered from the instance's ``console.log`` (moto
  answers a canned kernel log), base64 as EC2 does.

The control plane is spothop's agent API as a process of its own, on this
machine's non-loopback address (:func:`host_address`): spothop refuses a
loopback control plane for a cloud whose instances do not share its host's
network, and EC2's never do. The controller runs in the test's process (so
the EC2 market's hooks of :mod:`tests.providers.aws.moto_cloud` apply to its
provider's client) with that agent API's URL and the wheel it serves.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

from spothop.providers.aws import AwsProvider
from spothop.providers.local import isolation
from spothop.providers.records import TOKEN_TAG
from tests.providers.aws.moto_cloud import REGION, Ec2Market

REPO = Path(__file__).resolve().parents[2]
NOTICE_S = 15.0  # the rehearsal's spot notice (EC2: 120 s); the endpoint shows this deadline
POLL_S = 0.2  # how often the rehearsal looks for instances moto started
STOP_TIMEOUT_S = 15.0
PREEMPTION_REASON = {
    "Code": "Server.SpotInstanceTermination",
    "Message": "Server.SpotInstanceTermination: Spot instance termination",
}


def host_address() -> str:
    """This machine's non-loopback IPv4 address (the one its default route leaves by).

    A UDP ``connect`` sends nothing: it only makes the kernel pick the source
    address for that destination. Only a loopback address: an error saying so.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1 (RFC 5737): never answered
            address = str(probe.getsockname()[0])
        except OSError as exc:
            raise RuntimeError(
                f"the EC2 rehearsal needs a non-loopback address for its control plane: {exc}"
            ) from None
    if address.startswith("127.") or address == "0.0.0.0":
        raise RuntimeError(
            "the EC2 rehearsal needs a non-loopback address for its control plane (spothop "
            f"refuses a loopback one for EC2); this machine's route gives only {address}"
        )
    return address


@dataclass
class AgentApi:
    """spothop's agent API as a process of its own on ``url`` (a non-loopback address)."""

    url: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def agent_api(store_url: str, queue_url: str, log: Path) -> Iterator[AgentApi]:
    """The agent API over ``store_url`` on this machine's address, its output in ``log``."""
    address = host_address()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, 0))
    sock.listen(64)
    url = f"http://{address}:{sock.getsockname()[1]}"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "spothop.server.agent_serve", "--store", store_url),
                *("--queue-url", queue_url, "--fd", str(sock.fileno())),
            ],
            pass_fds=[sock.fileno()],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    sock.close()
    api = AgentApi(url, process)
    try:
        deadline = time.monotonic() + 60
        while not _answers(f"{url}/healthz"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the agent API did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield api
    finally:
        api.stop()


def _answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@dataclass
class Booted:
    """One instance the rehearsal booted: its folder and its process."""

    instance_id: str
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def outcome(self) -> str | None:
        path = self.directory / "outcome"
        return path.read_text().strip() if path.exists() else None


@dataclass
class Ec2Rehearsal:
    """The instances of moto's EC2 at ``endpoint_url``, booted in ``folder`` (module docstring).

    ``market``: the EC2 market on the controller's provider (its spot requests
    marked here); ``buckets``: folders every instance sees at their own path
    (S3's stand-in); ``isolated``: boot in a mount namespace of their own.
    """

    endpoint_url: str
    folder: Path
    market: Ec2Market
    buckets: list[Path] = field(default_factory=list)
    isolated: bool = True
    booted: dict[str, Booted] = field(default_factory=dict)
    preempted: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=self.endpoint_url)
        reason = isolation.unavailable()
        if self.isolated and reason is not None:
            isolation.warn_unisolated(reason)
            self.isolated = False

    # -- the cloud's side, on the controller's provider --------------------------------

    def attach(self, provider: AwsProvider) -> None:
        """Hooks on ``provider``'s EC2 client: the console, and the reason a preempted instance ended."""
        events = provider.client(REGION).meta.events
        events.register("before-call.ec2.GetConsoleOutput", self._console_output)
        events.register("after-call.ec2.DescribeInstances", self._reasons)

    def _console_output(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> Any:
        asked = context.get("spothop_params") or params.get("body") or {}  # Ec2Market's record
        instance_id = str(asked.get("InstanceId", ""))
        booted = self.booted.get(instance_id)
        text = isolation.console_text(booted.directory) if booted is not None else ""
        return AWSResponse("https://ec2.amazonaws.com/", 200, {}, None), {
            "InstanceId": instance_id,
            "Output": base64.b64encode(text.encode("utf-8")).decode("ascii"),
            "Timestamp": dt.datetime.now(dt.UTC),
            "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": {}},
        }

    def _reasons(self, parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                ended = instance.get("State", {}).get("Name") in ("shutting-down", "terminated")
                if ended and instance.get("InstanceId") in self.preempted:
                    instance["StateReason"] = dict(PREEMPTION_REASON)

    def console(self, instance_id: str) -> str:
        return isolation.console_text(self.booted[instance_id].directory)

    # -- interruptions -----------------------------------------------------------------

    def preempt(self, instance_id: str, notice_s: float = NOTICE_S) -> float:
        """EC2 interrupts the spot instance: notice now, terminated ``notice_s`` later (returned)."""
        now = time.time()
        self.market.interrupt(instance_id, now)
        self.preempted.add(instance_id)
        path = self.booted[instance_id].directory / "preempt"
        partial = path.with_suffix(".part")
        partial.write_text(json.dumps({"notice_at": now, "terminate_at": now + notice_s}))
        partial.replace(path)
        return now + notice_s

    # -- booting -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ec2-rehearsal", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._boot_new()
            except Exception as exc:  # moto busy, say: the next poll sees it
                self._errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(POLL_S)

    def _boot_new(self) -> None:
        answer = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag-key", "Values": [TOKEN_TAG]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        for reservation in answer.get("Reservations", []):
            for raw in reservation.get("Instances", []):
                if raw["InstanceId"] not in self.booted:
                    self._boot(raw)

    def _boot(self, raw: dict[str, Any]) -> None:
        instance_id = str(raw["InstanceId"])
        directory = self.folder / instance_id
        directory.mkdir(parents=True, exist_ok=True)
        spec = {
            "instance_id": instance_id,
            "endpoint_url": self.endpoint_url,
            "region": REGION,
            "zone": raw["Placement"]["AvailabilityZone"],
            "instance_type": raw["InstanceType"],
            "spot": raw.get("InstanceLifecycle") == "spot",
            "launch_time": raw["LaunchTime"].timestamp(),
            "isolated": self.isolated,
            # The AMI: this machine's Python, which holds spothop's dependencies (a custom
            # AMI: the adapter's install_dependencies off), as the local cloud's image.
            "image_paths": sorted({sys.prefix, sys.base_prefix}),
            "buckets": [str(b) for b in self.buckets],
        }
        (directory / "instance.json").write_text(json.dumps(spec))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
        with (directory / "host.log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.e2e.ec2_instance", str(directory)],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.booted[instance_id] = Booted(instance_id, directory, process)

    def stop(self) -> None:
        """Stop booting; every instance process ends (its processes killed), moto untouched."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)
        for booted in self.booted.values():
            if booted.process.poll() is None:
                booted.process.send_signal(signal.SIGTERM)
        for booted in self.booted.values():
            try:
                booted.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(booted.process.pid, signal.SIGKILL)
                booted.process.wait()

    # -- what moto reports -------------------------------------------------------------

    def raw_instances(self, job_id: str | None = None) -> list[dict[str, Any]]:
        """moto's records of the job's instances (every spothop instance's without ``job_id``)."""
        filters = [{"Name": "tag-key", "Values": [TOKEN_TAG]}]
        if job_id is not None:
            filters.append({"Name": "tag:spothop-job", "Values": [job_id]})
        answer = self.ec2.describe_instances(Filters=filters)
        return [i for r in answer.get("Reservations", []) for i in r.get("Instances", [])]

    def running(self, job_id: str) -> list[str]:
        return [
            str(i["InstanceId"])
            for i in self.raw_instances(job_id)
            if i["State"]["Name"] in ("pending", "running")
        ]
