"""The EC2 provider's console output (GetConsoleOutput) and where an instance's spothop comes from."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spothop.errors import InstanceNotFound, InvalidRequest
from spothop.providers.aws import AwsProvider
from spothop.providers.base import Distribution
from spothop.providers.extensions import ConsoleOutput
from spothop.providers.registry import get_provider
from tests.providers.aws.moto_cloud import (
    REGION,
    Ec2Market,
    fake_credentials,
    in_process,
    make_provider,
)
from tests.providers.aws.test_ec2 import request, user_data

WHEEL = Distribution(
    url="http://192.0.2.2:8080/v1/dist/" + "a" * 64 + "/spothop-0.1.0-py3-none-any.whl",
    sha256="a" * 64,
    filename="spothop-0.1.0-py3-none-any.whl",
)


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[AwsProvider, Ec2Market]]:
    fake_credentials(monkeypatch, tmp_path)
    with in_process():
        yield make_provider()


def test_the_console_is_ec2s_latest_output_decoded(ec2: tuple[AwsProvider, Ec2Market]) -> None:
    provider, market = ec2
    assert isinstance(provider, ConsoleOutput)
    instance = provider.launch(request())
    # moto answers a canned kernel log, base64 as EC2 does: the provider shows it decoded.
    assert provider.console_output(instance.instance_id).startswith("Linux version")
    said = "spothop: could not download the wheel; not starting the agent\n"

    def answer(**_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        output = base64.b64encode(said.encode()).decode()
        return AWSResponse("https://ec2.amazonaws.com/", 200, {}, None), {
            "InstanceId": instance.instance_id,
            "Output": output,
            "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": {}},
        }

    provider.client(REGION).meta.events.register("before-call.ec2.GetConsoleOutput", answer)
    assert provider.console_output(instance.instance_id) == said
    (asked,) = [p for name, p in market.calls if name == "GetConsoleOutput"][-1:]
    assert asked == {"InstanceId": instance.instance_id, "Latest": True}
    with pytest.raises(InstanceNotFound):
        provider.console_output("i-0000000000000dead")


def test_the_wheel_installs_with_its_dependencies_unless_the_image_has_them(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, _ = ec2
    stock = user_data(provider, provider.launch(request(distribution=WHEEL)).instance_id)
    assert "/opt/spothop/bin/pip install" in stock and "--without-pip" not in stock
    provider.install_dependencies = False  # a custom AMI whose python3 has the dependencies
    custom = user_data(provider, provider.launch(request(distribution=WHEEL)).instance_id)
    assert "--without-pip" in custom and "/opt/spothop/bin/pip install" not in custom
    for script in (stock, custom):
        assert WHEEL.url in script and "spothop: installed spothop" in script


@pytest.mark.parametrize(("value", "expected"), [("0", False), ("false", False), ("1", True)])
def test_the_dependencies_option_reads_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str, expected: bool
) -> None:
    fake_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("SPOTHOP_AWS_INSTALL_DEPENDENCIES", value)
    with in_process():
        provider = get_provider("aws")
        assert isinstance(provider, AwsProvider)
        assert provider.install_dependencies is expected


@pytest.mark.parametrize(
    ("code", "option"),
    [
        ("InvalidAMIID.NotFound", "SPOTHOP_AWS_IMAGE_ID"),
        ("InvalidGroup.NotFound", "SPOTHOP_AWS_SECURITY_GROUP_IDS"),
        ("InvalidKeyPair.NotFound", "SPOTHOP_AWS_KEY_NAME"),
    ],
)
def test_a_configuration_error_names_the_option_that_fixes_it(
    ec2: tuple[AwsProvider, Ec2Market], code: str, option: str
) -> None:
    provider, market = ec2
    market.fail_next("RunInstances", code, "The id 'x-0badbad' does not exist")
    with pytest.raises(InvalidRequest) as raised:
        provider.launch(request())
    assert raised.value.code == code and "x-0badbad" in str(raised.value)
    assert option in str(raised.value)
