"""Volcengine (BytePlus) ECS instance metadata for a local instance.

Documented behaviour followed here:

- https://www.volcengine.com/docs/6396/155893 (BytePlus:
  https://docs.byteplus.com/docs/ecs/View_spot_instance_interruption_event)
  ``curl http://100.96.0.96/latest/spot_instance_termination_time`` returns
  the time, in UTC, at which the spot instance will be released; the
  interruption event comes 5 minutes before reclamation. Before any event
  the item is absent (404).
- https://www.volcengine.com/docs/6396/113780 (instance metadata)
  Items live at ``http://100.96.0.96/latest/[metadata]``, e.g.
  ``/latest/instance_id``; ``/latest`` lists the root; item names ignore case
  and accept ``-`` in place of ``_``. ``mac`` is the instance's MAC address and
  ``network/interfaces/macs/[mac]/primary_ip_address`` that interface's primary
  private address.

Assumptions (the pages above do not say): the exact time string, taken to be
ISO 8601 UTC ``%Y-%m-%dT%H:%M:%SZ`` as AWS and Alibaba print it; the names
``instance_type``, ``region_id`` and ``zone_id``; and the AWS-style aliases
``/latest/meta-data/instance-id`` (and ``instance-type``, ``region-id``,
``zone-id``), served so that tools written for ``meta-data`` paths work.
"""

from __future__ import annotations

import zlib

from spothop.providers.base import BillingRule
from spothop.providers.local.metadata._http import (
    MetadataHandler,
    Request,
    Response,
    iso_utc,
    serve_leaves,
)
from spothop.providers.local.metadata.codes import LOWER_ALNUM, ErrorCodes, InstanceIdShape
from spothop.providers.local.metadata.state import NoticeSnapshot

ROOT = "/latest"
VOLCENGINE_TERMINATION_ITEM = "spot_instance_termination_time"


def _normalise(path: str) -> str:
    """Volcengine item names ignore case and take ``-`` for ``_``."""
    return path.lower().replace("-", "_")


# ECS pay-as-you-go and spot instances are billed by the second, no minimum
# (Volcengine ECS documentation, "Billing overview": pay-as-you-go).
BILLING = BillingRule(increment_s=1, source="https://www.volcengine.com/docs/6396")


# ECS API error codes as the local cloud imitates them (not enough resources,
# an unknown instance) and its instance ids ("i-" and 20 lower-case letters or digits).
ERROR_CODES = ErrorCodes(
    capacity_unavailable="ResourceNotEnough",
    instance_not_found="InvalidInstance.NotFound",
    invalid_parameter="InvalidParameter",
    internal_error="InternalError",
)
INSTANCE_IDS = InstanceIdShape(prefix="i-", alphabet=LOWER_ALNUM, length=20)


class VolcengineMetadataHandler(MetadataHandler):
    """``100.96.0.96/latest``."""

    ERROR_CODES = ERROR_CODES
    BILLING = BILLING
    INSTANCE_IDS = INSTANCE_IDS

    def route(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response.text("Method Not Allowed\n", 405)
        return serve_leaves(self._leaves(self.notices.snapshot()), ROOT, _normalise(request.path))

    def _leaves(self, notices: NoticeSnapshot) -> dict[str, str]:
        md = self.metadata
        mac = local_mac(md.instance_id)
        items = {
            "instance_id": md.instance_id,
            "instance_type": md.instance_type,
            "region_id": md.region,
            "zone_id": md.zone,
            "mac": mac,
        }
        leaves = dict(items)
        leaves[f"network/interfaces/macs/{mac}/primary_ip_address"] = md.private_address
        leaves.update({f"meta_data/{name}": value for name, value in items.items()})
        if md.spot and notices.termination_time is not None:
            leaves[VOLCENGINE_TERMINATION_ITEM] = iso_utc(notices.termination_time)
        return leaves


def local_mac(instance_id: str) -> str:
    """A MAC address for the local instance, stable for its id, in a locally administered range
    (first octet 02: never a real vendor's), lower case as the endpoint's item names are."""
    digest = zlib.crc32(instance_id.encode()).to_bytes(4, "big")
    return ":".join(f"{b:02x}" for b in (0x02, 0x00, *digest))
