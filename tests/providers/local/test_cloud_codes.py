"""Every imitated cloud declares its error codes and id shape beside its metadata protocol."""

from __future__ import annotations

import pytest

from spothop.providers.local.metadata import PROTOCOLS
from spothop.providers.local.metadata.codes import DECIMAL_DIGITS, ErrorCodes, InstanceIdShape
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_each_protocol_has_its_codes_and_a_working_id_shape(protocol: str) -> None:
    handler = PROTOCOLS[protocol]
    assert isinstance(handler.ERROR_CODES, ErrorCodes) and handler.ERROR_CODES.capacity_unavailable
    ids = {handler.INSTANCE_IDS.new() for _ in range(50)}
    assert len(ids) == 50 and all(handler.INSTANCE_IDS.matches(i) for i in ids)


def test_each_simulated_cloud_answers_with_its_protocols_codes() -> None:
    world = load_world()
    for name in world.cloud_names:
        provider = LocalProvider(name, world=world)
        assert provider.codes is PROTOCOLS[world.cloud(name).protocol].ERROR_CODES


def test_an_id_shape_checks_prefix_alphabet_length_and_leading_character() -> None:
    shape = InstanceIdShape(prefix="n-", alphabet=DECIMAL_DIGITS, length=4, leading="123456789")
    assert shape.matches("n-1234") and not shape.matches("n-0123")
    assert (
        not shape.matches("n-12345") and not shape.matches("x-1234") and not shape.matches("n-12a4")
    )


def test_a_cloud_without_a_bid_code_refuses_a_bid_as_an_invalid_parameter() -> None:
    codes = ErrorCodes("NoCapacity", "NotFound", "BadValue", "Internal")
    assert codes.bid_refused == "BadValue"
    assert (
        ErrorCodes(
            "NoCapacity", "NotFound", "BadValue", "Internal", price_too_low="BidTooLow"
        ).bid_refused
        == "BidTooLow"
    )
