"""EC2's instances as spothop's: describe, list, terminate, and what a raw instance reads as.

:class:`Ec2Instances` is the third floor of
:class:`~spothop.providers.aws.provider.AwsProvider` (on :class:`.prices.Ec2Prices`,
whose ``_price`` rates an instance launched without a price tag);
``AwsProvider.__init__`` sets the attribute it declares.

- ``describe``: ``DescribeInstances`` by id, in the region the id was
  launched or found in first, then in the provider's other regions;
  :class:`~spothop.errors.InstanceNotFound` with EC2's code where none has it.
- ``list_instances`` / ``find_instances``: ``DescribeInstances`` by tag (every
  instance with ``spothop-token``, ended or not), in the provider's regions
  and any other region it launched into.
- ``terminate``: idempotent (an unknown or ended id returns silently); it
  first tags :data:`ENDED_TAG` (the provider clock's time) so the cost stops
  there, then calls ``TerminateInstances``.
- ``console_output`` (:class:`~spothop.providers.extensions.ConsoleOutput`):
  ``GetConsoleOutput`` with ``Latest`` (the newest output, where the
  instance type keeps it; EC2 otherwise gives what it last captured), its
  base64 ``Output`` decoded (undecodable bytes replaced); empty before EC2
  has any.
- A live spot instance whose request ``DescribeSpotInstanceRequests`` shows
  ``marked-for-termination`` (or for stop, hibernation) reads ``noticed``:
  notice time from the status's ``UpdateTime``, termination
  :data:`NOTICE_LEAD_TIME_S` after it. A failed call only means no notice is
  seen here (the agent's IMDS watcher still sees it).
- An ended instance reads ``preempted`` (EC2's spot interruption reasons),
  ``failed`` (EC2's failure reasons) or ``terminated``; its cost stops at
  :data:`ENDED_TAG`, else at the time its ``StateTransitionReason`` gives.
  ``cost_microusd`` is the rate of :data:`PRICE_TAG` (the rate at launch) ×
  the seconds since ``LaunchTime``: an estimate; the bill is AWS's.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from spothop.errors import InstanceNotFound, ProviderError
from spothop.providers.aws.calls import FILTER_VALUES_MAX
from spothop.providers.aws.prices import Ec2Prices
from spothop.providers.base import Instance, InstanceState
from spothop.providers.local.metadata.aws import ERROR_CODES
from spothop.providers.records import TOKEN_TAG, cost_microusd, number_text

log = logging.getLogger("spothop.providers.aws")

PRICE_TAG = "spothop-price-usd-per-hour"
ENDED_TAG = "spothop-ended-at"
_ENDED_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
_PREEMPTION_REASONS = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
_FAILURE_REASONS = frozenset(
    {
        "Server.InternalError",
        "Server.InsufficientInstanceCapacity",
        "Client.InternalError",
        "Client.VolumeLimitExceeded",
        "Client.InvalidSnapshot.NotFound",
    }
)
# DescribeSpotInstanceRequests status codes of a request EC2 is about to interrupt.
_INTERRUPTION_CODES = frozenset(
    {"marked-for-termination", "marked-for-stop", "marked-for-hibernation"}
)
NOTICE_LEAD_TIME_S = 120.0  # EC2: the interruption notice comes two minutes before the action
_REASON_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


class Ec2Instances(Ec2Prices):
    """Describing, listing and ending EC2 instances. See the module docstring."""

    _region_of: dict[str, str]  # instance id → the region it was launched or found in

    def _describe_raw(self, region: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        answer = self._call(region, "describe_instances", InstanceIds=list(ids))
        return [i for r in answer.get("Reservations", []) for i in r.get("Instances", [])]

    def _find(self, instance_id: str) -> tuple[str, dict[str, Any]]:
        """(region, raw instance) of an id; InstanceNotFound with EC2's code if no region has it."""
        regions = [self._region_of[instance_id]] if instance_id in self._region_of else []
        regions += [r for r in self.regions if r not in regions]
        missing: ProviderError | None = None
        for region in regions:
            try:
                found = self._describe_raw(region, [instance_id])
            except InstanceNotFound as exc:
                missing = exc
                continue
            if found:
                self._region_of[instance_id] = region
                return region, found[0]
        raise missing or InstanceNotFound(
            self.name,
            ERROR_CODES.instance_not_found,
            f"The instance ID '{instance_id}' does not exist",
        )

    def describe(self, instance_id: str) -> Instance:
        region, raw = self._find(instance_id)
        return self._instance(raw, region, self._notices(region, [raw]))

    def list_instances(self) -> list[Instance]:
        return self.find_instances()

    def find_instances(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        """Every instance spothop launched (it has ``spothop-token``), ended or not, that has ``tags``.

        Searched: the provider's regions, and any other region this provider launched into.
        """
        filters = [{"Name": "tag-key", "Values": [TOKEN_TAG]}]
        filters += [{"Name": f"tag:{k}", "Values": [v]} for k, v in (tags or {}).items()]
        found = []
        launched_elsewhere = [
            r for r in dict.fromkeys(self._region_of.values()) if r not in self.regions
        ]
        for region in [*self.regions, *launched_elsewhere]:
            raws = []
            for page in self._pages(region, "describe_instances", Filters=filters):
                for reservation in page.get("Reservations", []):
                    raws.extend(reservation.get("Instances", []))
            notices = self._notices(region, raws)
            for raw in raws:
                self._region_of[str(raw["InstanceId"])] = region
                found.append(self._instance(raw, region, notices))
        return found

    def _notices(self, region: str, raws: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """spot request id → when EC2 marked it for interruption, for the live spot instances given.

        One ``DescribeSpotInstanceRequests`` call per 100 requests. This is the
        API's view of the interruption notice, for a controller whose agent is
        silent; a failed call only means no notice is seen here (the agent's
        IMDS watcher still sees it).
        """
        ids = [
            str(r["SpotInstanceRequestId"])
            for r in raws
            if r.get("SpotInstanceRequestId") and r["State"]["Name"] in ("pending", "running")
        ]
        marked: dict[str, float] = {}
        for start in range(0, len(ids), FILTER_VALUES_MAX):
            try:
                answer = self._call(
                    region,
                    "describe_spot_instance_requests",
                    SpotInstanceRequestIds=ids[start : start + FILTER_VALUES_MAX],
                )
            except (ProviderError, NotImplementedError) as exc:
                log.debug("%s: spot request status not read in %s: %s", self.name, region, exc)
                continue
            for row in answer.get("SpotInstanceRequests", []):
                status = row.get("Status") or {}
                if status.get("Code") in _INTERRUPTION_CODES:
                    when = status.get("UpdateTime")
                    marked[str(row["SpotInstanceRequestId"])] = (
                        _seconds(when) if when is not None else self.clock.now()
                    )
        return marked

    def terminate(self, instance_id: str) -> None:
        try:
            region, raw = self._find(instance_id)
            if raw["State"]["Name"] in _ENDED_STATES:
                return
            self._call(
                region,
                "create_tags",
                Resources=[instance_id],
                Tags=[{"Key": ENDED_TAG, "Value": number_text(self.clock.now())}],
            )
            self._call(region, "terminate_instances", InstanceIds=[instance_id])
        except InstanceNotFound:
            return

    def _instance(
        self, raw: Mapping[str, Any], region: str, notices: Mapping[str, float] | None = None
    ) -> Instance:
        tags = {str(t["Key"]): str(t["Value"]) for t in raw.get("Tags", [])}
        state_name = raw["State"]["Name"]
        reason = str((raw.get("StateReason") or {}).get("Code", ""))
        spot = raw.get("InstanceLifecycle") == "spot"
        zone = (raw.get("Placement") or {}).get("AvailabilityZone")
        launched_at = _seconds(raw["LaunchTime"])
        ended_at = None
        if state_name in _ENDED_STATES:
            state = (
                InstanceState.PREEMPTED
                if reason in _PREEMPTION_REASONS
                else InstanceState.FAILED
                if reason in _FAILURE_REASONS
                else InstanceState.TERMINATED
            )
            ended_at = _ended_at(tags, str(raw.get("StateTransitionReason") or ""), launched_at)
        else:
            state = InstanceState.PENDING if state_name == "pending" else InstanceState.RUNNING
        notice_time = (notices or {}).get(str(raw.get("SpotInstanceRequestId") or ""))
        termination_time = None
        if notice_time is not None:
            termination_time = notice_time + NOTICE_LEAD_TIME_S
            if state is not InstanceState.PENDING and ended_at is None:
                state = InstanceState.NOTICED
        if PRICE_TAG in tags:
            price = float(tags[PRICE_TAG])
        else:
            price = self._price(region, zone, str(raw["InstanceType"]), spot)
        end = ended_at if ended_at is not None else self.clock.now()
        billed = max(0.0, end - launched_at)
        return Instance(
            instance_id=str(raw["InstanceId"]),
            provider=self.name,
            region=region,
            zone=zone,
            instance_type=str(raw["InstanceType"]),
            spot=spot,
            state=state,
            launched_at=launched_at,
            price_usd_per_hour=price,
            ended_at=ended_at,
            billed_seconds=billed,
            cost_microusd=cost_microusd(price, billed),
            notice_time=notice_time,
            termination_time=termination_time,
            name=tags.get("Name"),
            tags=tags,
        )

    def console_output(self, instance_id: str) -> str:
        """The instance's console as EC2 shows it (module docstring); InstanceNotFound if unknown."""
        region, _raw = self._find(instance_id)
        answer = self._call(region, "get_console_output", InstanceId=instance_id, Latest=True)
        encoded = str(answer.get("Output") or "")
        try:
            return base64.b64decode(encoded).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):  # not base64: shown as it came
            return encoded


def _seconds(value: Any) -> float:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _ended_at(tags: Mapping[str, str], transition: str, launched_at: float) -> float:
    """When an ended instance stopped costing: spothop's end tag, else EC2's transition time."""
    if ENDED_TAG in tags:
        try:
            return max(launched_at, float(tags[ENDED_TAG]))
        except ValueError:
            pass
    match = _REASON_TIME.search(transition)
    if match:
        stamp = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)
        return max(launched_at, stamp.timestamp())
    return launched_at
