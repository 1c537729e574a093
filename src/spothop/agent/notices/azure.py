"""Azure Spot eviction notices through Scheduled Events.

Documented behaviour relied on
(learn.microsoft.com/azure/virtual-machines/linux/scheduled-events):
``GET /metadata/scheduledevents?api-version=2020-07-01`` with ``Metadata:
true`` returns ``{"DocumentIncarnation": n, "Events": [...]}``; a Spot
eviction is an event with ``EventType`` ``Preempt`` (a minimum of 30 s
ahead), ``NotBefore`` in RFC 1123 (empty once the event has started) and an
``EventId``. Other event types (``Reboot``, ``Redeploy``, ``Freeze``) are
maintenance: advance notices here; ``Terminate`` is final. ``POST`` to the
same path with ``{"StartRequests": [{"EventId": …}]}`` approves the event so
it may start at once: :meth:`AzureWatcher.acknowledge` sends it after the
emergency protocol is done. IMDS takes 5 requests a second per VM and answers
more with 429 (learn.microsoft.com/azure/virtual-machines/instance-metadata-service,
"Rate limiting"): the watcher polls every 0.25 s, four a second, leaving one
for the acknowledgement and everything else on the VM.

Events for other VMs (``Resources`` not naming this one) are ignored once the
VM's name is known from the self-check.
"""

from __future__ import annotations

import json
import logging
from typing import Any, ClassVar

from spothop.agent.errors import NoticeEndpointError
from spothop.agent.model import Identity, Notice, NoticeKind, advance_notice, final_notice
from spothop.agent.notices._http import fetch
from spothop.agent.notices._time import parse_rfc1123
from spothop.agent.notices.base import Watcher, address_or_empty

log = logging.getLogger(__name__)

AZURE_PREEMPT_NOTICE_S = 30.0  # Scheduled Events docs: Preempt gives a minimum of 30 seconds
EVENTS_PATH = "/metadata/scheduledevents?api-version=2020-07-01"
COMPUTE_PATH = "/metadata/instance/compute?api-version=2021-02-01"
# IMDS docs: network.interface[0].ipv4.ipAddress[0].privateIpAddress is the VM's private address.
NETWORK_PATH = "/metadata/instance/network?api-version=2021-02-01"
HEADERS = {"Metadata": "true"}
FINAL_EVENT_TYPES = frozenset({"Preempt", "Terminate"})
AZURE_POLL_INTERVAL_S = (
    0.25  # IMDS docs: 5 requests/s per VM, 429 past that; one GET a poll, 4 a second
)


class AzureWatcher(Watcher):
    protocol: ClassVar[str] = "azure"
    documented_lead_s: ClassVar[float | None] = AZURE_PREEMPT_NOTICE_S
    default_poll_interval_s: ClassVar[float] = AZURE_POLL_INTERVAL_S

    def __init__(self, base_url: str | None, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self.vm_name: str | None = None

    def poll(self) -> list[Notice]:
        reply = self._expect(self._get(EVENTS_PATH, HEADERS), EVENTS_PATH)
        seen = self.clock()
        try:
            document: Any = json.loads(reply.body)
        except ValueError as exc:
            raise NoticeEndpointError(
                f"scheduled events are not JSON: {reply.body[:120]!r}"
            ) from exc
        events = document.get("Events") if isinstance(document, dict) else None
        if not isinstance(events, list):
            raise NoticeEndpointError(
                f"scheduled events without an Events list: {reply.body[:120]!r}"
            )
        return [n for e in events if (n := self._notice(e, seen)) is not None]

    def _notice(self, event: Any, seen: float) -> Notice | None:
        if not isinstance(event, dict):
            raise NoticeEndpointError(f"a scheduled event that is not an object: {event!r:.120}")
        resources = event.get("Resources")
        if (
            self.vm_name
            and isinstance(resources, list)
            and resources
            and self.vm_name not in resources
        ):
            return None
        kind = str(event.get("EventType", ""))
        raw = json.dumps(event, separators=(",", ":"))
        not_before = event.get("NotBefore")
        deadline = parse_rfc1123(not_before) if isinstance(not_before, str) and not_before else None
        event_id = str(event.get("EventId") or "") or None
        if kind in FINAL_EVENT_TYPES:
            return final_notice(
                self.protocol,
                kind,
                seen_at=seen,
                deadline=deadline,
                documented_lead_s=self.documented_lead_s,
                raw=raw,
                event_id=event_id,
            )
        # Maintenance (Reboot, Redeploy, Freeze) keeps its NotBefore, as AWS's scheduled events do.
        return advance_notice(
            self.protocol,
            kind or "unknown-event",
            seen_at=seen,
            raw=raw,
            deadline=deadline,
            event_id=event_id,
        )

    def acknowledge(self, notice: Notice) -> None:
        """Approve the event (StartRequests), so the platform need not wait for NotBefore. Never raises."""
        if notice.kind is not NoticeKind.FINAL or not notice.event_id or not self.base_url:
            return
        body = json.dumps({"StartRequests": [{"EventId": notice.event_id}]}).encode()
        try:
            reply = fetch(
                "POST",
                self.base_url + EVENTS_PATH,
                self.timeout_s,
                {**HEADERS, "Content-Type": "application/json"},
                body,
            )
        except NoticeEndpointError as exc:
            log.warning("could not acknowledge event %s: %s", notice.event_id, exc)
            return
        if reply.status != 200:
            log.warning(
                "acknowledging event %s: HTTP %s %s",
                notice.event_id,
                reply.status,
                reply.body[:200],
            )

    def self_check(self) -> Identity:
        reply = self._expect(self._get(COMPUTE_PATH, HEADERS), COMPUTE_PATH)
        try:
            compute: Any = json.loads(reply.body)
        except ValueError as exc:
            raise NoticeEndpointError("instance compute metadata is not JSON") from exc
        if not isinstance(compute, dict) or not compute.get("name"):
            raise NoticeEndpointError("instance compute metadata has no VM name")
        self.vm_name = str(compute["name"])
        self.poll()  # the scheduled-events document itself must parse
        return Identity(
            instance_id=self.vm_name,
            instance_type=str(compute.get("vmSize", "")),
            region=str(compute.get("location", "")),
            zone=str(compute.get("zone", "")),
            private_address=self.private_address(),
        )

    def private_address(self) -> str:
        try:
            reply = self._get(NETWORK_PATH, HEADERS)
            network: Any = json.loads(reply.body) if reply.status == 200 else {}
            value = network["interface"][0]["ipv4"]["ipAddress"][0]["privateIpAddress"]
        except (NoticeEndpointError, ValueError, LookupError, TypeError):
            return ""
        return address_or_empty(value) if isinstance(value, str) else ""
