"""The fake provider: a cloud on an injectable clock, with no process, port or file.

A provider package like every cloud's (:mod:`spothop.providers.registry` finds
it by its :data:`FAMILY`), so ``get_provider("fake", clock=clock)`` works in
any process without importing the test helpers. Users' tests import it through
:mod:`spothop.testing`, which re-exports it with the factories.

- :mod:`~spothop.providers.fake.provider`: :class:`FakeProvider`, scripted
  launches, preemptions and errors on a :class:`~spothop.market.Clock`.
- :mod:`~spothop.providers.fake.market`: :class:`FakeMarket`, one offering's
  price and capacity.
- :mod:`~spothop.providers.fake.factories`: offerings, markets and instances
  with sensible defaults.
"""

from spothop.providers.fake.provider import FAKE_FAMILY

FAMILY = FAKE_FAMILY

__all__ = ["FAMILY"]
