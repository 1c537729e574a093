"""The EC2 provider: spothop's provider contract (providers/base.py) over boto3.

:class:`AwsProvider` is built in floors, each a module of its own, each on
the one below: :mod:`.calls` (clients, retried calls, ``NextToken`` paging),
:mod:`.prices` (offerings and prices), :mod:`.instances` (describe, list,
terminate) and :mod:`.launch` (instances and fleets). This module holds its
constructor (options, capabilities) and the registry's family,
:class:`AwsFamily`.

What each method asks of EC2 (every list call paginated with ``NextToken``):

- ``list_offerings``: ``DescribeInstanceTypes`` (the GPU families, ``GpuInfo``),
  ``DescribeInstanceTypeOfferings`` (which zones sell each type), on-demand
  prices from the Pricing API (``GetProducts``; where it cannot be reached the
  built-in catalog's prices stand in, and :meth:`offering_notes` says so) and
  spot prices from ``DescribeSpotPriceHistory``.
- ``spot_prices``: ``DescribeSpotPriceHistory`` (the newest Linux price per
  zone and type), ``available`` from ``GetSpotPlacementScores`` where the
  account may call it (a score under :data:`AVAILABLE_MIN_SCORE` is not
  available, :mod:`.prices`); where it may not (or the API is not there, as on moto) every
  market reads available and the notes say why.
- ``launch``: ``RunInstances``, spot as ``InstanceMarketOptions`` one-time
  with ``terminate`` on interruption, IMDSv2 required, the launch token as
  ``ClientToken`` (a retried call cannot start a second instance) and the
  user-data of :mod:`spothop.providers.aws.userdata`.
- ``launch_fleet`` (:class:`~spothop.providers.extensions.FleetLauncher`):
  ``CreateFleet`` of type ``instant`` with the ``price-capacity-optimized``
  spot allocation across every type and zone asked, from a launch template
  made for the call and deleted after it.
- ``console_output`` (:class:`~spothop.providers.extensions.ConsoleOutput`):
  ``GetConsoleOutput`` (the latest output), decoded; the controller shows its
  tail for an instance whose agent was lost.
- ``describe`` / ``list_instances`` / ``terminate``: ``DescribeInstances``
  (by id; by tag), ``TerminateInstances`` (idempotent); a live spot
  instance whose request ``DescribeSpotInstanceRequests`` shows
  ``marked-for-termination`` reads ``noticed`` (notice and termination times
  from the status's ``UpdateTime`` and EC2's two minutes).

Tags on every instance: the launch's own (``spothop-job``, ``spothop-node``,
``spothop-token``: the launch token, made here when the caller gave none),
``Name``, and ``spothop-price-usd-per-hour`` (the rate at launch, what
``cost_microusd`` is computed from). ``terminate`` first tags
``spothop-ended-at`` (the provider clock's time) so the cost stops there;
an instance ended by EC2 stops at the time its ``StateTransitionReason`` gives.
``cost_microusd`` is an estimate (the rate at launch × seconds since
``LaunchTime``); the bill is AWS's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spothop.market.clock import Clock, WallClock
from spothop.providers.aws import sdk
from spothop.providers.aws.calls import NAME
from spothop.providers.aws.instances import NOTICE_LEAD_TIME_S
from spothop.providers.aws.launch import IMAGE_ID_ENV, Ec2Launch
from spothop.providers.base import BOOT_DEADLINE_S, Capabilities, Provider
from spothop.providers.extensions import (
    ClockKeeper,
    ConsoleOutput,
    FleetLauncher,
    OfferingNotes,
)
from spothop.providers.local.metadata.aws import BILLING
from spothop.providers.records import OneNameFamily, split_list

DEFAULT_REGION = "us-east-1"
JOB_TAG = "spothop-job"

ENV_OPTIONS = {  # option → the environment variable that sets it when the option is not given
    "regions": "SPOTHOP_AWS_REGIONS",
    "endpoint_url": "SPOTHOP_AWS_ENDPOINT_URL",
    "image_id": IMAGE_ID_ENV,
    "instance_profile": "SPOTHOP_AWS_INSTANCE_PROFILE",
    "security_group_ids": "SPOTHOP_AWS_SECURITY_GROUP_IDS",
    "key_name": "SPOTHOP_AWS_KEY_NAME",
    "install": "SPOTHOP_AWS_INSTALL",
    "install_dependencies": "SPOTHOP_AWS_INSTALL_DEPENDENCIES",
}
_OFF = frozenset({"0", "false", "no", "off"})


class AwsProvider(Ec2Launch, Provider, FleetLauncher, OfferingNotes, ClockKeeper, ConsoleOutput):
    """EC2 in ``regions`` (the session's region when none are given). See the module docstring.

    ``install_dependencies`` (``$SPOTHOP_AWS_INSTALL_DEPENDENCIES``; on by
    default): whether an instance installs the control plane's wheel with its
    dependencies from the package index (a stock AMI) or on its image's own
    ``python3`` packages (off: ``0``, ``false``, ``no``; a custom AMI that
    holds spothop's dependencies, as the rehearsal's image does: docs/providers-aws.md).

    ``session`` (a boto3 Session) and ``endpoint_url`` (moto's server, say)
    are for tests and private endpoints; ``clock`` times costs and backoff
    waits; ``page_size`` caps every page (EC2's own limits otherwise).
    """

    def __init__(
        self,
        name: str = NAME,
        *,
        regions: Sequence[str] | str | None = None,
        profile: str | None = None,
        session: Any = None,
        endpoint_url: str | None = None,
        image_id: str | None = None,
        instance_profile: str | None = None,
        security_group_ids: Sequence[str] | str | None = None,
        key_name: str | None = None,
        install: str | None = None,
        install_dependencies: bool | str = True,
        clock: Clock | None = None,
        placement_scores: bool = True,
        pricing: bool = True,
        page_size: int | None = None,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            spot=True,
            on_demand=True,
            notice_lead_time_s=NOTICE_LEAD_TIME_S,
            advance_notice=True,
            notice_protocol="aws",
            per_zone_spot_prices=True,
            max_price_bids=True,
            billing=BILLING,  # EC2's rule, declared beside the imitated protocol
            typical_boot_s=120.0,  # GPU AMI to agent up: 1-2 min (docs/placement.md, boot)
            boot_deadline_s=BOOT_DEADLINE_S,
        )
        self._session = sdk.make_session(profile, session)
        sdk.check_credentials(name, self._session)
        asked = split_list(regions) or [sdk.default_region(self._session) or DEFAULT_REGION]
        self.regions = [sdk.check_region(name, self._session, r) for r in asked]
        self.endpoint_url = endpoint_url
        self.image_id = image_id
        self.instance_profile = instance_profile
        self.security_group_ids = split_list(security_group_ids)
        self.key_name = key_name
        self.install = install
        self.install_dependencies = _switch(install_dependencies)
        self.clock = clock or WallClock()
        self.placement_scores = placement_scores
        self.pricing = pricing
        self.page_size = page_size
        self._clients = {}
        self._types = {}
        self._on_demand = {}
        self._quotes = {}
        self._images = {}
        self._region_of = {}
        self._notes = []


# -- the family: one name, options from the call or the environment ---------------


class AwsFamily(OneNameFamily):
    """The registry's family for EC2: one provider name, ``aws``."""

    provider_name = NAME
    adapter = "EC2"
    provider_class = AwsProvider
    taken = frozenset(
        {
            "regions",
            "profile",
            "session",
            "endpoint_url",
            "image_id",
            "instance_profile",
            "security_group_ids",
            "key_name",
            "install",
            "install_dependencies",
            "clock",
            "placement_scores",
            "pricing",
            "page_size",
        }
    )
    env_options = ENV_OPTIONS


def _switch(value: bool | str) -> bool:
    """An on/off option: a bool, or its variable's text (``0``, ``false``, ``no``, ``off``: off)."""
    if isinstance(value, bool):
        return value
    return value.strip().lower() not in _OFF
