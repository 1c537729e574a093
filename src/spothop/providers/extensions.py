"""What a provider may do beyond :class:`~spothop.providers.base.Provider`: mixins, found with isinstance.

Generic code never asks which cloud it holds; it asks whether the provider
has an ability (``isinstance(provider, FleetLauncher)``) and uses it through
the mixin's interface, or falls back to the base interface when it has not.

- :class:`FleetLauncher`: start several workers in one call, letting the
  cloud choose among several instance types and zones (a cloud-side fleet).
  Without it, a caller launches the workers one by one with
  :meth:`Provider.launch`.
- :class:`OfferingNotes`: what the last :meth:`Provider.list_offerings`
  could not do as asked (a price API that could not be reached, so the
  built-in catalog's prices stood in), for a catalog refresh to tell the user.
- :class:`ClockKeeper`: the provider keeps time on a clock of its own (a
  simulated cloud's faster clock, a test's manual one, an adapter's injected
  one); the times it reports and bills by are that clock's. Without it, the
  provider bills by the wall.
- :class:`ConsoleOutput`: the provider shows an instance's console (the boot
  script's output and the agent unit's; EC2's GetConsoleOutput), for a
  status to say why an instance never started its agent.
- :class:`SharedStorage` (a runtime-checkable protocol): folders every instance
  of the provider sees at the same path as the controller does (the local
  cloud's world ``buckets:``, playing the object store). A plain path outside
  them is on the controller's disk only, and a job that names one is refused at
  launch (:func:`spothop.jobs.reachable.check_reachable`). Without it (every
  real cloud), the provider shares no folder: only an object-store URL reaches
  its instances.
- :class:`SharesHostNetwork`: the provider's instances share the controller
  host's network, so a loopback control plane reaches them.
- :class:`RunsNothing`: the provider's instances run no process at all (an
  in-memory simulation), so nothing on them ever opens a control plane.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from spothop.errors import ConfigError, ProviderError
from spothop.market.clock import Clock
from spothop.providers.base import Instance, LaunchRequest


@dataclass(frozen=True)
class FleetRequest:
    """``count`` instances like ``template``, each of a type and zone the cloud picks.

    ``template`` gives what every instance runs (bootstrap command, env, tags,
    spot or on-demand, maximum price) and the first choice of type and zone;
    ``alternatives`` are more ``(instance_type, zone)`` pairs the cloud may
    use (``zone`` ``None``: any zone of ``template.region``). Every instance of
    one fleet runs the same bootstrap and env, so a per-worker secret cannot be
    in it: give the fleet's workers a token of the fleet, or launch one by one.
    At least ``min_count`` must start, else the call raises and leaves nothing.
    """

    template: LaunchRequest
    count: int
    alternatives: Sequence[tuple[str, str | None]] = ()
    min_count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ConfigError(f"a fleet needs a count of at least 1, got {self.count}")
        if not 1 <= self.min_count <= self.count:
            raise ConfigError(
                f"a fleet's min_count must be between 1 and its count ({self.count}), got {self.min_count}"
            )

    @property
    def choices(self) -> list[tuple[str, str | None]]:
        """Every (instance_type, zone) the fleet may use, the template's first, without repeats."""
        first = (self.template.instance_type, self.template.zone)
        return list(dict.fromkeys([first, *self.alternatives]))


@dataclass(frozen=True)
class FleetResult:
    """The instances a fleet started (at least ``min_count``) and what the cloud refused on the way.

    ``refused`` holds one error per choice the cloud could not fill (no
    capacity there, a quota), each with the cloud's own code.
    """

    instances: list[Instance]
    refused: list[ProviderError] = field(default_factory=list)


class FleetLauncher(ABC):
    """A provider that starts several workers in one call across types and zones."""

    @abstractmethod
    def launch_fleet(self, request: FleetRequest) -> FleetResult:
        """Start up to ``request.count`` instances; fewer than ``min_count`` raises a ProviderError
        (the first refusal's type and code) and leaves none behind."""


class OfferingNotes(ABC):
    """A provider that says what its last offering list could not get as asked."""

    @abstractmethod
    def offering_notes(self) -> list[str]:
        """One sentence per shortfall of the last ``list_offerings``/``spot_prices`` (empty: none)."""


class ClockKeeper:
    """A provider on a clock of its own: ``clock`` (``now()`` in unix seconds of that clock).

    Every time the provider reports (``launched_at``, ``running_at``,
    ``notice_time``, ``ended_at``) and bills by is on this clock. A subclass
    gives ``clock`` as an attribute set in ``__init__`` or as a property.
    """

    if TYPE_CHECKING:  # declared for the type checker only: a subclass's attribute or property

        @property
        def clock(self) -> Clock: ...


@runtime_checkable
class ConsoleOutput(Protocol):
    """A provider that shows an instance's console output."""

    def console_output(self, instance_id: str) -> str:
        """The instance's console as the cloud shows it: its boot script's output and its agent
        unit's (empty before it boots); InstanceNotFound for an unknown id."""
        ...


@runtime_checkable
class SharedStorage(Protocol):
    """A provider whose instances see some folders of this machine at the same path."""

    def bucket_paths(self) -> Sequence[Path]:
        """The shared folders (absolute): a path inside one reads and writes the same files on
        every instance of this provider and on the controller. Empty: none is shared."""
        ...


@runtime_checkable
class SharesHostNetwork(Protocol):
    """A provider whose instances run on the controller's own host, its network shared: they
    reach a control plane on the host's loopback (``http://127.0.0.1:PORT``) as the controller
    does. The local cloud and the fake provider say so (``shares_host_network = True``); a real
    cloud's instances do not, and a job on one needs a control plane they can reach
    (``spothop server run --public-url``). :func:`shares_host_network` reads it."""

    shares_host_network: bool


def shares_host_network(provider: object) -> bool:
    """Whether ``provider``'s instances share the controller host's network (false unless it says)."""
    return isinstance(provider, SharesHostNetwork) and bool(provider.shares_host_network)


@runtime_checkable
class RunsNothing(Protocol):
    """A provider whose instances run no process (the fake provider: an in-memory cloud whose
    instances are records). Nothing on them opens a control plane, so a controller may drive
    them with the database plane (no control plane URL), which no instance that runs something
    could use: an instance shares nothing with the controller but the network (DESIGN.md).
    :func:`runs_nothing` reads it."""

    runs_nothing: bool


def runs_nothing(provider: object) -> bool:
    """Whether ``provider``'s instances run no process (false unless it says)."""
    return isinstance(provider, RunsNothing) and bool(provider.runs_nothing)
