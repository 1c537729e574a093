"""Test helpers that ship with spothop: a fake provider on an injectable clock, and factories.

For the controller's tests and for users testing their own jobs, with no
process, port or file::

    from spothop.market import ManualClock
    from spothop.testing import FakeProvider, make_market, make_offering

    clock = ManualClock()
    provider = FakeProvider(markets=[make_market(make_offering(), capacity=1)], clock=clock)
    instance = provider.launch(LaunchRequest("gpu.h100x1", "fake-1", "fake-1a"))
    provider.preempt(instance.instance_id, lead_time_s=120)
    clock.advance(150)
    assert provider.describe(instance.instance_id).state is InstanceState.PREEMPTED

The fake is also in the provider registry: ``get_provider("fake", clock=clock)``.
"""

from spothop.testing.factories import (
    make_instance,
    make_market,
    make_markets,
    make_offering,
    make_offerings,
)
from spothop.testing.fake_provider import (
    FAKE_ERROR_CODES,
    FAKE_FAMILY,
    FAKE_QUOTA_EXCEEDED,
    FakeFamily,
    FakeProvider,
)
from spothop.testing.market import FakeMarket

__all__ = [
    "FAKE_ERROR_CODES",
    "FAKE_FAMILY",
    "FAKE_QUOTA_EXCEEDED",
    "FakeFamily",
    "FakeMarket",
    "FakeProvider",
    "make_instance",
    "make_market",
    "make_markets",
    "make_offering",
    "make_offerings",
]
