"""Google Compute Engine spot/preemptible notices.

Documented behaviour relied on:

- cloud.google.com/compute/docs/metadata/querying-metadata: every request
  carries ``Metadata-Flavor: Google`` (answers carry it back);
  ``?wait_for_change=true`` holds the request until the value's ETag differs
  from ``last_etag``; ``timeout_sec`` bounds the wait.
- …/instances/create-use-spot: ``instance/preempted`` reads ``FALSE``, then
  ``TRUE`` about 30 seconds before the VM stops. No time is given, so the
  deadline is ``assumed_lead_s`` (default 30 s) after the agent sees it.
- …/instances/host-maintenance-overview: ``instance/maintenance-event`` reads
  ``NONE``, ``MIGRATE_ON_HOST_MAINTENANCE`` (an advance notice here: the VM
  lives on, but a durable checkpoint is cheap insurance) or
  ``TERMINATE_ON_HOST_MAINTENANCE`` (a final notice, 60 s ahead).

Each poll is one hanging GET on ``preempted`` of at most ``timeout_sec``
(the poll interval rounded up to whole seconds, GCP's unit), which returns
the moment the value changes, then one plain GET of ``maintenance-event``.
Any value outside the documented ones is a bad answer (NoticeEndpointError).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from spothop.agent.errors import NoticeEndpointError
from spothop.agent.model import Identity, Notice, advance_notice, final_notice
from spothop.agent.notices.base import Watcher

GCP_PREEMPT_NOTICE_S = 30.0  # GCP docs: preemption notice about 30 s before the stop
GCP_MAINTENANCE_NOTICE_S = 60.0  # GCP docs: a 60-second notice before a host maintenance event
# The hanging GET's timeout_sec (GCP counts whole seconds); a change of `preempted` answers it at once,
# so the spot notice is seen within milliseconds whatever this is. maintenance-event is read once a poll.
GCP_POLL_INTERVAL_S = 1.0
ROOT = "/computeMetadata/v1"
FLAVOR = {"Metadata-Flavor": "Google"}
PREEMPTED_PATH = ROOT + "/instance/preempted"
# The first network interface's internal IP (Compute Engine docs, "About VM metadata").
ADDRESS_PATH = ROOT + "/instance/network-interfaces/0/ip"
MAINTENANCE_PATH = ROOT + "/instance/maintenance-event"
MAINTENANCE_TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"
MAINTENANCE_MIGRATE = "MIGRATE_ON_HOST_MAINTENANCE"
MAINTENANCE_NONE = "NONE"


class GcpWatcher(Watcher):
    protocol: ClassVar[str] = "gcp"
    documented_lead_s: ClassVar[float | None] = GCP_PREEMPT_NOTICE_S
    long_poll: ClassVar[bool] = True
    default_poll_interval_s: ClassVar[float] = GCP_POLL_INTERVAL_S

    def __init__(self, base_url: str | None, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._etag: str | None = None

    def poll(self) -> list[Notice]:
        notices: list[Notice] = []
        preempted = self._read_preempted()
        seen = self.clock()
        if preempted == "TRUE":
            lead = self.assumed_lead_s
            notices.append(
                final_notice(
                    self.protocol,
                    "preempted",
                    seen_at=seen,
                    deadline=seen + lead if lead is not None else None,
                    documented_lead_s=lead,
                    raw=preempted,
                )
            )
        maintenance = self._get(MAINTENANCE_PATH, FLAVOR)
        value = self._expect(maintenance, MAINTENANCE_PATH).body.strip()
        if value == MAINTENANCE_TERMINATE:
            notices.append(
                final_notice(
                    self.protocol,
                    "maintenance-event",
                    seen_at=seen,
                    deadline=seen + GCP_MAINTENANCE_NOTICE_S,
                    documented_lead_s=GCP_MAINTENANCE_NOTICE_S,
                    raw=value,
                )
            )
        elif value == MAINTENANCE_MIGRATE:
            notices.append(
                advance_notice(self.protocol, "maintenance-event", seen_at=seen, raw=value)
            )
        elif value != MAINTENANCE_NONE:
            raise NoticeEndpointError(
                f"{MAINTENANCE_PATH} reads {value[:80]!r}, not a documented value"
            )
        return notices

    def _read_preempted(self) -> str:
        if self._etag is None:
            path = PREEMPTED_PATH
            timeout = self.timeout_s
        else:
            wait_s = max(1, math.ceil(self.poll_interval_s))
            path = (
                f"{PREEMPTED_PATH}?wait_for_change=true&timeout_sec={wait_s}&last_etag={self._etag}"
            )
            timeout = self.timeout_s + wait_s
        reply = self._expect(self._get(path, FLAVOR, timeout_s=timeout), PREEMPTED_PATH)
        value = reply.body.strip()
        if value not in ("TRUE", "FALSE"):
            self._etag = None
            raise NoticeEndpointError(f"{PREEMPTED_PATH} reads {value[:80]!r}, not TRUE or FALSE")
        self._etag = reply.headers.get("etag")
        return value

    def self_check(self) -> Identity:
        values = {}
        for name, key in (
            ("instance_id", "id"),
            ("instance_type", "machine-type"),
            ("zone", "zone"),
        ):
            reply = self._expect(self._get(f"{ROOT}/instance/{key}", FLAVOR), key)
            if reply.headers.get("metadata-flavor") != "Google":
                raise NoticeEndpointError(
                    "the endpoint does not answer with Metadata-Flavor: Google"
                )
            values[name] = reply.body.strip().rsplit("/", 1)[
                -1
            ]  # projects/<p>/zones/<zone> → <zone>
        zone = values["zone"]
        return Identity(
            instance_id=values["instance_id"],
            instance_type=values["instance_type"],
            zone=zone,
            region=zone.rsplit("-", 1)[0] if "-" in zone else "",
            private_address=self.private_address(),
        )

    def private_address(self) -> str:
        return self._read_address(ADDRESS_PATH, FLAVOR)
