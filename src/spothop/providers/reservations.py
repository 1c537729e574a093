"""Reserved capacity: pools of instances an account holds, as a provider ability found with isinstance.

A reservation is ``count`` instances of one type in one place that the
account has paid for: they are never preempted and cost the pool's rate
whatever the spot market does. A provider that holds some implements
:class:`ReservedCapacity` (``isinstance(provider, ReservedCapacity)``);
generic code lists the pools with :meth:`ReservedCapacity.list_reservations`
and launches into one with ``LaunchRequest(reservation=<id>, spot=False)``.

The rules (beside :mod:`spothop.providers.base`'s):

- a launch into a pool that is full (``in_use == count`` live instances) is
  refused with :class:`~spothop.errors.CapacityUnavailable` and the cloud's
  capacity code; the check and the launch are one step, so two launches
  racing for the last slot cannot both win;
- a reserved launch must match the pool's instance type and place, and be
  ``spot=False``; otherwise :class:`~spothop.errors.InvalidRequest` says which;
- an unknown reservation id is a :class:`~spothop.errors.ProviderError`
  (``InvalidRequest``) naming it, on every provider, with or without this
  ability.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

from spothop.errors import InvalidRequest
from spothop.providers.base import LaunchRequest


@dataclass(frozen=True)
class Reservation:
    """One reserved pool: where, what, how many, at what rate, and how many run in it now."""

    reservation_id: str
    provider: str
    region: str
    zone: str | None
    instance_type: str
    count: int
    price_usd_per_hour: float
    in_use: int = 0

    @property
    def free(self) -> int:
        return max(0, self.count - self.in_use)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "free": self.free}


class ReservedCapacity(ABC):
    """A provider that holds reserved pools and launches into them (``LaunchRequest.reservation``)."""

    @abstractmethod
    def list_reservations(self) -> list[Reservation]:
        """Every pool this provider holds, with ``in_use`` counted now."""


def check_reserved_request(
    provider: str, code: str, request: LaunchRequest, pools: list[Reservation]
) -> Reservation:
    """The pool ``request.reservation`` names, after checking the request fits it (InvalidRequest if not).

    For adapters: an unknown id names itself and the pools there are; a spot
    request, another instance type or another place says what to change.
    """
    pool = next((p for p in pools if p.reservation_id == request.reservation), None)
    if pool is None:
        held = ", ".join(p.reservation_id for p in pools) or "none"
        raise InvalidRequest(
            provider,
            code,
            f"no reservation {request.reservation!r} (reservations here: {held})",
        )
    where = pool.zone or pool.region
    if request.spot:
        raise InvalidRequest(
            provider,
            code,
            f"reservation {pool.reservation_id!r} is not spot: launch with spot=False",
        )
    if request.instance_type != pool.instance_type:
        raise InvalidRequest(
            provider,
            code,
            f"reservation {pool.reservation_id!r} holds {pool.instance_type}, not {request.instance_type}",
        )
    if request.region != pool.region or request.zone not in (None, pool.zone):
        asked = request.zone or request.region
        raise InvalidRequest(
            provider,
            code,
            f"reservation {pool.reservation_id!r} is in {where}, not {asked}",
        )
    return pool


def refuse_reservation(provider: str, code: str, request: LaunchRequest) -> None:
    """For a provider with no reserved pools: raise InvalidRequest if the request names one."""
    if request.reservation is not None:
        raise InvalidRequest(
            provider,
            code,
            f"no reservation {request.reservation!r}: {provider} holds no reserved capacity",
        )
