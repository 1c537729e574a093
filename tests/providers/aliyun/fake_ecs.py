"""A fake ECS RPC API on a local port, for the tests: the real SDK client over real HTTP.

The provider's client talks to this server (``endpoint_url`` ``http://…``), so
the SDK's own request signing, query flattening (``Tag.1.Key``), JSON parsing
and error raising all run. It serves the documented answers
(alibabacloud.com/help/en/ecs/developer-reference) of
``DescribeAvailableResource``, ``DescribeSpotPriceHistory`` (CNY in ``cn-*``),
``RunInstances`` (``OperationDenied.NoStock``,
``InvalidSpotPriceLimit.LowerThanPublicPrice``, ``InvalidParameter``),
``DescribeInstances`` (ids, tags, ``NextToken`` pages) and ``DeleteInstance``;
errors as ECS's JSON (``Code``, ``Message``, ``RequestId``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import secrets
import string
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

BOOT_S = 5.0
# (zone, type) → (spot CNY/h, pay-as-you-go CNY/h)
MARKETS = {
    ("cn-hangzhou-i", "ecs.gn7i-c8g1.2xlarge"): (2.752, 14.86),
    ("cn-hangzhou-j", "ecs.gn7i-c8g1.2xlarge"): (2.654, 14.86),
    ("cn-hangzhou-i", "ecs.gn6i-c4g1.xlarge"): (1.569, 10.99),
    ("cn-hangzhou-i", "ecs.g7.large"): (0.12, 0.5),  # no GPU: the catalog has no row for it
}


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


@dataclass
class FakeEcs:
    """The cloud's state and what a test scripts (stock, failures, reclaims)."""

    clock: ShiftedClock
    sold_out: set[tuple[str, str]] = field(default_factory=set)  # (zone, type): no spot stock
    failures: list[tuple[str, str, str, int]] = field(
        default_factory=list
    )  # (action, code, msg, status)
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)  # ClientToken → instance id
    consoles: dict[str, str] = field(default_factory=dict)  # instance id → its console's text
    lock: threading.Lock = field(default_factory=threading.Lock)
    page_size: int | None = None  # cap DescribeInstances pages (paging tests)

    def fail_next(
        self, action: str, code: str, message: str = "", status: int = 400, times: int = 1
    ) -> None:
        self.failures.extend([(action, code, message or f"scripted {code}", status)] * times)

    def reclaim(self, instance_id: str) -> None:
        """ECS starts reclaiming the spot instance (its notice): an OperationLock ``Recycling``."""
        with self.lock:
            self.instances[instance_id]["OperationLocks"] = {
                "LockReason": [{"LockReason": "Recycling"}]
            }

    def release(self, instance_id: str) -> None:
        with self.lock:
            self.instances[instance_id]["Status"] = "Stopped"

    def handle(self, query: dict[str, str]) -> tuple[int, Any]:
        action = query.get("Action", "")
        self.calls.append((action, query))
        for index, (name, code, message, status) in enumerate(self.failures):
            if name == action:
                del self.failures[index]
                return _error(code, message, status)
        with self.lock:
            handler = getattr(self, f"_{action}", None)
            if handler is None:
                return _error(
                    "InvalidAction.NotFound", f"Specified api {action} is not found.", 404
                )
            return handler(query)

    def _DescribeAvailableResource(self, query: dict[str, str]) -> tuple[int, Any]:
        zones: dict[str, list[dict[str, str]]] = {}
        for zone, instance_type in MARKETS:
            status = "SoldOut" if (zone, instance_type) in self.sold_out else "Available"
            zones.setdefault(zone, []).append(
                {"Value": instance_type, "Status": status, "StatusCategory": "WithStock"}
            )
        rows = [
            {
                "ZoneId": zone,
                "Status": "Available",
                "AvailableResources": {
                    "AvailableResource": [
                        {"Type": "InstanceType", "SupportedResources": {"SupportedResource": types}}
                    ]
                },
            }
            for zone, types in zones.items()
        ]
        return 200, {"RequestId": _request_id(), "AvailableZones": {"AvailableZone": rows}}

    def _DescribeSpotPriceHistory(self, query: dict[str, str]) -> tuple[int, Any]:
        stamp = _stamp(self.clock.now() - 600)
        rows = [
            {
                "ZoneId": zone,
                "InstanceType": instance_type,
                "NetworkType": "vpc",
                "IoOptimized": "optimized",
                "SpotPrice": spot,
                "OriginPrice": origin,
                "Timestamp": stamp,
            }
            for (zone, instance_type), (spot, origin) in MARKETS.items()
            if instance_type == query.get("InstanceType")
        ]
        return 200, {
            "RequestId": _request_id(),
            "Currency": "CNY",
            "SpotPrices": {"SpotPriceType": rows},
        }

    def _RunInstances(self, query: dict[str, str]) -> tuple[int, Any]:
        instance_type, zone = query.get("InstanceType", ""), query.get("ZoneId", "cn-hangzhou-i")
        if not any(t == instance_type for _, t in MARKETS):
            return _error(
                "InvalidParameter",
                f"The specified parameter InstanceType '{instance_type}' is not valid.",
            )
        token = query.get("ClientToken")
        if token and token in self.tokens:
            return 200, {
                "RequestId": _request_id(),
                "InstanceIdSets": {"InstanceIdSet": [self.tokens[token]]},
            }
        strategy = query.get("SpotStrategy", "NoSpot")
        if strategy != "NoSpot":
            if (zone, instance_type) in self.sold_out or (zone, instance_type) not in MARKETS:
                return _error(
                    "OperationDenied.NoStock",
                    "The requested resource is sold out in the specified zone; try other types of resources or other regions and zones.",
                    403,
                )
            limit = query.get("SpotPriceLimit")
            if (
                strategy == "SpotWithPriceLimit"
                and limit is not None
                and float(limit) < MARKETS[(zone, instance_type)][0]
            ):
                return _error(
                    "InvalidSpotPriceLimit.LowerThanPublicPrice",
                    "The specified parameter spotPriceLimit can't be lower than current public price.",
                )
        instance_id = "i-" + "".join(
            secrets.choice(string.ascii_lowercase + string.digits) for _ in range(20)
        )
        tags = []
        for n in range(1, 21):
            if f"Tag.{n}.Key" in query:
                tags.append(
                    {"TagKey": query[f"Tag.{n}.Key"], "TagValue": query.get(f"Tag.{n}.Value", "")}
                )
        self.instances[instance_id] = {
            "InstanceId": instance_id,
            "InstanceName": query.get("InstanceName", instance_id),
            "RegionId": query.get("RegionId"),
            "ZoneId": zone,
            "InstanceType": instance_type,
            "InstanceChargeType": "PostPaid",
            "SpotStrategy": strategy,
            "SpotDuration": int(query.get("SpotDuration", "1")),
            "Status": "Pending",
            "CreationTime": _stamp(self.clock.now()),
            "Tags": {"Tag": tags},
            "OperationLocks": {"LockReason": []},
            "_created": self.clock.now(),
            "_query": query,
        }
        if token:
            self.tokens[token] = instance_id
        return 200, {"RequestId": _request_id(), "InstanceIdSets": {"InstanceIdSet": [instance_id]}}

    def _DescribeInstances(self, query: dict[str, str]) -> tuple[int, Any]:
        rows = [vm for vm in self.instances.values() if vm["RegionId"] == query.get("RegionId")]
        if "InstanceIds" in query:
            wanted = set(json.loads(query["InstanceIds"]))
            rows = [vm for vm in rows if vm["InstanceId"] in wanted]
        for n in range(1, 21):
            key = query.get(f"Tag.{n}.Key")
            if key is None:
                break
            value = query.get(f"Tag.{n}.Value")
            rows = [
                vm
                for vm in rows
                if any(
                    t["TagKey"] == key and (value is None or t["TagValue"] == value)
                    for t in vm["Tags"]["Tag"]
                )
            ]
        size = min(int(query.get("MaxResults", "10")), self.page_size or 100)
        start = int(query.get("NextToken") or 0)
        page = [self._view(vm) for vm in rows[start : start + size]]
        answer: dict[str, Any] = {
            "RequestId": _request_id(),
            "Instances": {"Instance": page},
            "TotalCount": len(rows),
        }
        if start + size < len(rows):
            answer["NextToken"] = str(start + size)
        return 200, answer

    def _GetInstanceConsoleOutput(self, query: dict[str, str]) -> tuple[int, Any]:
        instance_id = query.get("InstanceId", "")
        if instance_id not in self.instances:
            return _error(
                "InvalidInstanceId.NotFound",
                f"The specified InstanceId {instance_id} does not exist.",
                404,
            )
        text = self.consoles.get(instance_id, "")
        return 200, {
            "RequestId": _request_id(),
            "InstanceId": instance_id,
            "ConsoleOutput": base64.b64encode(text.encode()).decode(),
            "LastUpdateTime": _stamp(self.clock.now()),
        }

    def _DeleteInstance(self, query: dict[str, str]) -> tuple[int, Any]:
        if self.instances.pop(query.get("InstanceId", ""), None) is None:
            return _error(
                "InvalidInstanceId.NotFound",
                f"The specified InstanceId {query.get('InstanceId')} does not exist.",
                404,
            )
        return 200, {"RequestId": _request_id()}

    def _view(self, vm: dict[str, Any]) -> dict[str, Any]:
        if vm["Status"] == "Pending" and self.clock.now() - vm["_created"] >= BOOT_S:
            vm["Status"] = "Running"
        return {k: v for k, v in vm.items() if not k.startswith("_")}


def _error(code: str, message: str, status: int = 400) -> tuple[int, Any]:
    return status, {
        "RequestId": _request_id(),
        "HostId": "ecs.aliyuncs.com",
        "Code": code,
        "Message": message,
    }


def _request_id() -> str:
    return secrets.token_hex(16).upper()


def _stamp(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def _serve(self) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        form = self.rfile.read(length).decode() if length else ""
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        query |= {k: v[0] for k, v in parse_qs(form).items()}
        query.setdefault(
            "Action", self.headers.get("x-acs-action", "")
        )  # ACS3 signing: in a header
        status, answer = self.server.cloud.handle(query)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _serve

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serve(cloud: FakeEcs) -> Iterator[str]:
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


FAKE_KEY_ID = "LTAI5tFakeKeyForTests01"
FAKE_SECRET = "fake-secret-for-the-tests"


def fake_credentials(monkeypatch: Any) -> None:
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", FAKE_SECRET)
    monkeypatch.delenv("ALIBABA_CLOUD_SECURITY_TOKEN", raising=False)
    for proxy in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(proxy, raising=False)


def make_provider(cloud: FakeEcs, url: str, **options: Any) -> Any:
    from spothop.providers.aliyun import AliyunProvider

    return AliyunProvider(
        regions=["cn-hangzhou"],
        endpoint_url=url,
        clock=cloud.clock,
        image_id="m-fakeimage",
        **options,
    )


def conformance_harness(monkeypatch: Any, harness_type: Any) -> Iterator[Any]:
    """The conformance suite's Harness for ECS on this fake (tests/providers/conftest.py).

    Spot and pay-as-you-go ecs.gn7i-c8g1.2xlarge in cn-hangzhou-i (prices in
    CNY, normalised to USD); ecs.gn6i-c4g1.xlarge there is sold out for spot.
    """
    from spothop.providers.base import LaunchRequest
    from spothop.providers.local.metadata.aliyun import ERROR_CODES, INSTANCE_IDS

    fake_credentials(monkeypatch)
    cloud = FakeEcs(ShiftedClock())
    cloud.sold_out.add(("cn-hangzhou-i", "ecs.gn6i-c4g1.xlarge"))
    with serve(cloud) as url:
        provider = make_provider(cloud, url)

        def request(instance_type: str, spot: bool = True) -> LaunchRequest:
            return LaunchRequest(
                instance_type=instance_type,
                region="cn-hangzhou",
                zone="cn-hangzhou-i",
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
            spot=request("ecs.gn7i-c8g1.2xlarge"),
            on_demand=request("ecs.gn7i-c8g1.2xlarge", spot=False),
            unavailable=request("ecs.gn6i-c4g1.xlarge"),
            codes=ERROR_CODES,
            ids=INSTANCE_IDS,
            pass_time=cloud.clock.advance,
            wait_state=wait_state,
        )
