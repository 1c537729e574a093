"""The provider interface: what every cloud adapter does, and the rules it keeps.

A provider does five things — list offerings, read spot prices, launch,
describe, terminate — behind :class:`Provider`. What a cloud can do beyond
that is declared as data in :class:`Capabilities`, so generic code asks
``provider.capabilities.spot`` and never "is this AWS?".

Contracts every adapter keeps (the tests in ``tests/providers`` check them on
the local cloud, and each real adapter's tests check them against its SDK's
fake):

- ``launch`` either returns an :class:`Instance` that exists (it may still be
  ``pending``) or raises a :class:`~spothop.errors.ProviderError` subclass
  carrying the cloud's own error code and message; it never leaves an
  instance behind after raising.
- ``describe`` raises :class:`~spothop.errors.InstanceNotFound` for an id the
  cloud does not know; a terminated instance is still described (state
  ``terminated`` or ``preempted``) for as long as the cloud keeps its record.
- ``launch`` with ``request.reservation`` set starts the instance in that
  reserved pool of the account (:mod:`spothop.providers.reservations`): not
  spot, never preempted, billed at the pool's rate, refused with
  ``CapacityUnavailable`` once the pool is full. A provider that has no
  reservation of that id (or none at all) raises a
  :class:`~spothop.errors.ProviderError` naming it, and launches nothing.
- ``terminate`` is idempotent: an unknown or already terminated instance
  returns silently. It returns fast; the instance may take a little longer
  to stop, which ``describe`` shows.
- Prices are USD per instance-hour (rates); amounts billed are integer
  micro-dollars (``cost_microusd``), turned into dollars only where a person
  reads them. Times are unix seconds of the provider's clock (a simulated
  cloud's clock may run faster than the wall).
- Every type here serialises itself (``to_dict()``: JSON-ready, enums as their
  values), so the CLI and the server print what the library returns.

A provider is found by name through :mod:`spothop.providers.registry`; the
conformance suite (``tests/providers/test_conformance.py``) runs these
contracts on the local cloud, :class:`spothop.testing.FakeProvider` and every
real adapter.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from spothop.resources.offering import Offering

MICROUSD_PER_USD = 1_000_000  # the ledger contract: money in integer micro-dollars


class InstanceState(StrEnum):
    PENDING = "pending"  # accepted, booting
    RUNNING = "running"
    NOTICED = "noticed"  # an interruption notice was given; it is still running
    PREEMPTED = "preempted"  # the cloud took it back
    TERMINATED = "terminated"  # we (or the user) ended it
    FAILED = "failed"  # the boot or the bootstrap command failed before it ran

    @property
    def is_alive(self) -> bool:
        return self in (InstanceState.PENDING, InstanceState.RUNNING, InstanceState.NOTICED)


@dataclass(frozen=True)
class BillingRule:
    """How a cloud turns an instance's running time into billed seconds, as data.

    ``billed_seconds(usage_s)``: nothing for an instance that never ran;
    otherwise at least ``minimum_s``, rounded up to whole ``increment_s``
    (1: per second; 3600: per started hour). ``price_fixed_s``: the price at
    launch holds this long (a protection period), the market's after.
    ``source`` names the cloud's documentation. The default bills the exact
    running time (a cloud that documents nothing else).
    """

    increment_s: float = 0.0  # 0: continuous (no rounding)
    minimum_s: float = 0.0
    price_fixed_s: float = 0.0
    source: str = ""

    def billed_seconds(self, usage_s: float) -> float:
        if usage_s <= 0:
            return 0.0
        billed = max(usage_s, self.minimum_s)
        if self.increment_s > 0:
            # 1e-9: a float sum of ticks a hair over a whole increment is that increment
            billed = math.ceil(billed / self.increment_s - 1e-9) * self.increment_s
        return billed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Capabilities:
    """What a provider can do, as data. Generic code decides on these, never on the name."""

    spot: bool = True
    on_demand: bool = True
    notice_lead_time_s: float | None = (
        None  # the cloud's documented final-notice lead; None: no notice
    )
    advance_notice: bool = False  # a signal before the final notice (AWS rebalance recommendation)
    notice_protocol: str | None = None  # which on-instance watcher reads its notices
    per_zone_spot_prices: bool = True
    max_price_bids: bool = False  # accepts a maximum spot price with the launch
    billing: BillingRule = BillingRule()  # how running time becomes billed seconds
    # Launch call to the instance's agent up, in the provider's clock (a simulated cloud's
    # seconds); what placement charges a restart for booting. None: unknown (a default is used).
    typical_boot_s: float | None = None
    # Launch call to the agent registered, at the latest, in the provider's clock: an instance
    # whose agent has not registered by then is lost (terminated, its work relaunched; docs/
    # controller.md, agent liveness). None: not watched (a provider with no agents, a simulation).
    boot_deadline_s: float | None = None
    # Where ``Instance.cost_microusd`` comes from, when it is a bill the cloud itself keeps (the
    # local cloud's billing records, a bill an adapter was given): the report reconciles the
    # ledger against it and names it. None: the adapter has no bill to read (a cloud whose bill
    # API spothop does not call) and its figure, if any, is its own estimate from the price it
    # launched at; the report says "estimated, not reconciled" (docs/observe.md).
    bill_source: str | None = None


# A real cloud's boot deadline: a GPU image boots and installs spothop in 1-3 minutes.
BOOT_DEADLINE_S = 600.0


@dataclass(frozen=True)
class Distribution:
    """Where an instance gets spothop: the control plane's wheel.

    ``url`` is where the instance downloads it (the control plane's
    ``/v1/dist/{sha256}/{filename}``), ``sha256`` the hex digest the boot script checks
    before installing (a mismatch: the agent is not started), ``filename`` the
    wheel's file name (``spothop-0.1.0-py3-none-any.whl``; pip reads the
    version and tags from it).
    """

    url: str
    sha256: str
    filename: str


class DiskTier(StrEnum):
    """How fast a root volume is, in SkyPilot's words; each adapter maps a tier to its cloud's
    volume type (``best``: the fastest it sells, as ``ultra``)."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    ULTRA = "ultra"
    BEST = "best"


@dataclass(frozen=True)
class DiskSpec:
    """The root volume a launch asks for: ``size_gib`` (None: the image's own size) and
    ``tier`` (None: the adapter's default volume type). A real adapter sizes the boot disk from
    it (EC2's root block device, Compute Engine's boot disk, Alibaba's system disk); the local
    cloud records it on the instance."""

    size_gib: int | None = None
    tier: DiskTier | None = None

    def __post_init__(self) -> None:
        if self.size_gib is not None and not 1 <= self.size_gib <= 65_536:
            raise ValueError(f"a root volume of 1 to 65,536 GiB, got {self.size_gib}")
        if self.tier is not None:
            object.__setattr__(self, "tier", DiskTier(self.tier))


@dataclass(frozen=True)
class LaunchRequest:
    """Everything needed to start one instance.

    ``zone`` ``None`` lets the provider choose within ``region``.
    ``bootstrap_command`` is what the instance runs at boot (normally the
    spothop agent); ``env`` is its environment, on top of the provider's own
    variables (metadata URL and the like). ``reservation``: the id of a
    reserved pool to launch into (``spot`` False; see the module's contract).
    ``image``: a container image the worker runs in (the part of
    ``bootstrap_command`` after ``--``; the agent stays on the host, see
    :mod:`spothop.providers.container`); a provider with no container runtime
    raises :class:`~spothop.errors.ProviderError` naming the option.
    ``distribution``: the wheel the boot script installs spothop from (see
    :func:`spothop.providers.bootstrap.install_step`); ``None``: the
    provider's ``install`` command, else the package index.
    ``disk``: the root volume's size and tier (:class:`DiskSpec`; None: the provider's
    default). ``image_id``: the cloud's own machine image to boot (an AMI, a Compute Engine
    image, an Alibaba image id) instead of the one the provider is configured with.
    """

    instance_type: str
    region: str
    zone: str | None = None
    spot: bool = True
    bootstrap_command: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None
    max_price_usd_per_hour: float | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    reservation: str | None = None
    image: str | None = None
    distribution: Distribution | None = None
    disk: DiskSpec | None = None
    image_id: str | None = None


@dataclass(frozen=True)
class Instance:
    """A provider's view of one instance at the moment it was described."""

    instance_id: str
    provider: str
    region: str
    zone: str | None
    instance_type: str
    spot: bool
    state: InstanceState
    launched_at: float
    price_usd_per_hour: float
    ended_at: float | None = None
    running_at: float | None = None  # when billing started (None: it has not, or unknown)
    billed_seconds: float = 0.0
    cost_microusd: int = 0  # billed so far, integer micro-dollars
    notice_time: float | None = None  # when the interruption notice was given
    termination_time: float | None = None  # when the cloud will (or did) take it back
    metadata_url: str | None = None
    name: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    reservation: str | None = None  # the reserved pool it holds a slot of; None: spot or on-demand
    # Why the cloud says it ended, in its words (EC2's StateReason; the local cloud's "boot
    # script failed: <its console's last line>"); None while it lives or where the cloud says not.
    state_reason: str | None = None

    @property
    def market(self) -> str:
        """How it is bought: ``reserved`` (in a pool), ``spot`` or ``on-demand``."""
        return "reserved" if self.reservation else "spot" if self.spot else "on-demand"

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready: ``state`` as its value, ``tags`` a plain dict."""
        return {**asdict(self), "state": self.state.value, "tags": dict(self.tags)}


@dataclass(frozen=True)
class SpotPrice:
    provider: str
    region: str
    zone: str | None
    instance_type: str
    price_usd_per_hour: float
    timestamp: float
    available: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Provider(ABC):
    """One cloud behind spothop's interface. See the module docstring for the contracts."""

    name: str
    capabilities: Capabilities

    @abstractmethod
    def list_offerings(self) -> list[Offering]:
        """Every instance type this provider can launch, where, at list prices."""

    @abstractmethod
    def spot_prices(self, instance_types: Sequence[str] | None = None) -> list[SpotPrice]:
        """Current spot prices (and availability, where the cloud signals it)."""

    @abstractmethod
    def launch(self, request: LaunchRequest) -> Instance:
        """Start one instance, or raise a ProviderError subclass with the cloud's code."""

    @abstractmethod
    def describe(self, instance_id: str) -> Instance:
        """The instance as the cloud sees it now; InstanceNotFound if unknown."""

    @abstractmethod
    def list_instances(self) -> list[Instance]:
        """Instances this provider launched that it still has records of."""

    @abstractmethod
    def terminate(self, instance_id: str) -> None:
        """End the instance. Idempotent: unknown or already ended returns silently."""
