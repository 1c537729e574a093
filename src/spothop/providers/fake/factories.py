"""Factories: valid offerings, markets and instances with one line, any field overridden.

Every factory returns a real spothop type (an :class:`~spothop.resources.offering.Offering`
model, a :class:`~spothop.providers.fake.market.FakeMarket`, an
:class:`~spothop.providers.base.Instance`) filled with plausible values, so a
test names only the fields it is about::

    offering = make_offering(instance_type="gpu.8x", gpu_count=8, spot_price_usd_per_hour=9.0)
    provider = FakeProvider(markets=[make_market(offering, capacity=2)])
    instance = make_instance(state=InstanceState.NOTICED, notice_time=100.0)

Defaults are the fake provider's: provider ``fake``, region ``fake-1``, zones
``fake-1a`` and ``fake-1b``, one H100 and one A100 type in each.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from spothop.providers.base import Instance, InstanceState
from spothop.providers.fake.market import FakeMarket
from spothop.resources.offering import Interconnect, Offering

DEFAULT_PROVIDER = "fake"
DEFAULT_REGION = "fake-1"
DEFAULT_ZONES = ("fake-1a", "fake-1b")
PRICE_DATE = dt.date(2026, 1, 1)

# The default types: (instance type, GPU, GPUs, vCPUs, memory GiB, on-demand, spot USD/h).
_TYPES = (
    ("gpu.h100x1", "H100-SXM5-80GB", 1, 26.0, 225.0, 4.00, 1.60),
    ("gpu.a100x1", "A100-SXM4-80GB", 1, 12.0, 85.0, 2.50, 0.90),
)


def make_offering(**overrides: Any) -> Offering:
    """An H100 offering of the fake provider in ``fake-1a``; ``overrides`` set any field."""
    fields: dict[str, Any] = {
        "provider": DEFAULT_PROVIDER,
        "region": DEFAULT_REGION,
        "zone": DEFAULT_ZONES[0],
        "instance_type": _TYPES[0][0],
        "gpu": _TYPES[0][1],
        "gpu_count": _TYPES[0][2],
        "vcpus": _TYPES[0][3],
        "memory_gib": _TYPES[0][4],
        "interconnect": Interconnect.NONE,
        "on_demand_price_usd_per_hour": _TYPES[0][5],
        "spot_price_usd_per_hour": _TYPES[0][6],
        "price_date": PRICE_DATE,
        "source": "spothop.testing",
    }
    fields.update(overrides)
    return Offering(**fields)


def make_offerings(
    provider: str = DEFAULT_PROVIDER,
    region: str = DEFAULT_REGION,
    zones: tuple[str, ...] = DEFAULT_ZONES,
) -> list[Offering]:
    """The default types in every zone: a small multi-zone catalog."""
    return [
        make_offering(
            provider=provider,
            region=region,
            zone=zone,
            instance_type=name,
            gpu=gpu,
            gpu_count=count,
            vcpus=vcpus,
            memory_gib=memory,
            on_demand_price_usd_per_hour=on_demand,
            spot_price_usd_per_hour=spot,
        )
        for zone in zones
        for name, gpu, count, vcpus, memory, on_demand, spot in _TYPES
    ]


def make_market(offering: Offering | None = None, **overrides: Any) -> FakeMarket:
    """The spot market of ``offering`` (default :func:`make_offering`); ``overrides`` set
    ``spot_price_usd_per_hour``, ``available``, ``capacity`` or ``since_s``."""
    return FakeMarket(offering or make_offering(), **overrides)


def make_markets(provider: str = DEFAULT_PROVIDER, **overrides: Any) -> list[FakeMarket]:
    """One market per offering of :func:`make_offerings`; ``overrides`` go to each market."""
    return [FakeMarket(o, **overrides) for o in make_offerings(provider=provider)]


def make_instance(**overrides: Any) -> Instance:
    """A running spot instance of the default offering; ``overrides`` set any field."""
    fields: dict[str, Any] = {
        "instance_id": "fake-000000000001",
        "provider": DEFAULT_PROVIDER,
        "region": DEFAULT_REGION,
        "zone": DEFAULT_ZONES[0],
        "instance_type": _TYPES[0][0],
        "spot": True,
        "state": InstanceState.RUNNING,
        "launched_at": 0.0,
        "price_usd_per_hour": _TYPES[0][6],
    }
    fields.update(overrides)
    return Instance(**fields)
