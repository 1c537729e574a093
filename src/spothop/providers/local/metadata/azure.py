"""Azure Instance Metadata Service (Scheduled Events and instance compute) for a local instance.

Documented behaviour followed here:

- https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events
  ``GET /metadata/scheduledevents?api-version=2020-07-01`` with the header
  ``Metadata: true`` returns ``{"DocumentIncarnation": n, "Events": [...]}``.
  Each event has ``EventId`` (a GUID), ``EventType`` (``Preempt`` for a Spot
  eviction), ``ResourceType`` (``VirtualMachine``), ``Resources`` (VM names),
  ``EventStatus`` (``Scheduled``, then ``Started`` once approved or due),
  ``NotBefore`` (RFC 1123, ``Mon, 19 Sep 2016 18:29:47 GMT``),
  ``Description``, ``EventSource`` (``Platform``) and ``DurationInSeconds``
  (``-1`` when unknown). ``DocumentIncarnation`` changes whenever the events
  document changes. A ``POST`` to the same path with
  ``{"StartRequests": [{"EventId": "..."}]}`` approves an event so it may
  start before ``NotBefore``. Preempt events give a minimum of 30 seconds.
- https://learn.microsoft.com/azure/virtual-machines/instance-metadata-service
  Every request needs ``Metadata: true`` (else ``400 Bad Request`` with
  ``{"error": "Bad request. Required metadata header not specified"}``) and an
  ``api-version`` query parameter (missing or unsupported: ``400`` with an
  ``error`` and the ``newest-versions`` supported); requests with
  ``X-Forwarded-For`` are rejected; ``/metadata/instance/compute`` holds
  ``vmId``, ``vmSize``, ``location``, ``zone``, ``priority`` (``Spot`` or
  ``Regular``) among others; ``/metadata/instance/network`` holds ``interface``, a list
  whose items give ``ipv4.ipAddress[].privateIpAddress`` (and ``publicIpAddress``),
  ``ipv6`` and ``macAddress``; ``/metadata/instance`` holds both, as ``compute`` and
  ``network``.

Local choices: the VM name in ``Resources`` and ``compute.name`` is the local
instance id; ``vmId`` is a UUID derived from it (stable across restarts); an
unknown ``EventId`` in StartRequests is a ``400`` and approves nothing; a
rejected ``X-Forwarded-For`` request is a ``400`` with a JSON error.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from spothop.providers.base import BillingRule
from spothop.providers.local.metadata._http import MetadataHandler, Request, Response, rfc1123
from spothop.providers.local.metadata.codes import HEX_DIGITS, ErrorCodes, IdQuery, InstanceIdShape
from spothop.providers.local.metadata.state import NoticeSnapshot

AZURE_SCHEDULED_EVENTS_PATH = "/metadata/scheduledevents"
AZURE_INSTANCE_PATH = "/metadata/instance"
AZURE_COMPUTE_PATH = "/metadata/instance/compute"
AZURE_NETWORK_PATH = "/metadata/instance/network"
# api-versions the docs list for each service, newest last (the local endpoint answers them all alike)
AZURE_SCHEDULED_EVENTS_VERSIONS = (
    "2017-03-01",
    "2017-08-01",
    "2017-11-01",
    "2019-01-01",
    "2019-08-01",
    "2020-07-01",
)
AZURE_INSTANCE_VERSIONS = (
    "2017-03-01",
    "2017-04-02",
    "2017-08-01",
    "2017-12-01",
    "2018-02-01",
    "2018-04-02",
    "2018-10-01",
    "2019-02-01",
    "2019-03-11",
    "2019-04-30",
    "2019-06-01",
    "2019-06-04",
    "2019-08-01",
    "2019-08-15",
    "2019-11-01",
    "2020-06-01",
    "2020-07-15",
    "2020-09-01",
    "2020-10-01",
    "2020-12-01",
    "2021-01-01",
    "2021-02-01",
    "2021-03-01",
    "2021-05-01",
    "2021-10-01",
    "2021-11-01",
    "2021-11-15",
    "2021-12-13",
    "2023-07-01",
)
AZURE_NEWEST_SHOWN = 3  # how many newest versions an api-version error lists
AZURE_DURATION_UNKNOWN = -1  # Scheduled Events docs: DurationInSeconds -1 when unknown
AZURE_PREEMPT_DESCRIPTION = "Virtual machine is being evicted."
_MISSING_HEADER = "Bad request. Required metadata header not specified"
_NO_VERSION = "Bad request. api-version was not specified in the request. For more information refer to aka.ms/azureimds"
_BAD_VERSION = "Bad request. api-version is invalid or was not specified in the request. For more information refer to aka.ms/azureimds"


def _error(status: int, message: str, **extra: Any) -> Response:
    return Response.json({"error": message, **extra}, status)


# Azure bills VMs (Spot included) per second; from 1 June 2025 with a 5-minute minimum:
# https://learn.microsoft.com/en-us/answers/questions/2259765 (Microsoft's notice, as answered).
BILLING = BillingRule(
    increment_s=1,
    minimum_s=300,
    source="https://learn.microsoft.com/en-us/answers/questions/2259765",
)


# Azure Resource Manager error codes (allocation failures, ARM's common codes);
# no dedicated code for a max price under the market's. The local cloud names
# VMs "vm-" and 12 hex digits (the IMDS vmId is derived from it).
ERROR_CODES = ErrorCodes(
    capacity_unavailable="AllocationFailed",
    instance_not_found="ResourceNotFound",
    invalid_parameter="InvalidParameter",
    internal_error="InternalServerError",
)
INSTANCE_IDS = InstanceIdShape(prefix="vm-", alphabet=HEX_DIGITS, length=12)


class AzureImdsHandler(MetadataHandler):
    """``169.254.169.254/metadata`` with Scheduled Events."""

    ID_QUERY = IdQuery(
        path=AZURE_COMPUTE_PATH + "?api-version=2021-02-01",
        headers=("Metadata: true",),
        json_key="name",
    )

    ERROR_CODES = ERROR_CODES
    BILLING = BILLING
    INSTANCE_IDS = INSTANCE_IDS

    def route(self, request: Request) -> Response:
        if request.header("X-Forwarded-For") is not None:
            return _error(400, "Bad request. X-Forwarded-For header is not allowed")
        if (request.header("Metadata") or "").lower() != "true":
            return _error(400, _MISSING_HEADER)
        path = request.path.rstrip("/")
        if path == AZURE_SCHEDULED_EVENTS_PATH:
            versions: tuple[str, ...] = AZURE_SCHEDULED_EVENTS_VERSIONS
            allowed: tuple[str, ...] = ("GET", "HEAD", "POST")
        elif path in (AZURE_INSTANCE_PATH, AZURE_COMPUTE_PATH, AZURE_NETWORK_PATH):
            versions, allowed = AZURE_INSTANCE_VERSIONS, ("GET", "HEAD")
        else:
            return _error(404, "Not found")
        version_error = self._check_version(request.query.get("api-version"), versions)
        if version_error is not None:
            return version_error
        if request.method not in allowed:
            return _error(405, "Method not allowed")
        if path == AZURE_SCHEDULED_EVENTS_PATH:
            if request.method == "POST":
                return self._start_requests(request.body)
            return Response.json(self._document(self.notices.snapshot()))
        if path == AZURE_COMPUTE_PATH:
            return Response.json(self._compute())
        if path == AZURE_NETWORK_PATH:
            return Response.json(self._network())
        return Response.json({"compute": self._compute(), "network": self._network()})

    @staticmethod
    def _check_version(version: str | None, supported: tuple[str, ...]) -> Response | None:
        newest = list(reversed(supported[-AZURE_NEWEST_SHOWN:]))
        if not version:
            return _error(400, _NO_VERSION, **{"newest-versions": newest})
        if version not in supported:
            return _error(400, _BAD_VERSION, **{"newest-versions": newest})
        return None

    def _document(self, notices: NoticeSnapshot) -> dict[str, Any]:
        events: list[dict[str, Any]] = []
        if self.metadata.spot and notices.termination_time is not None and notices.event_id:
            events.append(
                {
                    "EventId": notices.event_id,
                    "EventType": "Preempt",
                    "ResourceType": "VirtualMachine",
                    "Resources": [self.metadata.instance_id],
                    "EventStatus": "Started" if notices.acknowledged else "Scheduled",
                    "NotBefore": rfc1123(notices.termination_time),
                    "Description": AZURE_PREEMPT_DESCRIPTION,
                    "EventSource": "Platform",
                    "DurationInSeconds": AZURE_DURATION_UNKNOWN,
                }
            )
        return {"DocumentIncarnation": notices.document_incarnation, "Events": events}

    def _start_requests(self, body: bytes) -> Response:
        try:
            payload = json.loads(body.decode("utf-8")) if body else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            return _error(400, "Bad request. The request body is not valid JSON")
        requests = payload.get("StartRequests") if isinstance(payload, dict) else None
        if not isinstance(requests, list):
            return _error(400, "Bad request. The request body must hold a StartRequests list")
        ids: list[str] = []
        for item in requests:
            event_id = item.get("EventId") if isinstance(item, dict) else None
            if not isinstance(event_id, str) or not event_id:
                return _error(400, "Bad request. Each StartRequests item needs an EventId")
            ids.append(event_id)
        current = self.notices.event_id if self.metadata.spot else None
        unknown = [e for e in ids if current is None or e.strip().upper() != current]
        if unknown:
            return _error(400, f"Bad request. Unknown EventId {unknown[0]}")
        for event_id in ids:
            self.notices.acknowledge(event_id)
        return Response(200, b"", "application/json")

    def _network(self) -> dict[str, Any]:
        """The VM's one interface, its private address the instance's (no public one locally)."""
        md = self.metadata
        mac = uuid.uuid5(uuid.NAMESPACE_URL, f"spothop-local-mac:{md.instance_id}").hex[:12]
        return {
            "interface": [
                {
                    "ipv4": {
                        "ipAddress": [
                            {"privateIpAddress": md.private_address, "publicIpAddress": ""}
                        ],
                        "subnet": [],
                    },
                    "ipv6": {"ipAddress": []},
                    "macAddress": mac.upper(),
                }
            ]
        }

    def _compute(self) -> dict[str, Any]:
        md = self.metadata
        return {
            "azEnvironment": "AzurePublicCloud",
            "location": md.region,
            "name": md.instance_id,
            "vmId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"spothop-local:{md.instance_id}")),
            "vmSize": md.instance_type,
            "zone": md.zone,
            "priority": "Spot" if md.spot else "Regular",
            "evictionPolicy": "Delete" if md.spot else "",
            "osType": "Linux",
        }
