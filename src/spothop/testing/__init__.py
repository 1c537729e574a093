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

The fake lives in :mod:`spothop.providers.fake`, a provider package the registry finds like
every cloud's, so ``get_provider("fake", clock=clock)`` works too; this package re-exports it.
"""

from spothop.providers.fake.factories import (
    make_instance,
    make_market,
    make_markets,
    make_offering,
    make_offerings,
)
from spothop.providers.fake.market import FakeMarket
from spothop.providers.fake.provider import (
    FAKE_ERROR_CODES,
    FAKE_FAMILY,
    FAKE_QUOTA_EXCEEDED,
    FakeFamily,
    FakeProvider,
)

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
