"""The controller finds a provider's optional abilities by their mixins, never by attribute probes."""

from __future__ import annotations

import time

from spothop.jobs.controller.clock import provider_now
from spothop.jobs.controller.observe import clock_rate
from spothop.market import ManualClock
from spothop.market.clock import SimClock
from spothop.providers.aliyun import AliyunProvider
from spothop.providers.aws import AwsProvider
from spothop.providers.extensions import ClockKeeper
from spothop.providers.gcp import GcpProvider
from spothop.providers.local.provider import LocalProvider
from spothop.testing import FakeProvider, make_market, make_offerings


def test_the_providers_with_a_clock_of_their_own_say_so() -> None:
    for cls in (AwsProvider, GcpProvider, AliyunProvider, LocalProvider, FakeProvider):
        assert issubclass(cls, ClockKeeper), cls.__name__


def test_now_is_the_providers_clock_when_it_keeps_one_else_the_wall() -> None:
    fake = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=ManualClock(42.0))
    assert provider_now(fake) == 42.0
    assert clock_rate(fake) == 1.0

    class Probed:  # a clock, but not the ability: the wall, as a real cloud bills
        clock = SimClock(5.0, 0.0)

    before = time.time()
    assert before <= provider_now(Probed()) <= time.time()  # type: ignore[arg-type]
    assert provider_now(None) >= before
