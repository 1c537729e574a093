"""Google Compute Engine's metadata server for a local instance.

Documented behaviour followed here:

- https://cloud.google.com/compute/docs/metadata/querying-metadata
  Every request must carry ``Metadata-Flavor: Google``; without it the server
  answers ``403 Forbidden``. A request that carries ``X-Forwarded-For`` is
  refused (403), so a proxy on the VM cannot relay metadata. Responses carry
  ``Metadata-Flavor: Google``. ``?wait_for_change=true`` holds the request
  open until the value changes (a "hanging GET"); each response carries an
  ``ETag``, and ``last_etag=<etag>`` returns at once if the value no longer
  has that ETag; ``timeout_sec=<n>`` returns after ``n`` seconds with the
  current value whether or not it changed.
- https://cloud.google.com/compute/docs/instances/create-use-spot (and
  preemptible): ``instance/preempted`` reads ``FALSE``, and ``TRUE`` once the
  VM has been told it is being preempted (about 30 seconds before it stops);
  the documented way to watch it is ``preempted?wait_for_change=true``.
- https://cloud.google.com/compute/docs/instances/host-maintenance-overview
  ``instance/maintenance-event`` reads ``NONE`` and changes to
  ``MIGRATE_ON_HOST_MAINTENANCE`` or ``TERMINATE_ON_HOST_MAINTENANCE`` before
  the event; it supports the same ``wait_for_change`` hanging GET.
- https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys
  ``instance/id``, ``instance/name``, ``instance/machine-type``
  (``projects/<project>/machineTypes/<type>``), ``instance/zone``
  (``projects/<project>/zones/<zone>``), ``instance/scheduling/preemptible``
  (``TRUE``/``FALSE``), ``project/project-id``,
  ``instance/network-interfaces/0/ip`` (the first interface's internal IP).
- https://cloud.google.com/compute/docs/troubleshooting/troubleshoot-metadata-server
  400 for improper query parameters, 403 for failed checks, 404 for a path
  that does not exist.

Local choices: ``project_id`` stands where GCP prints a project number;
``instance/id`` is the local instance id (GCP's is numeric); the ETag is a
hash of the value, so equal values have equal ETags; a hanging GET without
``timeout_sec`` is capped at :data:`GCP_MAX_WAIT_S`; bodies are ``text/plain``.
"""

from __future__ import annotations

import hashlib
import time

from spothop.providers.base import BillingRule
from spothop.providers.local.metadata._http import MetadataHandler, Request, Response, tree_lookup
from spothop.providers.local.metadata.codes import (
    DECIMAL_DIGITS,
    ErrorCodes,
    IdQuery,
    InstanceIdShape,
)
from spothop.providers.local.metadata.state import NoticeSnapshot

GCP_ROOT = "/computeMetadata/v1"
GCP_FLAVOR_HEADER = "Metadata-Flavor"
GCP_FLAVOR = "Google"
GCP_MAX_WAIT_S = 3600.0  # local cap on a hanging GET without timeout_sec (GCP documents none)
GCP_WAIT_SLICE_S = 0.25  # a hanging GET re-checks for server shutdown this often
GCP_ETAG_HEX_CHARS = 16  # GCP's ETags are 16 hex digits


def etag(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:GCP_ETAG_HEX_CHARS]


# Compute Engine bills per second with a 1-minute minimum:
# https://cloud.google.com/compute/vm-instance-pricing ("Billing model").
BILLING = BillingRule(
    increment_s=1, minimum_s=60, source="https://cloud.google.com/compute/vm-instance-pricing"
)


# Compute Engine API error codes and reasons (a zone out of resources, Google
# API error reasons); Compute Engine takes no spot bid, so a maximum price is an
# invalid field. Instance ids are unsigned 64-bit decimal numbers.
ERROR_CODES = ErrorCodes(
    capacity_unavailable="ZONE_RESOURCE_POOL_EXHAUSTED",
    instance_not_found="notFound",
    invalid_parameter="invalid",
    internal_error="internalError",
)
INSTANCE_IDS = InstanceIdShape(prefix="", alphabet=DECIMAL_DIGITS, length=19, leading="123456789")


class GcpMetadataHandler(MetadataHandler):
    """``metadata.google.internal`` with hanging GETs."""

    ID_QUERY = IdQuery(path=GCP_ROOT + "/instance/id", headers=(f"{GCP_FLAVOR_HEADER}: Google",))

    ERROR_CODES = ERROR_CODES
    BILLING = BILLING
    INSTANCE_IDS = INSTANCE_IDS

    def route(self, request: Request) -> Response:
        if request.header("X-Forwarded-For") is not None:
            return self._reply(403, "Forbidden: X-Forwarded-For is not allowed\n")
        if request.header(GCP_FLAVOR_HEADER) != GCP_FLAVOR:
            return self._reply(
                403, f"Forbidden: missing {GCP_FLAVOR_HEADER}: {GCP_FLAVOR} header\n"
            )
        if request.method not in ("GET", "HEAD"):
            return self._reply(405, "Method Not Allowed\n")
        if request.path != GCP_ROOT and not request.path.startswith(GCP_ROOT + "/"):
            return self._reply(404, "Not Found\n")
        key = request.path[len(GCP_ROOT) :]
        wait = request.query.get("wait_for_change", "false").lower()
        if wait not in ("true", "false"):
            return self._reply(400, "Bad Request: wait_for_change must be true or false\n")
        timeout_raw = request.query.get("timeout_sec")
        timeout_s = GCP_MAX_WAIT_S
        if timeout_raw is not None:
            if not timeout_raw.isdigit():
                return self._reply(400, "Bad Request: timeout_sec must be a non-negative integer\n")
            timeout_s = min(float(timeout_raw), GCP_MAX_WAIT_S)
        snapshot = self.notices.snapshot()
        value = tree_lookup(self._leaves(snapshot), key)
        if value is None:
            return self._reply(404, "Not Found\n")
        if wait == "true":
            value = self._hang(
                key, value, snapshot.version, request.query.get("last_etag"), timeout_s
            )
            if value is None:
                return self._reply(404, "Not Found\n")
        return self._reply(200, value, etag(value))

    def _hang(
        self, key: str, value: str, version: int, last_etag: str | None, timeout_s: float
    ) -> str | None:
        """Wait until ``key``'s ETag differs from ``last_etag`` (default: the value's at arrival).

        Returns the value then current, at the latest when ``timeout_s`` has
        passed or the server is stopping.
        """
        baseline = last_etag if last_etag is not None else etag(value)
        deadline = time.monotonic() + timeout_s
        current: str | None = value
        while current is not None and etag(current) == baseline:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.meta_server.stopping.is_set():
                break
            version = self.notices.wait_for_change(version, min(remaining, GCP_WAIT_SLICE_S))
            current = tree_lookup(self._leaves(self.notices.snapshot()), key)
        return current

    def _reply(self, status: int, body: str, tag: str | None = None) -> Response:
        headers = {GCP_FLAVOR_HEADER: GCP_FLAVOR}
        if tag is not None:
            headers["ETag"] = tag
        return Response.text(body, status, headers)

    def _leaves(self, notices: NoticeSnapshot) -> dict[str, str]:
        md = self.metadata
        return {
            "instance/id": md.instance_id,
            "instance/name": md.instance_id,
            "instance/machine-type": f"projects/{md.project_id}/machineTypes/{md.instance_type}",
            "instance/zone": f"projects/{md.project_id}/zones/{md.zone}",
            "instance/network-interfaces/0/ip": md.private_address,
            "instance/preempted": "TRUE" if md.spot and notices.preempted else "FALSE",
            "instance/maintenance-event": notices.maintenance_event,
            "instance/scheduling/preemptible": "TRUE" if md.spot else "FALSE",
            "instance/scheduling/provisioning-model": "SPOT" if md.spot else "STANDARD",
            "project/project-id": md.project_id,
        }
