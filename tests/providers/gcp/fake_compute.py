"""A fake Compute Engine REST API on a local port, for the tests: the real client, its real transport.

The provider's clients talk HTTP to this server (``endpoint_url``), so the
SDK's own request building, paging, JSON parsing and error mapping all run.
It serves the documented answers of the calls spothop makes
(cloud.google.com/compute/docs/reference/rest/v1): ``zones.list``,
``machineTypes.list`` and ``acceleratorTypes.list`` (paged, ``nextPageToken``),
``instances.insert`` / ``get`` / ``delete`` / ``aggregatedList`` (with the
``filter`` forms spothop sends), ``zoneOperations.wait``; errors as the API's
JSON (``error.errors[].reason``), failed inserts as a ``DONE`` operation
carrying ``error.errors[].code`` (``ZONE_RESOURCE_POOL_EXHAUSTED``).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

BASE = "https://www.googleapis.com/compute/v1"
PAGE = 3  # list pages this long, so paging is exercised
BOOT_S = 5.0


class ShiftedClock:
    """The wall clock plus the seconds a test let pass; ``sleep`` passes time at once."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def sleep(self, seconds: float) -> None:
        self.offset += max(0.0, seconds)


ZONES = {
    "us-central1-a": "us-central1",
    "us-central1-b": "us-central1",
    "europe-west4-a": "europe-west4",
}
MACHINES = {
    "n1-standard-4": (4, 15360, []),
    "n1-standard-8": (8, 30720, []),
    "g2-standard-4": (4, 16384, [("nvidia-l4", 1)]),
    "a2-highgpu-1g": (12, 87040, [("nvidia-tesla-a100", 1)]),
    "e2-medium": (2, 4096, []),
}
ACCELERATORS = ["nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-l4", "nvidia-tesla-a100"]


@dataclass
class FakeCompute:
    """The cloud's state and the scripts a test sets (capacity, failures, preemptions)."""

    project: str
    clock: ShiftedClock
    no_capacity: set[tuple[str, str]] = field(default_factory=set)  # (machine type, zone), spot
    failures: list[tuple[str, int, str, str]] = field(
        default_factory=list
    )  # (call, status, reason, msg)
    operation_errors: list[tuple[str, str]] = field(
        default_factory=list
    )  # next inserts: (code, msg)
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)  # name → resource
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    consoles: dict[str, str] = field(default_factory=dict)  # name → serial port 1's output
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(4_000_000_000_000_000_001))

    def fail_next(
        self, call: str, status: int, reason: str, message: str = "", times: int = 1
    ) -> None:
        self.failures.extend([(call, status, reason, message or f"scripted {reason}")] * times)

    def preempt(self, name: str) -> None:
        """The cloud takes the spot VM back: STOPPING now (instanceTerminationAction DELETE)."""
        with self.lock:
            vm = self.instances[name]
            vm["status"] = "STOPPING"
            vm["lastStopTimestamp"] = _stamp(self.clock.now())

    def write_console(self, name: str, text: str) -> None:
        """The VM's serial port 1 gets ``text`` (its startup script's output, say)."""
        with self.lock:
            self.consoles[name] = self.consoles.get(name, "") + text

    def vanish(self, name: str) -> None:
        """The deletion finishes: the API has no record of it any more."""
        with self.lock:
            self.instances.pop(name, None)

    # -- the API --------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        prefix = f"/compute/v1/projects/{self.project}"
        if path == "/token":  # OAuth 2.0 token endpoint of a credentials file pointed here
            return 200, {"access_token": "fake-token", "expires_in": 3600, "token_type": "Bearer"}
        if not path.startswith(prefix):
            return _error(404, "notFound", f"The resource '{path}' was not found")
        rest = path[len(prefix) :]
        call = _call_name(method, rest)
        self.calls.append((call, rest, body if isinstance(body, dict) else {}))
        for index, (name, status, reason, message) in enumerate(self.failures):
            if name == call:
                del self.failures[index]
                return _error(status, reason, message)
        with self.lock:
            return self._route(call, rest, query, body)

    def _route(self, call: str, rest: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        parts = rest.strip("/").split("/")
        if call == "zones.list":
            items = [
                {
                    "kind": "compute#zone",
                    "name": z,
                    "region": f"{BASE}/projects/{self.project}/regions/{r}",
                    "status": "UP",
                }
                for z, r in ZONES.items()
            ]
            return _page("compute#zoneList", items, query)
        zone = parts[1] if len(parts) > 1 else ""
        if parts[0] == "zones" and zone not in ZONES:
            return _error(
                404,
                "notFound",
                f"The resource 'projects/{self.project}/zones/{zone}' was not found",
            )
        if call == "machineTypes.list":
            items = [
                {
                    "kind": "compute#machineType",
                    "name": name,
                    "zone": zone,
                    "guestCpus": cpus,
                    "memoryMb": memory,
                    **(
                        {
                            "accelerators": [
                                {"guestAcceleratorType": a, "guestAcceleratorCount": n}
                                for a, n in accs
                            ]
                        }
                        if accs
                        else {}
                    ),
                }
                for name, (cpus, memory, accs) in MACHINES.items()
            ]
            return _page("compute#machineTypeList", items, query)
        if call == "acceleratorTypes.list":
            return _page(
                "compute#acceleratorTypeList",
                [{"name": a, "zone": zone} for a in ACCELERATORS],
                query,
            )
        return self._instances(call, parts, zone, query, body)

    def _instances(
        self, call: str, parts: list[str], zone: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        if call == "instances.insert":
            return self._insert(zone, body)
        if call == "instances.get":
            vm = self.instances.get(parts[3])
            if vm is None or _tail(vm["zone"]) != zone:
                return _error(
                    404,
                    "notFound",
                    f"The resource 'projects/{self.project}/zones/{zone}/instances/{parts[3]}' was not found",
                )
            return 200, self._view(vm)
        if call == "instances.getSerialPortOutput":
            vm = self.instances.get(parts[3])
            if vm is None or _tail(vm["zone"]) != zone:
                return _error(
                    404,
                    "notFound",
                    f"The resource 'projects/{self.project}/zones/{zone}/instances/{parts[3]}' was not found",
                )
            if query.get("port", "1") != "1":
                return _error(400, "invalid", "the fake keeps serial port 1 only")
            contents = self.consoles.get(parts[3], "")
            return 200, {
                "kind": "compute#serialPortOutput",
                "contents": contents,
                "start": "0",
                "next": str(len(contents)),
            }
        if call == "instances.delete":
            vm = self.instances.get(parts[3])
            if vm is None:
                return _error(
                    404,
                    "notFound",
                    f"The resource 'projects/{self.project}/zones/{zone}/instances/{parts[3]}' was not found",
                )
            del self.instances[parts[3]]
            return 200, self._operation(zone, "delete", vm)
        if call == "instances.aggregatedList":
            matched = [
                self._view(vm)
                for vm in self.instances.values()
                if _matches(vm, query.get("filter", ""))
            ]
            zones: dict[str, Any] = {}
            for vm in matched:
                zones.setdefault(f"zones/{_tail(vm['zone'])}", {"instances": []})[
                    "instances"
                ].append(vm)
            return 200, {"kind": "compute#instanceAggregatedList", "items": zones}
        if call == "zoneOperations.wait":
            return 200, {
                "kind": "compute#operation",
                "name": parts[3],
                "status": "DONE",
                "progress": 100,
            }
        return _error(400, "invalid", f"the fake does not serve {call} {'/'.join(parts)}")

    def _insert(self, zone: str, body: dict[str, Any]) -> tuple[int, Any]:
        machine = _tail(body.get("machineType", ""))
        if machine not in MACHINES:
            return _error(
                400,
                "invalid",
                f"Invalid value for field 'resource.machineType': 'zones/{zone}/machineTypes/{machine}'. "
                f"Machine type with name '{machine}' does not exist in zone '{zone}'.",
            )
        if body["name"] in self.instances:
            return _error(409, "alreadyExists", f"The resource '{body['name']}' already exists")
        vm = {
            **body,
            "kind": "compute#instance",
            "id": str(next(self._ids)),
            "zone": f"{BASE}/projects/{self.project}/zones/{zone}",
            "machineType": f"{BASE}/projects/{self.project}/zones/{zone}/machineTypes/{machine}",
            "creationTimestamp": _stamp(self.clock.now()),
            "status": "PROVISIONING",
        }
        spot = (body.get("scheduling") or {}).get("provisioningModel") == "SPOT"
        failed = None
        if self.operation_errors:
            failed = self.operation_errors.pop(0)
        elif spot and (machine, zone) in self.no_capacity:
            failed = (
                "ZONE_RESOURCE_POOL_EXHAUSTED",
                f"The zone 'projects/{self.project}/zones/{zone}' does not have enough resources available "
                "to fulfill the request. Try a different zone, or try again later.",
            )
        operation = self._operation(zone, "insert", vm)
        if failed is not None:
            operation["error"] = {"errors": [{"code": failed[0], "message": failed[1]}]}
            operation["httpErrorStatusCode"] = 503
        else:
            self.instances[body["name"]] = vm
        return 200, operation

    def _operation(self, zone: str, kind: str, vm: dict[str, Any]) -> dict[str, Any]:
        return {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": f"operation-{next(self._ids)}",
            "zone": f"{BASE}/projects/{self.project}/zones/{zone}",
            "operationType": kind,
            "targetLink": f"{BASE}/projects/{self.project}/zones/{zone}/instances/{vm.get('name')}",
            "targetId": vm.get("id", "0"),
            "status": "DONE",
            "progress": 100,
        }

    def _view(self, vm: dict[str, Any]) -> dict[str, Any]:
        if (
            vm["status"] == "PROVISIONING"
            and self.clock.now() - _seconds(vm["creationTimestamp"]) >= BOOT_S
        ):
            vm["status"] = "RUNNING"
        return dict(vm)


def _call_name(method: str, rest: str) -> str:
    parts = rest.strip("/").split("/")
    if parts == ["zones"]:
        return "zones.list"
    if parts[:2] == ["aggregated", "instances"]:
        return "instances.aggregatedList"
    if len(parts) >= 3 and parts[0] == "zones":
        kind = parts[2]
        if kind == "machineTypes":
            return "machineTypes.list"
        if kind == "acceleratorTypes":
            return "acceleratorTypes.list"
        if kind == "operations":
            return "zoneOperations.wait"
        if kind == "instances":
            if len(parts) == 3:
                return "instances.insert" if method == "POST" else "instances.list"
            if len(parts) == 5 and parts[4] == "serialPort":
                return "instances.getSerialPortOutput"
            return {"GET": "instances.get", "DELETE": "instances.delete"}.get(
                method, "instances.other"
            )
    return f"{method} {rest}"


def _page(kind: str, items: list[Any], query: dict[str, str]) -> tuple[int, Any]:
    start = int(query.get("pageToken") or 0)
    answer: dict[str, Any] = {"kind": kind, "items": items[start : start + PAGE]}
    if start + PAGE < len(items):
        answer["nextPageToken"] = str(start + PAGE)
    return 200, answer


_TERM = re.compile(
    r'^(?:labels\.(?P<key>[a-z0-9_-]+)(?::\*|\s*=\s*"(?P<value>[^"]*)")|id\s*=\s*(?P<id>\d+))$'
)


def _matches(vm: dict[str, Any], text: str) -> bool:
    for term in [t.strip().strip("()").strip() for t in text.split(" AND ") if t.strip()]:
        match = _TERM.match(term)
        if match is None:
            raise ValueError(f"the fake cannot read the filter term {term!r}")
        labels = vm.get("labels") or {}
        if match["id"] is not None:
            if vm["id"] != match["id"]:
                return False
        elif match["key"] not in labels or (
            match["value"] is not None and labels[match["key"]] != match["value"]
        ):
            return False
    return True


def _error(status: int, reason: str, message: str) -> tuple[int, Any]:
    return status, {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }


def _tail(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _stamp(seconds: float) -> str:
    zone = dt.timezone(dt.timedelta(hours=-8))
    return dt.datetime.fromtimestamp(seconds, zone).isoformat(timespec="milliseconds")


def _seconds(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp).timestamp()


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def _serve(self) -> None:
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:  # a form post (the token request)
            body = {}
        status, answer = self.server.cloud.handle(self.command, url.path, query, body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serve(cloud: FakeCompute) -> Iterator[str]:
    """The fake API on a free local port; yields its URL (``endpoint_url``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.cloud = cloud  # type: ignore[attr-defined]
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def make_provider(cloud: FakeCompute, url: str, **options: Any) -> Any:
    from google.auth.credentials import AnonymousCredentials

    from spothop.providers.gcp import GcpProvider

    return GcpProvider(
        project=cloud.project,
        regions=options.pop("regions", ["us-central1"]),
        credentials=AnonymousCredentials(),
        endpoint_url=url,
        clock=cloud.clock,
        **options,
    )


def conformance_harness(harness_type: Any) -> Iterator[Any]:
    """The conformance suite's Harness for Compute Engine on this fake (tests/providers/conftest.py).

    Spot and on-demand g2-standard-4 in us-central1-a; a2-highgpu-1g there has
    no spot capacity now; ids are Compute Engine's (numeric), codes its own.
    """
    from spothop.providers.base import LaunchRequest
    from spothop.providers.local.metadata.gcp import ERROR_CODES, INSTANCE_IDS

    cloud = FakeCompute("spothop-test", ShiftedClock())
    cloud.no_capacity.add(("a2-highgpu-1g", "us-central1-a"))
    with serve(cloud) as url:
        provider = make_provider(cloud, url)

        def request(instance_type: str, spot: bool = True) -> LaunchRequest:
            return LaunchRequest(
                instance_type=instance_type,
                region="us-central1",
                zone="us-central1-a",
                spot=spot,
                bootstrap_command=["python", "-m", "spothop.agent", "run", "--", "sleep", "600"],
            )

        def wait_state(instance_id: str, states: frozenset[Any]) -> Any:
            for _ in range(60):
                instance = provider.describe(instance_id)
                if instance.state in states:
                    return instance
                cloud.clock.advance(1)
            raise AssertionError(f"{instance_id} never reached {sorted(states)}")

        yield harness_type(
            provider=provider,
            spot=request("g2-standard-4"),
            on_demand=request("g2-standard-4", spot=False),
            unavailable=request("a2-highgpu-1g"),
            codes=ERROR_CODES,
            ids=INSTANCE_IDS,
            pass_time=cloud.clock.advance,
            wait_state=wait_state,
        )
