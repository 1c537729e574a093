"""EC2 on moto for the tests: in-process (``mock_aws``) or moto's standalone server, plus what moto lacks.

moto keeps instances, tags, fleets and launch templates as EC2 does, but it
has no market: every spot price is 0.00001, no capacity ever runs out, no bid
is too low, any instance type launches. :class:`Ec2Market` adds those as
botocore event hooks on the provider's own client (so they work the same
against the in-process mock and the server): a spot price per type, markets
with no capacity (``InsufficientInstanceCapacity``), bids under the price
(``SpotMaxPriceTooLow``), unknown types (``InvalidParameterValue``), and
scripted failures (``fail_next``: any EC2 error code, the next N calls of an
operation). Each answer is what EC2 documents for the case.

Time: moto stamps ``LaunchTime`` on the wall; :class:`ShiftedClock` is the
wall plus whatever the test lets pass, so a test bills ten minutes in none.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("boto3")
moto = pytest.importorskip("moto")

from botocore.awsrequest import AWSResponse  # noqa: E402

from spothop.providers.aws import AwsProvider  # noqa: E402

REGION = "us-east-1"
FAKE_KEY_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key pair: moto accepts any
FAKE_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


class ShiftedClock:
    """The wall clock plus the seconds a test let pass (``advance``); ``sleep`` passes time at once."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.slept: list[float] = []

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.offset += max(0.0, seconds)


def fake_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """moto's credentials in the environment, and no user file anywhere boto3 could read."""
    for variable in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@dataclass
class Ec2Market:
    """EC2 behaviour moto does not have, served by hooks on one provider's EC2 client."""

    prices: dict[str, float] = field(default_factory=lambda: {"g5.xlarge": 0.45})
    no_capacity: set[tuple[str, str]] = field(default_factory=set)  # (type, zone), spot only
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (operation, code, message)
    scores: dict[str, int] | None = (
        None  # type → spot placement score in every zone; None: no such API
    )
    marked: dict[str, float] = field(default_factory=dict)  # instance id → when EC2 marked it
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def fail_next(self, operation: str, code: str, message: str = "", times: int = 1) -> None:
        self.failures.extend([(operation, code, message or f"scripted {code}")] * times)

    def attach(self, provider: AwsProvider, region: str = REGION) -> None:
        events = provider.client(region).meta.events
        events.register("before-parameter-build.ec2", self._remember)
        events.register("before-call.ec2", self._answer)
        events.register("after-call.ec2.DescribeSpotPriceHistory", self._priced)
        events.register("after-call.ec2.DescribeInstances", self._requested)

    def interrupt(self, instance_id: str, at: float) -> None:
        """EC2 marks the instance's spot request for termination (its notice), at ``at``."""
        self.marked[instance_id] = at

    def _requested(self, parsed: dict[str, Any], **_: Any) -> None:
        # EC2 names the spot request of every spot instance; moto leaves it empty.
        for reservation in parsed.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                if instance.get("InstanceLifecycle") == "spot":
                    instance["SpotInstanceRequestId"] = "sir-" + instance["InstanceId"][2:]

    def _requests(self, params: dict[str, Any]) -> Any:
        import datetime as dt

        rows = []
        for request_id in params.get("SpotInstanceRequestIds", []):
            instance_id = "i-" + request_id[4:]
            marked = instance_id in self.marked
            status = {"Code": "marked-for-termination" if marked else "fulfilled"}
            if marked:
                status["UpdateTime"] = dt.datetime.fromtimestamp(self.marked[instance_id], dt.UTC)
            rows.append(
                {"SpotInstanceRequestId": request_id, "InstanceId": instance_id, "Status": status}
            )
        return AWSResponse("https://ec2.amazonaws.com/", 200, {}, None), {
            "SpotInstanceRequests": rows,
            "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": {}},
        }

    def _remember(
        self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        context["spothop_params"] = dict(params)
        self.calls.append((model.name, dict(params)))

    def _answer(self, model: Any, context: dict[str, Any], **_: Any) -> Any:
        operation = model.name
        for index, (name, code, message) in enumerate(self.failures):
            if name == operation:
                del self.failures[index]
                return _error(code, message)
        if operation == "RunInstances":
            return self._run(context.get("spothop_params", {}))
        if operation == "DescribeSpotInstanceRequests":
            return self._requests(context.get("spothop_params", {}))
        if operation == "GetSpotPlacementScores" and self.scores is not None:
            return self._score(context.get("spothop_params", {}))
        return None

    def _score(self, params: dict[str, Any]) -> Any:
        (instance_type,) = params["InstanceTypes"]
        score = self.scores.get(instance_type, 10) if self.scores is not None else 10
        rows = [
            {"Region": REGION, "AvailabilityZoneId": f"use1-az{n}", "Score": score}
            for n in range(1, 7)
        ]
        return AWSResponse("https://ec2.amazonaws.com/", 200, {}, None), {
            "SpotPlacementScores": rows,
            "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": {}},
        }

    def _run(self, params: dict[str, Any]) -> Any:
        instance_type = params.get("InstanceType", "")
        zone = (params.get("Placement") or {}).get("AvailabilityZone", "")
        if "." not in instance_type or instance_type.startswith("no."):
            return _error(
                "InvalidParameterValue", f"Invalid value '{instance_type}' for InstanceType."
            )
        market = params.get("InstanceMarketOptions")
        if market:
            if (instance_type, zone) in self.no_capacity:
                return _error(
                    "InsufficientInstanceCapacity",
                    f"We currently do not have sufficient {instance_type} capacity in the "
                    f"Availability Zone you requested ({zone}).",
                )
            bid = (market.get("SpotOptions") or {}).get("MaxPrice")
            price = self.prices.get(instance_type)
            if bid is not None and price is not None and float(bid) < price:
                return _error(
                    "SpotMaxPriceTooLow",
                    f"Your Spot request price of {bid} is lower than the minimum required Spot "
                    f"request fulfillment price of {price}.",
                )
        return None

    def _priced(self, parsed: dict[str, Any], **_: Any) -> None:
        for row in parsed.get("SpotPriceHistory", []):
            price = self.prices.get(row["InstanceType"])
            if price is not None:
                row["SpotPrice"] = f"{price}"


def _error(code: str, message: str, status: int = 400) -> tuple[AWSResponse, dict[str, Any]]:
    http = AWSResponse("https://ec2.amazonaws.com/", status, {}, None)
    return http, {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
    }


# moto launches any AMI id without looking it up (looking up its 1,300 images costs seconds).
IMAGE_ID = "ami-0123456789abcdef0"


def make_provider(
    clock: ShiftedClock | None = None, endpoint_url: str | None = None, **options: Any
) -> tuple[AwsProvider, Ec2Market]:
    provider = AwsProvider(
        regions=[REGION],
        image_id=IMAGE_ID,
        endpoint_url=endpoint_url,
        clock=clock or ShiftedClock(),
        **options,
    )
    market = Ec2Market()
    market.attach(provider)
    return provider, market


@contextmanager
def in_process() -> Iterator[None]:
    with moto.mock_aws():
        yield


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's standalone server on a free port; yields its URL and stops it after."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def environment_is_moto() -> bool:
    return os.environ.get("AWS_ACCESS_KEY_ID") == FAKE_KEY_ID


def conformance_harness(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, harness_type: Any
) -> Iterator[Any]:
    """The conformance suite's Harness for EC2 on in-process moto (``tests/providers/conftest.py``).

    Spot launches of g5.xlarge in us-east-1a; g4dn.xlarge there has no spot
    capacity (the market above says so, as EC2 would); ids are moto's
    (``i-`` and 17 hex digits, not always ``i-0``), codes EC2's own.
    """
    from spothop.providers.base import LaunchRequest
    from spothop.providers.local.metadata.aws import ERROR_CODES
    from spothop.providers.local.metadata.codes import HEX_DIGITS, InstanceIdShape
    from tests.waiting import wait_for

    fake_credentials(monkeypatch, tmp_path)
    with in_process():
        clock = ShiftedClock()
        provider, market = make_provider(clock)
        market.no_capacity.add(("g4dn.xlarge", "us-east-1a"))

        def request(instance_type: str, spot: bool = True) -> LaunchRequest:
            return LaunchRequest(
                instance_type=instance_type,
                region=REGION,
                zone="us-east-1a",
                spot=spot,
                bootstrap_command=["python", "-m", "spothop.agent", "run", "--", "sleep", "600"],
            )

        def wait_state(instance_id: str, states: frozenset[Any]) -> Any:
            return wait_for(
                lambda: (i := provider.describe(instance_id)).state in states and i,
                timeout_s=20,
                what=f"{instance_id} in {sorted(states)}",
            )

        yield harness_type(
            provider=provider,
            spot=request("g5.xlarge"),
            on_demand=request("g5.xlarge", spot=False),
            unavailable=request("g4dn.xlarge"),
            codes=ERROR_CODES,
            ids=InstanceIdShape(prefix="i-", alphabet=HEX_DIGITS, length=17),
            pass_time=clock.advance,
            wait_state=wait_state,
        )
